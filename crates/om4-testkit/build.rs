//! Nothing to build: the crate has a build script only so that its `[build-dependencies]` (feature
//! pins for the host side, Cargo.toml) take part in every workspace build.

fn main() {}
