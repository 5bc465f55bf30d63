//! Mangled metadata never panics: every JSON metadata file of a store and of its statistics
//! stores (array, attributes, group, consolidated, v2 and v3) gets one value replaced by something
//! of another kind or size, or is cut short, and then opening the store, choosing every channel,
//! selecting time, loading masks and statistics and reading a plane must each return `Ok` or an
//! error, never panic.
//!
//! Likewise for mangled chunks: bytes of a chunk or shard file overwritten, cut or appended, in
//! stores of every codec om4 decodes itself (raw, blosc, zstd, shards) or through zarrs.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use om4_store::{Codec, Om4Store, ReadPool, SynthConfig, SynthLayout, ZarrFormat, channel_names, synthesize};
use proptest::prelude::*;

type Pristine = (tempfile::TempDir, Vec<PathBuf>);

/// Small stores, one folder per configuration (data, means and stds stores side by side).
fn synthesize_all(cfgs: impl FnOnce(SynthConfig) -> Vec<SynthConfig>) -> Pristine {
    let dir = tempfile::tempdir().unwrap();
    let base = SynthConfig { ny: 3, nx: 4, times: 4, levels: 2, consolidated: false, ..SynthConfig::default() };
    let folders = cfgs(base)
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let folder = dir.path().join(i.to_string());
            synthesize(&folder, c, |_, _| {}).unwrap();
            folder
        })
        .collect();
    (dir, folders)
}

/// Pristine folders to copy: flat v2 unconsolidated, flat v2 consolidated, compact v3 sharded,
/// compact v3 sharded and consolidated.
fn pristine() -> &'static Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    P.get_or_init(|| {
        synthesize_all(|base| {
            vec![
                base.clone(),
                SynthConfig { consolidated: true, ..base.clone() },
                SynthConfig { layout: SynthLayout::Compact, format: ZarrFormat::V3, shard: Some(2), ..base.clone() },
                SynthConfig {
                    layout: SynthLayout::Compact,
                    format: ZarrFormat::V3,
                    shard: Some(2),
                    consolidated: true,
                    ..base
                },
            ]
        })
    })
}

/// The files below `dir` whose path `keep` accepts, in a stable order.
fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, keep, out);
        } else if keep(&path) {
            out.push(path);
        }
    }
}

fn is_metadata(path: &Path) -> bool {
    matches!(
        path.file_name().and_then(|n| n.to_str()),
        Some(".zarray" | ".zattrs" | ".zgroup" | ".zmetadata" | "zarr.json")
    )
}

/// Every node of a JSON document, as JSON pointers.
fn pointers(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, item) in map {
                pointers(item, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        _ => {}
    }
}

/// Replacements of another kind or an extreme size.
fn replacement(k: usize) -> serde_json::Value {
    use serde_json::json;
    [
        json!(null),
        json!(-1),
        json!(0),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e300),
        json!(0.5),
        json!(""),
        json!("NaN"),
        json!("../../escape"),
        json!([]),
        json!([0]),
        json!([1_000_000_000_000u64, 1_000_000_000_000u64]),
        json!({}),
        json!(true),
    ][k % 15]
        .clone()
}

/// Open, validate, select, load masks and statistics and read one plane of every channel: each
/// may fail, none may panic. Returns how far it got (5: the plane was read).
fn exercise(folder: &Path) -> usize {
    let Ok(store) = Om4Store::open(folder.join("OM4.zarr")) else { return 0 };
    let _ = store.channel_names();
    let names = channel_names(2);
    let Ok(set) = store.channels(&names) else { return 1 };
    let _ = store.masks(&set);
    for stats in ["OM4_means.zarr", "OM4_stds.zarr"] {
        if let Ok(stats) = om4_store::StatsStore::open(folder.join(stats)) {
            let _ = stats.values(&set);
        }
    }
    let Ok(sel) = store.select(&om4_store::DateRange::ALL) else { return 2 };
    let plane = set.grid().plane();
    if sel.is_empty() || plane > 1 << 20 {
        return 3;
    }
    let mut out = vec![0f32; set.len() * plane];
    let pool = ReadPool::new(2).unwrap();
    match store.reader(&pool, &set, &sel).read(&[0], &mut out) {
        Ok(()) => 5,
        Err(_) => 4,
    }
}

