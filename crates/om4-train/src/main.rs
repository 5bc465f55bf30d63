//! `om4-train`: see the crate documentation (`om4_train`) for its subcommands.

fn main() -> std::process::ExitCode {
    om4_train::main()
}
