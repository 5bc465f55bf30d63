//! Stores written by zarr-python (see `data/make_fixtures.py`) read back bit for bit: v2 and v3,
//! flat and compact, each codec, C and F order, multi-time and partial edge chunks, sharding, NaN land.

mod common;

use std::path::{Path, PathBuf};

use om4_store::{Om4Store, ReadPool};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/zarr_python")
}

/// A float32 `.npy` file: (shape, values).
fn read_npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let npy = om4_store::npy::Npy::read(path).unwrap();
    assert_eq!(npy.descr, "<f4");
    (npy.shape.clone(), npy.to_f32().unwrap())
}

#[test]
fn zarr_python_fixtures_read_bit_for_bit() {
    let dir = data_dir();
    let (shape, expected) = read_npy(&dir.join("expected.npy"));
    assert_eq!(shape, [5, 3, 4, 6]);
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let stores = cases["stores"].as_array().unwrap();
    assert!(stores.len() >= 15);
    let pool = ReadPool::new(2).unwrap();
    let mut direct_stores = 0;
    for name in stores {
        let name = name.as_str().unwrap();
        let store = Om4Store::open(dir.join(format!("{name}.zarr"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        // a plain integer time coordinate: selection by position only
        assert!(store.time().unwrap().instants.is_none());
        let set = store.channels(&["thetao_0", "thetao_1", "zos"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let sel = store.select(&om4_store::DateRange::ALL).unwrap();
        let mut got = vec![0f32; expected.len()];
        store.reader(&pool, &set, &sel).read(&[0, 1, 2, 3, 4], &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&expected), "{name}");
        let mut via_zarrs = vec![0f32; expected.len()];
        store.reader(&pool, &set.zarrs_only(), &sel).read(&[0, 1, 2, 3, 4], &mut via_zarrs).unwrap();
        assert_eq!(bits(&via_zarrs), bits(&expected), "{name} through zarrs");
        direct_stores += usize::from(set.direct_arrays() > 0);
        // reversed positions read the reversed planes
        let mut rev = vec![0f32; expected.len()];
        store.reader(&pool, &set, &sel).read(&[4, 3, 2, 1, 0], &mut rev).unwrap();
        let block = 3 * 24;
        for t in 0..5 {
            assert_eq!(
                bits(&rev[t * block..(t + 1) * block]),
                bits(&expected[(4 - t) * block..(5 - t) * block]),
                "{name}"
            );
        }
    } // v2 raw and blosc stores (6) with one-plane chunks and v3 raw: decoded directly, without zarrs
    assert!(direct_stores >= 6, "{direct_stores} stores took the direct path");
}

#[test]
fn zarr_python_v3_consolidated_metadata_is_all_that_is_read() {
    // zarr-python's v3 `consolidate_metadata`: with the arrays' own zarr.json removed from a copy,
    // the store still opens and reads the same planes.
    let dir = data_dir();
    let (_, expected) = read_npy(&dir.join("expected.npy"));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for name in ["v3_flat_blosc-lz4_shard2_consolidated", "v3_compact_zstd_consolidated"] {
        let copy = tempfile::tempdir().unwrap();
        let root = copy.path().join("s.zarr");
        common::copy_dir(&dir.join(format!("{name}.zarr")), &root);
        let mut removed = 0;
        for entry in std::fs::read_dir(&root).unwrap() {
            let meta = entry.unwrap().path().join("zarr.json");
            if meta.is_file() {
                std::fs::remove_file(meta).unwrap();
                removed += 1;
            }
        }
        assert!(removed >= 3, "{name}: {removed} arrays");
        let store = Om4Store::open(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
        let set = store.channels(&["thetao_0", "thetao_1", "zos"]).unwrap();
        let mut got = vec![0f32; expected.len()];
        store
            .reader(&ReadPool::new(2).unwrap(), &set, &store.select(&om4_store::DateRange::ALL).unwrap())
            .read(&[0, 1, 2, 3, 4], &mut got)
            .unwrap();
        assert_eq!(bits(&got), bits(&expected), "{name}");
    }
}
