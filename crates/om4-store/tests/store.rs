//! om4-store against its own synthetic stores: every layout, format and codec reads the same
//! planes; validation rejects what it must, before reading; errors name what failed.

mod common;

use common::{bits, edit_json, make, read_all, small};
use om4_store::{
    Codec, Error, Om4Store, ReadPool, Selection, StatsStore, SynthConfig, SynthLayout, ZarrFormat, channel_names,
};

#[test]
fn every_layout_format_and_codec_reads_the_same_planes() {
    let dir = tempfile::tempdir().unwrap();
    let base = make(&dir.path().join("base"), &small(false));
    let expected = read_all(&Om4Store::open(&base.data).unwrap(), 3);
    assert!(expected.iter().any(|v| v.is_nan()) && expected.iter().any(|v| v.is_finite()));
    let codecs = [
        Codec::None,
        Codec::BloscLz4,
        Codec::BloscZstd,
        Codec::BloscBlosclz,
        Codec::BloscZlib,
        Codec::Zstd,
        Codec::Gzip,
    ];
    let mut variants = Vec::new();
    for (i, codec) in codecs.into_iter().enumerate() {
        for layout in [SynthLayout::Flat, SynthLayout::Compact] {
            for format in [ZarrFormat::V2, ZarrFormat::V3] {
                // multi-time chunks with a partial edge chunk (7 times in chunks of 3) on some variants
                let time_chunk = if i % 2 == 0 { 1 } else { 3 };
                variants.push(SynthConfig {
                    codec,
                    layout,
                    format,
                    time_chunk,
                    consolidated: i % 3 == 0,
                    ..small(false)
                });
            }
        }
    }
    variants.push(SynthConfig {
        format: ZarrFormat::V3,
        shard: Some(4),
        time_chunk: 2,
        codec: Codec::BloscLz4,
        ..small(false)
    });
    // one-plane zstd chunks, v2 and v3: the direct path
    variants.push(SynthConfig { codec: Codec::Zstd, ..small(false) });
    variants.push(SynthConfig { codec: Codec::Zstd, format: ZarrFormat::V3, ..small(false) });
    variants.push(SynthConfig { format: ZarrFormat::V3, shard: Some(3), layout: SynthLayout::Compact, ..small(false) });
    for (i, cfg) in variants.iter().enumerate() {
        let paths = make(&dir.path().join(format!("v{i}")), cfg);
        let store = Om4Store::open(&paths.data).unwrap();
        // the direct path (one-plane raw or blosc chunks) and zarrs give the same bits
        let set = store.channels(&channel_names(3)).unwrap();
        let one_plane = cfg.time_chunk == 1; // for sharded stores: the inner chunk
        // gzip chunks go through zarrs; raw, blosc and zstd one-plane chunks are decoded directly
        let plain = cfg.codec != Codec::Gzip;
        // flat arrays, and the level-free arrays of compact stores (compact synth chunks hold every level)
        let expected_direct = if one_plane && plain { if cfg.layout == SynthLayout::Flat { 16 } else { 4 } } else { 0 };
        assert_eq!(set.direct_arrays(), expected_direct, "{cfg:?}");
        let sel = store.select(&om4_store::DateRange::ALL).unwrap();
        let positions: Vec<usize> = (0..7).rev().collect();
        let mut direct = vec![0f32; 7 * set.len() * 60];
        let mut via_zarrs = direct.clone();
        let pool = ReadPool::new(2).unwrap();
        store.reader(&pool, &set, &sel).read(&positions, &mut direct).unwrap();
        store.reader(&pool, &set.zarrs_only(), &sel).read(&positions, &mut via_zarrs).unwrap();
        assert_eq!(bits(&direct), bits(&via_zarrs), "{cfg:?}");
        // The composed read + decode reference decodes the same bits, or declines arrays it cannot measure.
        let mut reference = vec![0f32; direct.len()];
        match store.read_decode_reference(&pool, &set, &sel, &positions, &mut reference, &mut Vec::new()) {
            Ok(t) => {
                assert!(expected_direct == set.len() && cfg.shard.is_none(), "{cfg:?}");
                assert_eq!(bits(&reference), bits(&direct), "{cfg:?}");
                assert!(t.compressed_bytes > 0);
            }
            Err(e) => {
                assert!(matches!(e, om4_store::Error::Request { .. }), "{cfg:?}: {e}");
                assert!(expected_direct < set.len() || cfg.shard.is_some(), "{cfg:?}: {e}");
            }
        }
        let expected_layout =
            if cfg.layout == SynthLayout::Flat { om4_store::Layout::Flat } else { om4_store::Layout::Compact };
        assert_eq!(store.layout(), expected_layout, "{cfg:?}");
        assert_eq!(bits(&read_all(&store, 3)), bits(&expected), "{cfg:?}");
    }
}

