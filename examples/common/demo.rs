//! The synthetic demo store the examples train on when given no store.

use std::path::{Path, PathBuf};

use om4_store::{SynthConfig, SynthPaths, synthesize};

/// Where the demo store lives: `$OM4_DEMO_DIR`, else `target/om4-demo` under the current
/// directory (computed at run time, so a binary carried to another machine works there).
pub(crate) fn demo_dir() -> PathBuf {
    std::env::var_os("OM4_DEMO_DIR").map_or_else(|| Path::new("target").join("om4-demo"), PathBuf::from)
}

/// The synthetic demo store: 3 levels (13 prognostic + 3 boundary channels), 32 × 64, 146
/// five-day steps; written once, reused after.
pub(crate) fn demo_store() -> Result<SynthPaths, Box<dyn std::error::Error>> {
    let dir = demo_dir();
    let paths = SynthPaths::under(&dir);
    let marker = dir.join("complete");
    if marker.is_file() {
        println!("using the synthetic store in {}", dir.display());
        return Ok(paths);
    }
    println!("writing a synthetic OM4 store to {} (once)", dir.display());
    let cfg = SynthConfig { ny: 32, nx: 64, times: 146, levels: 3, seed: 1, ..SynthConfig::default() };
    synthesize(&dir, &cfg, |_, _| {})?;
    std::fs::write(marker, "")?;
    Ok(paths)
}
