//! Times the gradient all-reduce of data-parallel training: `MpiCollective::all_reduce_f32` over
//! buckets of `om4_samudra::BUCKET_FLOATS` (16 Mi floats), summing a gradient of N floats (default
//! 84,000,000, a v2 network), as `Trainer` does once per optimizer step.
//!
//! `mpirun -n W target/release/examples/allreduce_bench [FLOATS] [REPEATS]`; rank 0 prints the
//! time per step and the algorithm bandwidth (gradient bytes / time).

use std::time::Instant;

use om4_mpi::MpiCollective;
use om4_mpi::{Collective, ReduceOp};

/// As `om4_samudra::BUCKET_FLOATS` (om4-mpi does not depend on om4-samudra).
const BUCKET_FLOATS: usize = 16 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let floats: usize = args.next().map_or(Ok(84_000_000), |a| a.parse())?;
    let repeats: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or("MPI init failed")?;
    let collective = MpiCollective::new(&universe.world())?;
    let mut gradient: Vec<f32> = (0..floats).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..=repeats {
        collective.barrier();
        let t0 = Instant::now();
        for bucket in gradient.chunks_mut(BUCKET_FLOATS) {
            collective.all_reduce_f32(bucket, ReduceOp::Sum)?;
        }
        times.push(t0.elapsed().as_secs_f64());
    }
    times.remove(0); // the first call sets up the connections
    times.sort_by(f64::total_cmp);
    if collective.rank() == 0 {
        let bytes = (floats * 4) as f64;
        let (best, median) = (times[0], times[times.len() / 2]);
        println!(
            "{} ranks, {floats} floats ({:.0} MB) in {} buckets: best {:.1} ms, median {:.1} ms per all-reduce; \
             {:.2} GB/s algorithm bandwidth (best)",
            collective.world_size(),
            bytes / 1e6,
            floats.div_ceil(BUCKET_FLOATS),
            best * 1e3,
            median * 1e3,
            bytes / best / 1e9
        );
    }
    Ok(())
}
