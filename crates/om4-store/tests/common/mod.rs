//! Helpers shared by the store tests.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;

use om4_store::{Om4Store, ReadPool, SynthConfig, SynthPaths, channel_names, synthesize};

pub fn small(layout_compact: bool) -> SynthConfig {
    SynthConfig {
        ny: 6,
        nx: 10,
        times: 7,
        levels: 3,
        layout: if layout_compact { om4_store::SynthLayout::Compact } else { om4_store::SynthLayout::Flat },
        consolidated: false,
        ..SynthConfig::default()
    }
}

pub fn make(dir: &Path, cfg: &SynthConfig) -> SynthPaths {
    synthesize(dir, cfg, |_, _| {}).expect("synthesize")
}

/// Every channel at every time, read in one call.
pub fn read_all(store: &Om4Store, levels: usize) -> Vec<f32> {
    let names = channel_names(levels);
    let set = store.channels(&names).expect("channels");
    let sel = store.select(&om4_store::DateRange::ALL).expect("selection");
    let positions: Vec<usize> = (0..sel.len()).collect();
    let mut out = vec![0f32; positions.len() * set.len() * set.grid().plane()];
    store.reader(&ReadPool::new(2).unwrap(), &set, &sel).read(&positions, &mut out).expect("read");
    out
}

#[allow(unused_imports)] // not every test binary compares bits
pub use om4_testkit::bits;

/// Rewrites one JSON metadata file of an array.
pub fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

/// Copies a folder tree.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
