//! Any set of positions and channels read concurrently equals the same planes read one at a time.

mod common;

use std::sync::OnceLock;

use common::bits;
use om4_store::{Codec, Om4Store, ReadPool, SynthConfig, SynthLayout, ZarrFormat, channel_names, synthesize};
use proptest::prelude::*;

struct Fixture {
    _dir: tempfile::TempDir,
    stores: Vec<Om4Store>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let base = SynthConfig { ny: 5, nx: 8, times: 9, levels: 4, consolidated: false, ..SynthConfig::default() };
        let cfgs = [
            SynthConfig { codec: Codec::BloscLz4, time_chunk: 2, ..base.clone() },
            SynthConfig { layout: SynthLayout::Compact, codec: Codec::Zstd, ..base.clone() },
            SynthConfig { format: ZarrFormat::V3, shard: Some(3), layout: SynthLayout::Compact, ..base.clone() },
            // one plane per chunk: decoded directly, without zarrs
            SynthConfig { codec: Codec::BloscLz4, ..base },
        ];
        let stores = cfgs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = synthesize(&dir.path().join(i.to_string()), c, |_, _| {}).unwrap();
                Om4Store::open(&p.data).unwrap()
            })
            .collect();
        Fixture { _dir: dir, stores }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn concurrent_read_equals_plane_by_plane(
        which in 0usize..4,
        positions in prop::collection::vec(0usize..9, 1..7),
        picks in prop::collection::vec(0usize..20, 1..9),
        threads in 1usize..5,
    ) {
        let store = &fixture().stores[which];
        let all = channel_names(4);
        let names: Vec<&str> = picks.iter().map(|&i| all[i].as_str()).collect();
        let set = store.channels(&names).unwrap();
        let sel = store.select(&om4_store::DateRange::ALL).unwrap();
        let plane = set.grid().plane();
        let pool = ReadPool::new(threads).unwrap();
        let mut together = vec![0f32; positions.len() * names.len() * plane];
        store.reader(&pool, &set, &sel).read(&positions, &mut together).unwrap();
        let one_pool = ReadPool::new(1).unwrap();
        for (i, &p) in positions.iter().enumerate() {
            for (c, name) in names.iter().enumerate() {
                let single = store.channels(&[*name]).unwrap();
                let mut one = vec![0f32; plane];
                store.reader(&one_pool, &single, &sel).read(&[p], &mut one).unwrap();
                prop_assert_eq!(bits(&together[(i * names.len() + c) * plane..][..plane]), bits(&one));
            }
        }
    }
}
