"""Draws the Python benchmarks' plot from their --json reports (docs/python.png).

    target/torch-venv/bin/python benches/python/plot.py --read docs/python-read.json \\
        --loader docs/python-loader.json --out docs/python.png

Left: read throughput of the same windows (median GB/s over interleaved rounds) per store, through
upstream's extension, om4's drop-in module, xarray and ``om4 bench read``, as read_into.py measured
them. Right: prepared batches per second of upstream's Rust-backed loader, its xarray CPU loader
and om4.Loader, as loader.py measured them. Nothing is typed in: every bar is a median of a report.
"""

import argparse
import json
import statistics
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--read", type=Path, required=True, help="read_into.py --json report")
    ap.add_argument("--loader", type=Path, required=True, help="loader.py --json report")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    read = json.loads(args.read.read_text())
    loader = json.loads(args.loader.read_text())

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=[8, 4])
    stores = list(read["stores"])
    series = {}
    for store in stores:
        entry = read["stores"][store]
        for name, seconds in entry["seconds"].items():
            series.setdefault(name, []).append(entry["bytes"] / statistics.median(seconds) / 1e9)
        if entry["om4_bench_read_gb_per_s"]:
            series.setdefault("om4 bench read", []).append(statistics.median(entry["om4_bench_read_gb_per_s"]))
    labels = {"upstream": "upstream extension", "om4": "om4 drop-in", "xarray": "xarray"}
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(values))]
        bars = left.bar(xs, values, width, label=labels.get(name, name))
        left.bar_label(bars, fmt="%.1f", fontsize=7)
    left.set_xticks(range(len(stores)), [s.split("/")[0] for s in stores])
    left.set_ylabel("GB/s (median)")
    left.set_title(f"read_into, same windows ({read['args']['windows']} x {read['args']['steps']} steps, "
                   f"{read['args']['threads']} threads)", fontsize=10)
    left.legend(fontsize=8)

    names = list(loader["results"])
    rates = [statistics.median(loader["results"][n]["all"]) for n in names]
    bars = right.bar(range(len(names)), rates, color=["tab:blue", "tab:green", "tab:orange"][: len(names)])
    right.bar_label(bars, fmt="%.2f", fontsize=8)
    names_shown = {"upstream": "upstream\n(Rust ext.)", "xarray": "upstream\n(xarray CPU)", "om4": "om4.Loader"}
    right.set_xticks(range(len(names)), [names_shown.get(n, n) for n in names])
    right.set_ylabel("prepared batches/s (median)")
    right.set_title(f"prepared batches (batch {loader['args']['batch_size']}, hist 1, 2 steps)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
