//! The `om4` command line on a synthesized store: exit codes, outputs and agreement with the libraries.

use std::path::Path;
use std::process::Command;

fn om4(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_om4")).args(args).output().expect("run om4")
}

fn synth(dir: &Path) -> String {
    let out = om4(&[
        "synth",
        dir.to_str().unwrap(),
        "--ny",
        "6",
        "--nx",
        "12",
        "--times",
        "9",
        "--levels",
        "3",
        "--codec",
        "blosc-lz4",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("OM4.zarr").to_str().unwrap().to_string()
}

#[test]
fn inspect_validate_dump() {
    let dir = tempfile::tempdir().unwrap();
    let store = synth(dir.path());
    let out = om4(&["inspect", &store, "--json"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["layout"], "flat");
    assert_eq!(report["channels"].as_array().unwrap().len(), 16);
    assert_eq!(report["time"]["steps"], 9);
    assert_eq!(report["time"]["calendar"], "no_leap");
    assert!(report["problems"].as_array().unwrap().is_empty());

    assert!(om4(&["validate", &store, "--channels", "thetao_2,zos"]).status.success());
    // An array with unusable metadata: listed by inspect and a whole-store validate, refused
    // when asked for, and no obstacle to the other channels.
    let root = std::path::Path::new(&store);
    let (meta, key) = if root.join(".zmetadata").is_file() {
        (root.join(".zmetadata"), "/metadata/so_1~1.zarray/chunks/0")
    } else {
        (root.join("so_1").join(".zarray"), "/chunks/0")
    };
    let pristine = std::fs::read_to_string(&meta).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&pristine).unwrap();
    *doc.pointer_mut(key).unwrap() = serde_json::json!(0);
    std::fs::write(&meta, doc.to_string()).unwrap();
    let out = om4(&["inspect", &store, "--json"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("so_1") && p.as_str().unwrap().contains("zero-sized extent")),
        "{problems:?}"
    );
    assert_eq!(om4(&["validate", &store]).status.code(), Some(1));
    assert_eq!(om4(&["validate", &store, "--channels", "so_1"]).status.code(), Some(1));
    assert!(om4(&["validate", &store, "--channels", "thetao_2,zos"]).status.success());
    std::fs::write(&meta, pristine).unwrap();
    let bad = om4(&["validate", &store, "--channels", "thetao_2,hfds_anomalies"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("derived"));

    let npy = dir.path().join("p.npy");
    let out = om4(&["dump", &store, "--channels", "thetao_0,zos", "--times", "0,5,8", "--out", npy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&npy).unwrap();
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0);
    assert!(std::str::from_utf8(&bytes[10..10 + header_len]).unwrap().contains("'shape': (3, 2, 6, 12)"));
    // the dumped planes equal a library read
    let s = om4_store::Om4Store::open(&store).unwrap();
    let set = s.channels(&["thetao_0", "zos"]).unwrap();
    let mut buf = vec![0f32; 3 * 2 * 72];
    s.reader(&om4_store::ReadPool::new(1).unwrap(), &set, &om4_store::Selection { rows: 0..9 })
        .read(&[0, 5, 8], &mut buf)
        .unwrap();
    let dumped: Vec<u32> =
        bytes[10 + header_len..].chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(dumped, buf.iter().map(|v| v.to_bits()).collect::<Vec<_>>());

    let missing = om4(&["dump", &store, "--channels", "nope", "--times", "0", "--out", npy.to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(om4(&["inspect", "/definitely/not/here"]).status.code(), Some(1));
}

#[test]
fn schedule_json_matches_library() {
    let out = om4(&[
        "schedule",
        "--len",
        "40",
        "--batch-size",
        "3",
        "--seed",
        "15",
        "--epoch",
        "2",
        "--world-size",
        "2",
        "--rank",
        "1",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<Vec<usize>> = serde_json::from_value(v["batches"].clone()).unwrap();
    let spec = om4_batch::WindowSpec::new(1, 4, 1).unwrap();
    let space = om4_batch::SampleSpace::single(spec, 40).unwrap();
    let sched = om4_batch::Schedule::training(3, 15, Some(om4_batch::Ddp { world_size: 2, rank: 1 })).unwrap();
    assert_eq!(got, sched.epoch(&space.groups(), 2));
    assert_eq!(om4(&["schedule", "--len", "3"]).status.code(), Some(1), "too short a selection is an error");
    let huge = u64::MAX.to_string();
    assert_eq!(om4(&["schedule", "--len", &huge]).status.code(), Some(1), "too many samples is an error, not a panic");
    assert_eq!(
        om4(&["schedule", "--len", "100", "--history", &huge]).status.code(),
        Some(1),
        "so is too long a window"
    );
}

#[test]
fn bench_read_reports_json() {
    let dir = tempfile::tempdir().unwrap();
    let store = synth(dir.path());
    let out =
        om4(&["bench", "read", &store, "--steps", "3", "--windows", "2", "--repeats", "2", "--threads", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["channels"], 16);
    assert!(v["gb_per_s_median"].as_f64().unwrap() > 0.0);
    assert!(v["memcpy"].is_null() && v["read_decode_reference"].is_null(), "ceilings only on request");

    let out = om4(&[
        "bench",
        "read",
        &store,
        "--steps",
        "3",
        "--windows",
        "2",
        "--repeats",
        "2",
        "--threads",
        "2",
        "--memcpy",
        "--reference",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &w["memcpy"];
    let window = 3 * 16 * w["grid"][0].as_u64().unwrap() * w["grid"][1].as_u64().unwrap() * 4;
    assert_eq!(m["window_bytes"].as_u64(), Some(window));
    for key in ["planes_gb_per_s", "blocks_gb_per_s", "om4_best_over_planes", "om4_best_over_blocks"] {
        assert!(m[key].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{key}: {m}");
    }
    assert!(w["read_decode_reference"]["gb_per_s"].as_f64().is_some_and(|x| x > 0.0));
    // The copy ceiling rewrites the window with its own bytes: the planes read are unchanged.
    assert_eq!(w["finite_checksum"], v["finite_checksum"]);

    // --cold: one timed pass, nothing read before it.
    let out =
        om4(&["bench", "read", &store, "--steps", "3", "--starts", "0,3,6", "--cold", "--threads", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((c["cold"].as_bool(), c["repeats"].as_u64()), (Some(true), Some(1)));
    assert!(c["open_plus_first_window_s"].is_null() && c["gb_per_s_best"].as_f64().unwrap() > 0.0);
}

#[test]
fn stats_writes_statistics_the_loader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = synth(dir.path());
    let out_dir = dir.path().join("recomputed");
    let out = om4(&["stats", &store, "--out", out_dir.to_str().unwrap(), "--channels", "thetao_0,so_2,zos", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["time_steps"], 9);
    let rows = v["channels"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    // The synthetic store's own statistics, through om4-store.
    let s = om4_store::Om4Store::open(&store).unwrap();
    let set = s.channels(&["thetao_0", "so_2", "zos"]).unwrap();
    let means = om4_store::StatsStore::open(dir.path().join("OM4_means.zarr")).unwrap().values(&set).unwrap();
    let recomputed = om4_store::StatsStore::open(out_dir.join("OM4_means.zarr")).unwrap().values(&set).unwrap();
    for ((row, m), r) in rows.iter().zip(&means).zip(&recomputed) {
        assert!((row["mean"].as_f64().unwrap() as f32 - m).abs() <= 1e-5 * m.abs().max(1.0), "{row} vs {m}");
        assert_eq!(row["mean"].as_f64().unwrap() as f32, *r);
        assert!(row["count"].as_u64().unwrap() > 0);
    }
    let empty = om4(&["stats", &store, "--out", out_dir.to_str().unwrap(), "--force", "--time", "2100-01-01.."]);
    assert_eq!(empty.status.code(), Some(1), "an empty time range is an error");
    // Existing statistics (the synthetic store's own, beside it) are replaced only with --force.
    let beside = dir.path().to_str().unwrap();
    let refused = om4(&["stats", &store, "--out", beside]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));
    assert_eq!(
        om4_store::StatsStore::open(dir.path().join("OM4_means.zarr")).unwrap().values(&set).unwrap(),
        means,
        "untouched"
    );
    assert!(om4(&["stats", &store, "--out", beside, "--force"]).status.success());
}
