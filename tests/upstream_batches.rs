//! om4's batches equal upstream Samudra's real loader's bit for bit.
//!
//! `tests/data/upstream/make_upstream_batches.py` ran upstream's own data classes
//! (m2lines/Samudra 018a6a7: `Trainer.init_data_loaders`, its samplers and `TrainDataLoader`) on
//! a store built like upstream's mock-om4 fixture (`tests/data/upstream/store/`) and wrote what
//! the model received for each case under `tests/data/upstream/cases/`. Here `om4 batch` (the
//! pipeline's loader, the code path training uses) writes the same cases, and every schedule,
//! label mask and batch tensor must be identical. No Python runs here.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn upstream() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream")
}

/// A NumPy array: its dtype descriptor, shape and raw little-endian bytes.
fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<u8>) {
    let npy = om4_store::npy::Npy::read(path).unwrap_or_else(|e| panic!("{e}"));
    (npy.descr, npy.shape, npy.data)
}

fn arg(case: &Value, key: &str) -> String {
    match &case[key] {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn om4_batch(case: &Value, out: &Path) -> std::process::Output {
    let store = upstream().join("store");
    let names = |key: &str| {
        case[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect::<Vec<_>>().join(",")
    };
    let mut args: Vec<String> = vec![
        "batch".into(),
        "--store".into(),
        store.join("data.zarr").display().to_string(),
        "--means".into(),
        store.join("means.zarr").display().to_string(),
        "--stds".into(),
        store.join("stds.zarr").display().to_string(),
        format!("--prognostic={}", names("prognostic_channels_per_time")),
        format!("--boundary={}", names("boundary_channels_per_time")),
        format!("--history={}", arg(case, "hist")),
        format!("--steps={}", arg(case, "steps")),
        format!("--stride={}", case["data_stride"][0]),
        format!("--batch-size={}", arg(case, "batch_size")),
        format!("--seed={}", arg(case, "seed")),
        format!("--epoch={}", arg(case, "epoch")),
        format!(
            "--train={}..{}",
            case["train_time"]["start"].as_str().unwrap(),
            case["train_time"]["end"].as_str().unwrap()
        ),
        format!("--val={}..{}", case["val_time"]["start"].as_str().unwrap(), case["val_time"]["end"].as_str().unwrap()),
        format!("--fill={}", arg(case, "masked_fill_value")),
        format!("--batches={}", case["batches_written"].as_u64().unwrap().max(1)),
        "--threads=2".into(),
        format!("--out={}", out.display()),
    ];
    if case["distributed"].as_bool().unwrap() {
        args.push(format!("--world-size={}", arg(case, "world_size")));
        args.push(format!("--rank={}", arg(case, "rank")));
    }
    if case["split"] == "val" {
        args.push("--validation".into());
    }
    if !case["normalize_before_mask"].as_bool().unwrap() {
        args.push("--normalize-after-mask".into());
    }
    Command::new(env!("CARGO_BIN_EXE_om4")).args(&args).output().expect("run om4")
}

#[test]
fn om4_batches_equal_upstream_loader_bit_for_bit() {
    let index: Value = serde_json::from_slice(&std::fs::read(upstream().join("cases/index.json")).unwrap()).unwrap();
    let (mut compared_cases, mut compared_files) = (0, 0);
    for name in index["cases"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()) {
        let dir = upstream().join("cases").join(name);
        let case: Value = serde_json::from_slice(&std::fs::read(dir.join("case.json")).unwrap()).unwrap();
        // Several strides in one run make upstream's loader fail (it mixes datasets in a batch):
        // those cases hold a schedule only and are not om4 runs.
        if case["data_stride"].as_array().unwrap().len() != 1 {
            assert!(!case["loader_error"].is_null() || case["batches_written"] == 0, "{name}");
            continue;
        }
        let out = tempfile::tempdir().unwrap();
        let run = om4_batch(&case, out.path());
        assert!(run.status.success(), "{name}: {}", String::from_utf8_lossy(&run.stderr));

        let theirs: Value = serde_json::from_slice(&std::fs::read(dir.join("schedule.json")).unwrap()).unwrap();
        let ours: Value = serde_json::from_slice(&std::fs::read(out.path().join("schedule.json")).unwrap()).unwrap();
        assert_eq!(ours["batches"], theirs["batches"], "{name}: schedule");

        let (_, mask_shape, mask) = read_npy(&dir.join("label_mask.npy"));
        let (_, our_shape, our_mask) = read_npy(&out.path().join("label_mask.npy"));
        assert_eq!((our_shape, our_mask), (mask_shape, mask), "{name}: label mask");

        for b in 0..case["batches_written"].as_u64().unwrap() {
            for k in 0..case["steps"].as_u64().unwrap() {
                let rel = PathBuf::from(format!("batch_{b:03}/step_{k}"));
                for file in ["prognostic", "boundary", "label", "model_input"] {
                    let path = rel.join(format!("{file}.npy"));
                    let (descr, shape, want) = read_npy(&dir.join(&path));
                    assert_eq!(descr, "<f4", "{name}/{}", path.display());
                    let (_, our_shape, got) = read_npy(&out.path().join(&path));
                    assert_eq!(our_shape, shape, "{name}/{}: shape", path.display());
                    if got != want {
                        let bits = |v: &[u8]| -> Vec<f32> {
                            v.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
                        };
                        let (g, w) = (bits(&got), bits(&want));
                        let diff = g.iter().zip(&w).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                        let first = g.iter().zip(&w).position(|(a, b)| a.to_bits() != b.to_bits()).unwrap();
                        panic!(
                            "{name}/{}: {diff} of {} values differ; first at {first}: om4 {} upstream {}",
                            path.display(),
                            g.len(),
                            g[first],
                            w[first]
                        );
                    }
                    compared_files += 1;
                }
            }
        }
        compared_cases += 1;
    }
    // Every single-stride case is compared, and the fixtures hold batches for most of them.
    assert!(compared_cases >= 14, "{compared_cases} cases compared");
    assert!(compared_files >= 100, "{compared_files} batch files compared");
}