#[test]
fn compact_levels_share_one_decode_per_time() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(true));
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&channel_names(3)).unwrap();
    // 4 compact variables with consecutive levels + 4 level-free arrays
    assert_eq!(set.runs_per_time(), 8);
    let set = store.channels(&["thetao_2", "thetao_0", "zos"]).unwrap();
    assert_eq!(set.runs_per_time(), 3);
    // out-of-order levels still read the right planes
    let flat = make(&dir.path().join("flat"), &small(false));
    let flat_store = Om4Store::open(&flat.data).unwrap();
    let flat_set = flat_store.channels(&["thetao_2", "thetao_0", "zos"]).unwrap();
    let pool = ReadPool::new(2).unwrap();
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let mut a = vec![0f32; 2 * 3 * 60];
    let mut b = a.clone();
    store.reader(&pool, &set, &sel).read(&[6, 1], &mut a).unwrap();
    flat_store.reader(&pool, &flat_set, &sel).read(&[6, 1], &mut b).unwrap();
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn lev_time_order_reads_like_time_lev() {
    // Rewrite a compact store's thetao as (lev, time, y, x) by transposing its data on disk.
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { codec: Codec::None, ..small(true) };
    let paths = make(dir.path(), &cfg);
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["thetao_0", "thetao_1", "thetao_2"]).unwrap();
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let pool = ReadPool::new(2).unwrap();
    let mut expected = vec![0f32; 7 * 3 * 60];
    store.reader(&pool, &set, &sel).read(&(0..7).collect::<Vec<_>>(), &mut expected).unwrap();
    let arr = paths.data.join("thetao");
    for t in 0..7 {
        std::fs::remove_file(arr.join(format!("{t}.0.0.0"))).unwrap();
    }
    for l in 0..3 {
        for t in 0..7 {
            let plane = &expected[(t * 3 + l) * 60..(t * 3 + l + 1) * 60];
            let bytes: Vec<u8> = plane.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(arr.join(format!("{l}.{t}.0.0")), bytes).unwrap();
        }
    }
    edit_json(&arr.join(".zarray"), |v| {
        v["shape"] = serde_json::json!([3, 7, 6, 10]);
        v["chunks"] = serde_json::json!([1, 1, 6, 10]);
    });
    edit_json(&arr.join(".zattrs"), |v| v["_ARRAY_DIMENSIONS"] = serde_json::json!(["lev", "time", "y", "x"]));
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["thetao_0", "thetao_1", "thetao_2"]).unwrap();
    let mut got = vec![0f32; 7 * 3 * 60];
    store.reader(&pool, &set, &sel).read(&(0..7).collect::<Vec<_>>(), &mut got).unwrap();
    assert_eq!(bits(&got), bits(&expected));
}

