//! The loopback check of `examples/sharded_check.rs` on one rank, without `mpirun` (MPI's
//! singleton initialization): `cargo test -p om4-mpi --features mpi`. A harness-less test, because
//! MPI may be initialized once per process. `.ci/run` runs the same check on 4 ranks.

#[path = "../examples/sharded_check.rs"]
mod check;

fn main() -> std::process::ExitCode {
    check::main()
}
