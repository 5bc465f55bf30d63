//! Store reads: planes/s and bytes/s for uncompressed, blosc-lz4 and zstd stores, 1 and N threads.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use om4_store::{Codec, Om4Store, ReadPool, SynthConfig, channel_names, synthesize};

fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("read_window");
    group.sample_size(10);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    for codec in [Codec::None, Codec::BloscLz4, Codec::Zstd] {
        // 2° grid, 80 channels, 12 steps: a 6-step window is 480 planes (31 MB)
        let cfg = SynthConfig { times: 12, codec, consolidated: true, ..SynthConfig::default() };
        let paths = synthesize(&dir.path().join(format!("{codec:?}")), &cfg, |_, _| {}).expect("synthesize");
        let store = Om4Store::open(&paths.data).expect("open");
        let set = store.channels(&channel_names(19)).expect("channels");
        let positions: Vec<usize> = (3..9).collect();
        let mut buf = vec![0f32; positions.len() * set.len() * set.grid().plane()];
        group.throughput(Throughput::Bytes((buf.len() * 4) as u64));
        for n in [1, threads] {
            let pool = ReadPool::new(n).expect("pool");
            let sel = set.all_rows();
            group.bench_with_input(BenchmarkId::new(format!("{codec:?}"), format!("{n}_threads")), &n, |b, _| {
                b.iter(|| store.reader(&pool, &set, &sel).read(&positions, &mut buf).expect("read"));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, read);
criterion_main!(benches);