#[test]
fn time_selection_maps_positions_to_rows() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(false));
    let store = Om4Store::open(&paths.data).unwrap();
    let t = store.time().unwrap();
    assert_eq!(t.instants.as_ref().unwrap()[0].to_string(), "1958-01-03 12:00:00");
    // steps at Jan 3, 8, 13, 18, 23, 28, Feb 2 (12:00): Jan 10 to Jan 23 (at 12:00, both included) holds rows 2..5
    let sel = store.select(&"1958-01-10..1958-01-23".parse().unwrap()).unwrap();
    assert_eq!(sel.rows, 2..5);
    let set = store.channels(&["zos"]).unwrap();
    let pool = ReadPool::new(1).unwrap();
    let mut by_sel = vec![0f32; 60];
    let mut by_row = vec![0f32; 60];
    store.reader(&pool, &set, &sel).read(&[1], &mut by_sel).unwrap();
    store.reader(&pool, &set, &Selection { rows: 0..7 }).read(&[3], &mut by_row).unwrap();
    assert_eq!(bits(&by_sel), bits(&by_row));
    let err = store.reader(&pool, &set, &sel).read(&[3], &mut by_sel).unwrap_err();
    assert!(matches!(err, Error::Request { .. }), "{err}");
    assert!(store.select(&"1958-03-01..".parse().unwrap()).is_err()); // after the last step
}

#[test]
fn masks_match_land_and_stats_match_data() {
    let dir = tempfile::tempdir().unwrap();
    for compact in [false, true] {
        let paths = make(&dir.path().join(format!("{compact}")), &small(compact));
        let store = Om4Store::open(&paths.data).unwrap();
        let names = channel_names(3);
        let set = store.channels(&names).unwrap();
        let masks = store.masks(&set).unwrap();
        let data = read_all(&store, 3);
        let plane = 60;
        for t in 0..7 {
            for c in 0..set.len() {
                let p = &data[(t * set.len() + c) * plane..][..plane];
                for (v, wet) in p.iter().zip(masks.channel(c)) {
                    assert_eq!(v.is_nan(), !wet, "channel {} time {t}", names[c]);
                }
            }
        }
        let means = StatsStore::open(&paths.means).unwrap().values(&set).unwrap();
        let stds = StatsStore::open(&paths.stds).unwrap().values(&set).unwrap();
        for c in 0..set.len() {
            let vals: Vec<f64> = (0..7)
                .flat_map(|t| data[(t * set.len() + c) * plane..][..plane].iter().copied())
                .filter(|v| !v.is_nan())
                .map(f64::from)
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            let std = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64).sqrt();
            assert!((f64::from(means[c]) - mean).abs() <= 1e-4 * mean.abs().max(1.0), "{} mean", names[c]);
            assert!((f64::from(stds[c]) - std).abs() <= 1e-3 * std.max(1e-3), "{} std {} vs {std}", names[c], stds[c]);
        }
    }
}

#[test]
fn missing_chunk_reads_nan_and_corrupt_chunk_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { codec: Codec::BloscLz4, ..small(false) };
    let paths = make(dir.path(), &cfg);
    std::fs::remove_file(paths.data.join("zos").join("3.0.0")).unwrap();
    let chunk = paths.data.join("so_1").join("4.0.0");
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() / 2]).unwrap();
    let store = Om4Store::open(&paths.data).unwrap();
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let pool = ReadPool::new(2).unwrap();
    let set = store.channels(&["zos"]).unwrap();
    let mut out = vec![0f32; 60];
    store.reader(&pool, &set, &sel).read(&[3], &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_nan()));
    let set = store.channels(&["so_0", "so_1"]).unwrap();
    let mut out = vec![0f32; 3 * 2 * 60];
    match store.reader(&pool, &set, &sel).read(&[2, 4, 5], &mut out) {
        Err(Error::Read { array, row, .. }) => assert_eq!((array.as_str(), row), ("so_1", 4)),
        other => panic!("expected a read error, got {other:?}"),
    }
}

