//! Statistics computed from a store: equal to a plain per-plane loop bit for bit, independent of
//! the pool's size, close to the synthetic store's own, and written in a form om4 reads back.

mod common;

use common::{make, small};
use om4_store::{
    ChannelStats, Om4Store, ReadPool, StatsStore, SynthConfig, channel_names, compute_statistics, write_statistics,
};

/// The plain loop: one plane at a time, sums of `x − first` and its square in f64.
fn naive(store: &Om4Store, names: &[String]) -> Vec<ChannelStats> {
    let sel = store.select(&om4_store::DateRange::ALL).unwrap();
    let pool = ReadPool::new(1).unwrap();
    names
        .iter()
        .map(|name| {
            let set = store.channels(&[name]).unwrap();
            let wet = store.masks(&set).unwrap();
            let mut plane = vec![0f32; set.grid().plane()];
            let (mut shift, mut n, mut sum, mut sum_sq) = (None, 0u64, 0f64, 0f64);
            for t in 0..sel.len() {
                store.reader(&pool, &set, &sel).read(&[t], &mut plane).unwrap();
                for (&x, &w) in plane.iter().zip(wet.channel(0)) {
                    if w && !x.is_nan() {
                        let k: f64 = *shift.get_or_insert(f64::from(x));
                        let d = f64::from(x) - k;
                        n += 1;
                        sum += d;
                        sum_sq += d * d;
                    }
                }
            }
            let mean_d = sum / n as f64;
            let var = (sum_sq / n as f64 - mean_d * mean_d).max(0.0);
            ChannelStats { mean: shift.unwrap() + mean_d, std: var.sqrt(), count: n }
        })
        .collect()
}

#[test]
fn statistics_match_the_plain_loop_and_the_synthetic_stores_own() {
    for compact in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let paths = make(dir.path(), &SynthConfig { times: 11, ..small(compact) });
        let store = Om4Store::open(&paths.data).unwrap();
        let names = channel_names(3);
        let set = store.channels(&names).unwrap();
        let sel = store.select(&om4_store::DateRange::ALL).unwrap();
        let mut calls = Vec::new();
        let fast =
            compute_statistics(&store, &ReadPool::new(3).unwrap(), &set, &sel, |d, t| calls.push((d, t))).unwrap();
        assert_eq!(calls.last(), Some(&(11, 11)), "progress reaches the end");
        let one = compute_statistics(&store, &ReadPool::new(1).unwrap(), &set, &sel, |_, _| {}).unwrap();
        let reference = naive(&store, &names);
        for ((f, o), r) in fast.iter().zip(&one).zip(&reference) {
            for (a, b) in [(f, r), (o, r)] {
                assert_eq!((a.mean.to_bits(), a.std.to_bits(), a.count), (b.mean.to_bits(), b.std.to_bits(), b.count));
            }
        }
        // The synthetic store's statistics were summed from the same float32 values as it wrote them.
        let (means, stds) = (StatsStore::open(&paths.means).unwrap(), StatsStore::open(&paths.stds).unwrap());
        let (m, s) = (means.values(&set).unwrap(), stds.values(&set).unwrap());
        for (i, st) in fast.iter().enumerate() {
            assert!(st.count > 0);
            assert!(
                (st.mean as f32 - m[i]).abs() <= 1e-5 * m[i].abs().max(1.0),
                "{}: {} vs {}",
                names[i],
                st.mean,
                m[i]
            );
            assert!(
                (st.std as f32 - s[i]).abs() <= 1e-4 * s[i].abs().max(1e-3),
                "{}: {} vs {}",
                names[i],
                st.std,
                s[i]
            );
        }
        // Written the published way and read back by om4.
        let out = dir.path().join("stats");
        let pairs: Vec<(f32, f32)> = fast.iter().map(|s| (s.mean as f32, s.std as f32)).collect();
        let (mp, sp) = write_statistics(&out, &set, &pairs).unwrap();
        let back_m = StatsStore::open(&mp).unwrap().values(&set).unwrap();
        let back_s = StatsStore::open(&sp).unwrap().values(&set).unwrap();
        // Like the published stores: a `lev` vector per compact variable, else a scalar per channel.
        let written = Om4Store::open(&mp).unwrap();
        let (thetao, zos) = (written.arrays().get("thetao"), &written.arrays()["zos"]);
        assert_eq!(thetao.map(|a| a.shape.clone()), compact.then(|| vec![3]));
        assert_eq!(written.arrays().contains_key("thetao_1"), !compact);
        assert!(zos.shape.is_empty());
        assert_eq!(back_m, pairs.iter().map(|p| p.0).collect::<Vec<_>>());
        assert_eq!(back_s, pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    }
}

#[test]
fn statistics_of_a_time_range_and_bad_statistics_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let paths = make(dir.path(), &small(false));
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["zos"]).unwrap();
    let pool = ReadPool::new(2).unwrap();
    let all =
        compute_statistics(&store, &pool, &set, &store.select(&om4_store::DateRange::ALL).unwrap(), |_, _| {}).unwrap();
    let sel = store.select(&"1958-01-10..".parse().unwrap()).unwrap();
    assert!(sel.len() < 7);
    let part = compute_statistics(&store, &pool, &set, &sel, |_, _| {}).unwrap();
    assert_eq!(part[0].count * 7, all[0].count * sel.len() as u64, "same ocean cells per step");
    assert!(write_statistics(dir.path(), &set, &[(f32::NAN, 1.0)]).is_err());
    assert!(write_statistics(dir.path(), &set, &[]).is_err());
    // Some levels of a compact variable: scalars per channel, which om4 reads back all the same.
    let paths = make(&dir.path().join("compact"), &small(true));
    let store = Om4Store::open(&paths.data).unwrap();
    let set = store.channels(&["thetao_1", "thetao_2", "zos"]).unwrap();
    let (mp, _) = write_statistics(&dir.path().join("out"), &set, &[(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)]).unwrap();
    let written = Om4Store::open(&mp).unwrap();
    assert!(written.arrays().contains_key("thetao_1") && !written.arrays().contains_key("thetao"));
    assert_eq!(StatsStore::open(&mp).unwrap().values(&set).unwrap(), vec![1.0, 3.0, 5.0]);
}
