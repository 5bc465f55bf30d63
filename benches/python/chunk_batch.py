"""Upstream Samudra's raw batch, ``load_chunk_batch``, through its own extension and through om4's.

Upstream's Rust-backed loader reads each batch with ``_RustBatchDataset.load_chunk_batch``: it
plans the batch's windows, deduplicates the physical time rows with ``np.unique`` and reads each
unique plane once through ``samudra_rust_loader``'s ``read_into``; torch prepares it afterwards.
This times that call alone, in one process, for two training loaders that upstream's own
``Trainer`` builds from the same configuration: one reading through upstream's extension (its
.so, ``--upstream-so``), one through om4's drop-in module (the wheel's ``samudra_rust_loader``).
Both walk the same batches of the sampler's epoch in interleaved rounds (which goes first
alternates), after a check that their first batches' planes are equal bit for bit. Median and p95
milliseconds per batch.

    target/torch-venv/bin/python benches/python/chunk_batch.py --upstream-src DIR \\
        --upstream-so target/pybench/upstream/samudra_rust_loader/*.so STORE_DIR

STORE_DIR as for loader.py (``--patch-store`` there makes an ``om4 synth`` store readable by
upstream's xarray code, which opens the store's metadata).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from loader import load_extension, upstream_loader  # noqa: E402

import samudra_rust_loader as om4_drop_in  # noqa: E402  (the wheel's module: om4)


def batches_of(loader, epoch, count):
    loader.set_epoch(epoch)
    schedule = [list(b) for b in loader._batch_sampler][:count]
    out = []
    for global_indices in schedule:
        dataset, local = loader._resolve_batch(global_indices)
        out.append((loader._batch_datasets[dataset], local))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--upstream-src", type=Path, required=True)
    ap.add_argument("--upstream-so", type=Path, required=True, help="upstream's own samudra_rust_loader extension (.so)")
    ap.add_argument("--train", default="1958-01-03..1958-04-18")
    ap.add_argument("--val", default="1958-04-23..1958-05-28")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--batches", type=int, default=6, help="batches per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    args.prefetch = 1
    src, root = args.upstream_src.resolve(), args.root.resolve()
    with tempfile.TemporaryDirectory() as out:
        loaders = {
            "upstream": upstream_loader(src, root, args, Path(out), module=load_extension(args.upstream_so))[0],
            "om4": upstream_loader(src, root, args, Path(out), module=om4_drop_in)[0],
        }
        for name, loader in loaders.items():
            module = type(loader._batch_datasets[0]._input_reader._native)
            print(f"{name}: reads through {module.__module__}.{module.__name__}", file=sys.stderr)
        first = {name: batches_of(loader, 0, 1)[0] for name, loader in loaders.items()}
        raw = {name: ds.load_chunk_batch(local) for name, (ds, local) in first.items()}
        for a, b in zip(raw["upstream"].groups, raw["om4"].groups, strict=True):
            assert a.shape == b.shape, (a.shape, b.shape)
            assert a.numpy().tobytes() == b.numpy().tobytes(), "the two extensions' planes differ"
        print(f"first batch: {len(raw['om4'].groups)} groups, planes equal bit for bit", file=sys.stderr)
        times = {name: [] for name in loaders}
        names = list(loaders)
        for r in range(args.rounds):
            for name in names[r % 2:] + names[: r % 2]:
                for dataset, local in batches_of(loaders[name], r, args.batches):
                    t0 = time.perf_counter()
                    dataset.load_chunk_batch(local)
                    times[name].append(time.perf_counter() - t0)
        print(f"{'extension':<10} {'median ms':>10} {'p95 ms':>8}")
        for name, ts in times.items():
            ts = sorted(ts)
            print(f"{name:<10} {statistics.median(ts) * 1e3:>10.2f} {ts[min(len(ts) - 1, int(0.95 * len(ts)))] * 1e3:>8.2f}")
        ratio = statistics.median(times["upstream"]) / statistics.median(times["om4"])
        print(f"upstream / om4 time per load_chunk_batch: {ratio:.2f}x (batch {args.batch_size}, hist 1, 2 steps, "
              f"thermo_dynamic_5 + tau_hfds, {args.threads} read threads, {args.rounds} rounds of {args.batches})")


if __name__ == "__main__":
    main()