#[test]
fn request_errors_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(false));
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["zos", "so_2"]).unwrap();
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let pool = ReadPool::new(2).unwrap();
    let mut short = vec![0f32; 119];
    assert!(matches!(store.reader(&pool, &set, &sel).read(&[0], &mut short), Err(Error::Request { .. })));
    let mut out = vec![0f32; 120];
    assert!(matches!(store.reader(&pool, &set, &sel).read(&[7], &mut out), Err(Error::Request { .. })));
    assert!(matches!(
        store.reader(&pool, &set, &Selection { rows: 5..9 }).read(&[0], &mut out),
        Err(Error::Request { .. })
    ));
    let empty: [&str; 0] = [];
    assert!(store.channels(&empty).is_err());
}

/// A flat v2 store without consolidated metadata, for tampering.
fn tamper(f: impl FnOnce(&std::path::Path)) -> (tempfile::TempDir, Om4Store) {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(false));
    f(&paths.data);
    let store = Om4Store::open(&paths.data).unwrap();
    (dir, store)
}

fn invalid_reason(store: &Om4Store, channels: &[&str]) -> String {
    match store.channels(channels) {
        Err(Error::Invalid { reason, .. }) => reason,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn validation_rejects_each_bad_array_before_reading() {
    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zarray"), |v| v["dtype"] = "<i2".into()));
    assert!(invalid_reason(&s, &["zos"]).contains("dtype is int16"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zarray"), |v| v["dtype"] = "<f8".into()));
    assert!(invalid_reason(&s, &["zos"]).contains("float64"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zattrs"), |v| v["scale_factor"] = 0.01.into()));
    assert!(invalid_reason(&s, &["zos"]).contains("scale_factor"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zattrs"), |v| v["add_offset"] = 10.into()));
    assert!(invalid_reason(&s, &["zos"]).contains("add_offset"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zattrs"), |v| v["_FillValue"] = (-9999).into()));
    assert!(invalid_reason(&s, &["zos"]).contains("_FillValue"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zattrs"), |v| v["missing_value"] = 1e20.into()));
    assert!(invalid_reason(&s, &["zos"]).contains("missing_value"));

    let (_d, s) = tamper(|root| edit_json(&root.join("zos/.zarray"), |v| v["fill_value"] = 0.0.into()));
    assert!(invalid_reason(&s, &["zos"]).contains("fill value 0"));

    let (_d, s) = tamper(|root| {
        edit_json(&root.join("zos/.zattrs"), |v| v["_ARRAY_DIMENSIONS"] = serde_json::json!(["x", "y", "time"]))
    });
    assert!(invalid_reason(&s, &["zos"]).contains("dimensions"));

    let (_d, s) = tamper(|root| {
        edit_json(&root.join("zos/.zattrs"), |v| v["_ARRAY_DIMENSIONS"] = serde_json::json!(["time", "lat", "lon"]))
    });
    assert!(s.channels(&["zos"]).is_ok(), "lat/lon are aliases of y/x");

    let (_d, s) = tamper(|root| {
        edit_json(&root.join("zos/.zarray"), |v| v["shape"] = serde_json::json!([7, 0, 10]));
    });
    assert!(invalid_reason(&s, &["zos"]).contains("zero-sized extent"));

    let (_d, s) = tamper(|root| {
        edit_json(&root.join("zos/.zarray"), |v| {
            v["shape"] = serde_json::json!([7, 1, 6, 10]);
            v["chunks"] = serde_json::json!([1, 1, 6, 10]);
        });
        edit_json(&root.join("zos/.zattrs"), |v| v["_ARRAY_DIMENSIONS"] = serde_json::json!(["time", "a", "y", "x"]));
    });
    assert!(s.channels(&["zos"]).is_err(), "a 4-D array cannot be a flat channel");
}

#[test]
fn grids_must_agree() {
    let (_d, s) = tamper(|root| edit_json(&root.join("hfds/.zarray"), |v| v["shape"] = serde_json::json!([7, 6, 9])));
    match s.channels(&["zos", "hfds"]) {
        Err(Error::GridMismatch { array, found, expected, .. }) => {
            assert_eq!((array.as_str(), found, expected), ("hfds", [7, 6, 9], [7, 6, 10]));
        }
        other => panic!("expected GridMismatch, got {other:?}"),
    }
    let (_d, s) = tamper(|root| edit_json(&root.join("time/.zarray"), |v| v["shape"] = serde_json::json!([6])));
    assert!(matches!(s.channels(&["zos"]), Err(Error::GridMismatch { .. })));
}

#[test]
fn unknown_derived_and_out_of_range_channels() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(true));
    let s = Om4Store::open(&paths.data).unwrap();
    assert!(matches!(s.channels(&["hfds_anomalies"]), Err(Error::DerivedChannel { .. })));
    let msg = s.channels(&["hfds_anomalies"]).unwrap_err().to_string();
    assert!(msg.contains("derived") && msg.contains("climatology"), "{msg}");
    assert!(matches!(s.channels(&["thetao_3"]), Err(Error::Invalid { .. })), "level out of range");
    assert!(matches!(s.channels(&["salt_1"]), Err(Error::UnknownChannel { .. })));
    for evil in ["../OM4_means.zarr/zos", "/etc/passwd", "..", "zos/../zos", "thetao/../../x_1"] {
        assert!(matches!(s.channels(&[evil]), Err(Error::UnknownChannel { .. })), "{evil}");
    }
    // a store that holds the derived array reads it like any other
    let (_d, s) = tamper(|root| std::fs::rename(root.join("hfds"), root.join("hfds_anomalies")).unwrap());
    assert!(s.channels(&["hfds_anomalies"]).is_ok());
}

#[test]
fn legacy_flat_names_map_to_levels() {
    let (_d, s) = tamper(|root| {
        std::fs::rename(root.join("so_1"), root.join("so_lev_10_0")).unwrap();
        std::fs::rename(root.join("so_0"), root.join("so_lev_2_5")).unwrap();
    });
    let set = s.channels(&["so_1", "so_0"]).unwrap();
    assert_eq!(set.channels()[0].array, "so_lev_10_0");
    assert_eq!(set.channels()[1].array, "so_lev_2_5");
    assert!(s.channel_names().contains(&"so_1".to_string()));
    assert!(matches!(s.channels(&["so_5"]), Err(Error::UnknownChannel { .. })));
}

#[test]
fn bad_time_axis_and_bad_store() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &SynthConfig { codec: Codec::None, ..small(false) });
    // swap two time values on disk: int64 little-endian, one chunk
    let chunk = paths.data.join("time").join("0");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[8..16].copy_from_slice(&0i64.to_le_bytes());
    std::fs::write(&chunk, bytes).unwrap();
    assert!(matches!(Om4Store::open(&paths.data), Err(Error::Time { .. })));
    assert!(matches!(Om4Store::open(dir.path().join("nope")), Err(Error::Store { .. })));
    assert!(matches!(Om4Store::open(dir.path()), Err(Error::Store { .. })));
}

#[test]
fn corrupt_shard_index_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { format: ZarrFormat::V3, shard: Some(4), codec: Codec::BloscLz4, ..small(false) };
    let paths = make(dir.path(), &cfg);
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["so_2"]).unwrap();
    assert_eq!(set.direct_arrays(), 1, "inner chunks are single planes");
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let pool = ReadPool::new(1).unwrap();
    let mut good = vec![0f32; 60];
    store.reader(&pool, &set, &sel).read(&[5], &mut good).unwrap();
    // rows 4..8 live in shard 1; its index (4 × 16 bytes + crc32c) ends the file
    let shard = paths.data.join("so_2/c/1/0/0");
    let mut bytes = std::fs::read(&shard).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let mut out = vec![0f32; 60];
    for s in [&set, &set.zarrs_only()] {
        match store.reader(&pool, s, &sel).read(&[5], &mut out) {
            Err(Error::Read { array, row, .. }) => assert_eq!((array.as_str(), row), ("so_2", 5)),
            other => panic!("expected a read error, got {other:?}"),
        }
    }
    // the other shard still reads, and equals zarrs
    let mut direct = vec![0f32; 60];
    let mut via_zarrs = vec![0f32; 60];
    store.reader(&pool, &set, &sel).read(&[2], &mut direct).unwrap();
    store.reader(&pool, &set.zarrs_only(), &sel).read(&[2], &mut via_zarrs).unwrap();
    assert_eq!(bits(&direct), bits(&via_zarrs));
}

#[test]
fn absurd_chunking_is_a_metadata_error() {
    for (chunks, expected) in [
        (serde_json::json!([u64::MAX, 6, 10]), "too large to address"),
        (serde_json::json!([1, 0, 10]), "zero-sized extent"),
        (serde_json::json!([1, 6]), "rank"),
        (serde_json::json!([1 << 20, 1 << 12, 1 << 12]), "GiB"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let paths = make(dir.path(), &small(false));
        edit_json(&paths.data.join("so_1").join(".zarray"), |v| v["chunks"] = chunks.clone());
        // The rest of the store stays readable; the bad array is refused when asked for.
        let store = Om4Store::open(&paths.data).unwrap();
        assert!(store.broken_arrays()["so_1"].contains(expected), "{chunks}: {:?}", store.broken_arrays());
        assert!(store.channels(&["so_0", "zos"]).is_ok());
        match store.channels(&["so_0", "so_1"]) {
            Err(Error::Metadata { array, reason, .. }) => {
                assert_eq!(array, "so_1");
                assert!(reason.contains(expected), "{chunks}: {reason}");
            }
            other => panic!("{chunks}: expected a metadata error, got {other:?}"),
        }
    }
    // Unusable coordinates are another matter: nothing can be read without them.
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(false));
    edit_json(&paths.data.join("time").join(".zarray"), |v| v["chunks"] = serde_json::json!([0]));
    assert!(matches!(Om4Store::open(&paths.data), Err(Error::Metadata { array, .. }) if array == "time"));
}

#[test]
fn consolidated_metadata_is_what_zarrs_reads() {
    // A consolidated store whose per-array file disagrees with .zmetadata: om4 validated the
    // consolidated document, and zarrs is given that same document.
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &SynthConfig { consolidated: true, ..small(false) });
    let before = read_all(&Om4Store::open(&paths.data).unwrap(), 3);
    for name in ["so_1", "lev", "time"] {
        edit_json(&paths.data.join(name).join(".zarray"), |v| v["shape"][0] = serde_json::json!(u64::MAX));
    }
    let after = read_all(&Om4Store::open(&paths.data).unwrap(), 3);
    assert_eq!(bits(&after), bits(&before));

    // v3: the root zarr.json's consolidated_metadata (zarr-python's form) is all om4 and zarrs
    // read; the arrays' own zarr.json may disagree or be gone.
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { format: ZarrFormat::V3, shard: Some(4), consolidated: true, ..small(false) };
    let paths = make(dir.path(), &cfg);
    let root: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(paths.data.join("zarr.json")).unwrap()).unwrap();
    assert_eq!(root["consolidated_metadata"]["kind"], "inline");
    let before = read_all(&Om4Store::open(&paths.data).unwrap(), 3);
    edit_json(&paths.data.join("so_1").join("zarr.json"), |v| v["shape"][0] = serde_json::json!(u64::MAX));
    for name in ["lev", "time", "thetao_0"] {
        std::fs::remove_file(paths.data.join(name).join("zarr.json")).unwrap();
    }
    let after = read_all(&Om4Store::open(&paths.data).unwrap(), 3);
    assert_eq!(bits(&after), bits(&before));
    // a consolidated_metadata om4 cannot use is an error, not a silent fall-back to listing
    edit_json(&paths.data.join("zarr.json"), |v| v["consolidated_metadata"]["kind"] = serde_json::json!("external"));
    let e = Om4Store::open(&paths.data).unwrap_err().to_string();
    assert!(e.contains("consolidated_metadata must be"), "{e}");
}