#[test]
fn unmangled_stores_go_all_the_way() {
    // Without this, a broken `exercise` would pass the property tests by stopping early.
    for folder in pristine().1.iter().chain(&pristine_chunks().1) {
        assert_eq!(exercise(folder), 5, "{}", folder.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]
    #[test]
    fn mangled_metadata_is_an_error_never_a_panic(
        which in 0usize..3, file in any::<prop::sample::Index>(), node in any::<prop::sample::Index>(),
        kind in 0usize..16, cut in any::<prop::sample::Index>(),
    ) {
        let (_keep, roots) = pristine();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("stores");
        common::copy_dir(&roots[which], &root);
        let mut found = Vec::new();
        files(&root, &is_metadata, &mut found);
        let files = found;
        let path = file.get(&files);
        let text = std::fs::read_to_string(path).unwrap();
        let mut what = String::from("cut short");
        let mangled = if kind == 15 {
            text[..cut.index(text.len())].to_string()
        } else {
            let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut nodes = Vec::new();
            pointers(&doc, String::new(), &mut nodes);
            let at = node.get(&nodes).clone();
            what = format!("{at} = {}", replacement(kind));
            match doc.pointer_mut(&at) {
                Some(v) => *v = replacement(kind),
                None => unreachable!("a pointer from the document itself"),
            }
            doc.to_string()
        };
        std::fs::write(path, mangled).unwrap();
        let outcome = std::panic::catch_unwind(|| exercise(&root));
        prop_assert!(outcome.is_ok(), "panicked on {}, {what}", path.display());
    }
}

/// Pristine folders for chunk mangling, one per decode path.
fn pristine_chunks() -> &'static Pristine {
    static P: OnceLock<Pristine> = OnceLock::new();
    P.get_or_init(|| {
        synthesize_all(|base| {
            vec![
                SynthConfig { codec: Codec::None, ..base.clone() },
                SynthConfig { codec: Codec::BloscLz4, ..base.clone() },
                SynthConfig { codec: Codec::Zstd, ..base.clone() },
                // several times per chunk: decoded by zarrs
                SynthConfig { codec: Codec::BloscLz4, time_chunk: 2, ..base.clone() },
                SynthConfig { layout: SynthLayout::Compact, format: ZarrFormat::V3, shard: Some(2), ..base },
            ]
        })
    })
}

/// The chunk (or shard) files of a store's arrays other than its coordinates, in a stable order.
fn chunk_files(root: &Path) -> Vec<PathBuf> {
    let coordinate = |p: &Path| p.starts_with(root.join("time")) || p.starts_with(root.join("lev"));
    let mut out = Vec::new();
    files(root, &|p| !is_metadata(p) && !coordinate(p), &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]
    #[test]
    fn mangled_chunks_are_errors_or_values_never_a_panic(
        which in 0usize..5, file in any::<prop::sample::Index>(), how in 0usize..4,
        at in any::<prop::sample::Index>(), bytes in prop::collection::vec(any::<u8>(), 1..24),
    ) {
        let (_keep, roots) = pristine_chunks();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("OM4.zarr");
        common::copy_dir(&roots[which].join("OM4.zarr"), &root);
        let files = chunk_files(&root);
        prop_assert!(!files.is_empty());
        let path = file.get(&files);
        let mut data = std::fs::read(path).unwrap();
        let what = match how {
            0 => {
                // overwrite a run of bytes (headers included)
                let start = at.index(data.len());
                for (d, b) in data[start..].iter_mut().zip(&bytes) {
                    *d = *b;
                }
                "overwritten"
            }
            1 => {
                data.truncate(at.index(data.len()));
                "cut short"
            }
            2 => {
                data.extend_from_slice(&bytes);
                "extended"
            }
            _ => {
                // the head overwritten: codec headers, shard indexes that sit first
                for (d, b) in data.iter_mut().zip(&bytes) {
                    *d = *b;
                }
                "head overwritten"
            }
        };
        std::fs::write(path, &data).unwrap();
        let outcome = std::panic::catch_unwind(|| {
            let store = Om4Store::open(&root).unwrap();
            let set = store.channels(&channel_names(2)).unwrap();
            let sel = store.select(&om4_store::DateRange::ALL).unwrap();
            let positions: Vec<usize> = (0..sel.len()).collect();
            let mut out = vec![0f32; positions.len() * set.len() * set.grid().plane()];
            store.reader(&ReadPool::new(2).unwrap(), &set, &sel).read(&positions, &mut out).is_ok()
        });
        prop_assert!(outcome.is_ok(), "panicked on {} {what}", path.display());
    }
}
