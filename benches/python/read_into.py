"""om4's samudra_rust_loader drop-in against upstream Samudra's own extension, side by side.

Both modules are loaded into one process (upstream's from the .so of its wheel, om4's as
``om4``), read the same windows of the same stores into their own targets, and are timed in
interleaved rounds (the order alternates each round); the first round's outputs must be equal bit
for bit (NaN where NaN) before anything is timed. Throughput counts the float32 bytes written.

    target/python/bin/python benches/python/read_into.py --upstream-so PATH STORE...

STORE is a store root (flat or compact, as ``om4 synth`` writes them); channels are every
``(time, y, x)`` channel of a flat store, or every level of every depth array plus the surface
arrays of a compact one. Build upstream's extension from its checkout with
``maturin build --release -m rust/crab_load/Cargo.toml --ignore-rust-version`` and pass the .so
inside its wheel; install om4's with ``scripts/python-check.sh --release``.

With ``--om4-cli target/release/om4`` each round also runs ``om4 bench read`` (Rust, no Python)
on the same windows, channels and threads (one timed pass after its own warm-up pass; its
``gb_per_s_median``): the binding's cost. That command reads one window per read, so compare it
with ``--windows 1``. With ``--xarray``, xarray (``open_zarr(chunks=None)``) reads the same planes
too, as a third column.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

import om4


def load_upstream(so: Path):
    loader = importlib.machinery.ExtensionFileLoader("samudra_rust_loader", str(so))
    spec = importlib.util.spec_from_file_location("samudra_rust_loader", so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def channels_of(store: Path):
    """('flat', names) or ('compact', selectors), from the store's array metadata."""
    flat, compact = [], []
    for meta in sorted(store.glob("*/.zattrs")):
        name = meta.parent.name
        dims = json.loads(meta.read_text()).get("_ARRAY_DIMENSIONS", [])
        if "time" not in dims or len(dims) not in (3, 4) or name.startswith("mask"):
            continue
        if len(dims) == 3:
            flat.append(name)
        elif len(dims) == 4:
            levels = json.loads((meta.parent / ".zarray").read_text())["shape"][dims.index("lev")]
            compact += [(name, k) for k in range(levels)]
    if compact:
        return "compact", compact + [(n, None) for n in flat]
    return "flat", flat


def reader(module, kind, store, channels, threads):
    pool = module.FlatOm4ReadPool(threads)
    if kind == "flat":
        return module.FlatOm4Reader(str(store), channels, pool)
    return module.CompactOm4Reader(str(store), channels, pool)


class XarrayReader:
    """xarray's own read of the same planes (``open_zarr(chunks=None)``: lazy NumPy-backed
    arrays, no dask), copied into the target as the others write theirs: the third column."""

    def __init__(self, store, kind, channels):
        import xarray as xr

        self.ds = xr.open_zarr(store, chunks=None, consolidated=None, decode_times=False, mask_and_scale=False)
        self.kind = kind

    def read_into(self, indexes, channels, out):
        for c, channel in enumerate(channels):
            if self.kind == "flat":
                values = self.ds[channel].isel(time=indexes)
            else:
                name, level = channel
                values = self.ds[name].isel(time=indexes) if level is None else self.ds[name].isel(time=indexes, lev=level)
            out[:, c] = values.transpose("time", ...).values


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--upstream-so", type=Path, required=True, help="upstream's samudra_rust_loader .so")
    ap.add_argument("--threads", type=int, default=2, help="read threads (max_concurrent_reads)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6, help="consecutive time steps per window")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--xarray", action="store_true", help="also time xarray's read of the same planes")
    ap.add_argument("--om4-cli", type=Path, help="also time `om4 bench read` on the same windows")
    ap.add_argument("--json", type=Path, help="write every round's numbers here (benches/python/plot.py reads them)")
    args = ap.parse_args()
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "stores": {}}
    upstream = load_upstream(args.upstream_so)
    rng = np.random.default_rng(args.seed)
    print(f"{'store':<24} {'reader':<9} {'median GB/s':>11} {'p95 s':>8}   om4 / upstream (median)")
    for store in args.stores:
        kind, channels = channels_of(store)
        readers = {name: reader(m, kind, store, channels, args.threads) for name, m in [("upstream", upstream), ("om4", om4)]}
        if args.xarray:
            readers["xarray"] = XarrayReader(store, kind, channels)
        t, y, x = readers["om4"].shape
        assert readers["upstream"].shape == (t, y, x)
        out = {name: np.empty((args.windows * args.steps, len(channels), y, x), np.float32) for name in readers}
        times = {name: [] for name in readers}
        cli_rates = []
        names = [c if isinstance(c, str) else (c[0] if c[1] is None else f"{c[0]}_{c[1]}") for c in channels]
        for r in range(args.rounds + 1):  # round 0: warm-up and the equality check
            starts = rng.integers(0, t - args.steps + 1, args.windows)
            indexes = [int(s) + k for s in starts for k in range(args.steps)]
            order = list(readers)[r % len(readers):] + list(readers)[:r % len(readers)]  # rotating
            for name in order:
                t0 = time.perf_counter()
                readers[name].read_into(indexes, channels, out[name])
                elapsed = time.perf_counter() - t0
                if r:
                    times[name].append(elapsed)
            if r and args.om4_cli:
                cmd = [str(args.om4_cli), "bench", "read", str(store), "--starts", ",".join(map(str, starts)),
                       "--steps", str(args.steps), "--repeats", "1", "--threads", str(args.threads),
                       "--channels", ",".join(names), "--json"]
                cli_rates.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["gb_per_s_median"])
            for other in (n for n in out if n != "om4"):
                if r == 0 and not np.array_equal(out["om4"], out[other], equal_nan=True):
                    raise SystemExit(f"{store}: om4's planes differ from {other}'s")
        nbytes = out["om4"].nbytes
        label = f"{store.parent.name}/{store.name}"[-24:]
        medians = {}
        for name, ts in times.items():
            medians[name] = nbytes / statistics.median(ts) / 1e9
            p95 = sorted(ts)[min(len(ts) - 1, int(0.95 * len(ts)))]
            print(f"{label:<24} {name:<9} {medians[name]:>11.2f} {p95:>8.3f}")
        if cli_rates:
            print(f"{label:<24} {'om4 bench read':<9} {statistics.median(cli_rates):>6.2f}               "
                  f"drop-in / bench read {medians['om4'] / statistics.median(cli_rates):.2f}")
        print(f"{'':<24} {'':<9} {'':>11} {'':>8}   {medians['om4'] / medians['upstream']:.2f}x  "
              f"({kind}, {len(channels)} channels x {args.windows}x{args.steps} steps, {nbytes / 1e6:.0f} MB per read)")
        report["stores"][label] = {"kind": kind, "bytes": nbytes, "seconds": times, "om4_bench_read_gb_per_s": cli_rates}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
