//! Pure planning: batch plans at 1° and 0.25° (77 + 3 channels, hist 1, steps 4), and
//! normalize + mask + gather throughput at 2° and 1° (on the global rayon pool: all cores).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use om4_batch::{
    BatchPlan, GatheredBatch, Grid, LandMask, NormOrder, Normalization, Roles, Sample, WindowSpec, fill_groups,
    prepare_and_gather_into,
};

fn plan(c: &mut Criterion) {
    let spec = WindowSpec::new(1, 4, 1).expect("spec");
    let mut group = c.benchmark_group("plan");
    for batch in [1usize, 4, 16] {
        let samples: Vec<Sample> = (0..batch).map(|i| Sample { spec, start: i * 7 }).collect();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::new("batch", batch), &samples, |b, s| {
            b.iter(|| BatchPlan::new(s, &Roles::samudra(), &[77, 3]).expect("plan"));
        });
    }
    group.finish();

    // The plan is grid-independent; the gather is not.
    let mut group = c.benchmark_group("prepare_gather");
    group.sample_size(10);
    for (name, grid) in [("2deg", Grid { y: 90, x: 180 }), ("1deg", Grid { y: 180, x: 360 })] {
        let plane = grid.plane();
        let prep = |c: usize| {
            Normalization::new(
                vec![1.0; c],
                vec![2.0; c],
                LandMask::all_wet(c, plane),
                NormOrder::NormalizeThenMask,
                0.0,
            )
            .expect("prep")
        };
        let (p0, p1) = (prep(77), prep(3));
        let plan = BatchPlan::new(&[Sample { spec, start: 0 }], &Roles::samudra(), &[77, 3]).expect("plan");
        let groups = fill_groups(&plan, grid, |_, t, c, out: &mut [f32]| -> Result<(), om4_batch::Error> {
            out.fill((t * 100 + c) as f32);
            Ok(())
        })
        .expect("fill");
        group.throughput(Throughput::Bytes((plan.planes().unique * plane * 4) as u64));
        // Outputs reused across iterations, as the loader and `om4 bench batch` reuse them.
        let mut out = GatheredBatch::default();
        group.bench_function(BenchmarkId::new("hist1_steps4_batch1", name), |b| {
            b.iter_batched(
                || groups.clone(),
                |mut g| prepare_and_gather_into(&plan, &mut g, &[&p0, &p1], grid, &mut out).expect("gather"),
                criterion::BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, plan);
criterion_main!(benches);
