"""PyTorch's side of the convolution table: one k×k convolution's three passes and its GEMM.

Times, on the CPU threads torch is given, what `om4-train step --profile` prints in its last line
for om4 ("largest convolution ..."): the forward of a `C → C` k×k convolution on an already
padded `(B, C, H + k − 1, W + k − 1)` input, its data gradient and its weight gradient (each as
forward + backward with only that input tracked, minus the forward), and the GEMM a convolution
amounts to, `(C, C·k²) × (C·k², B·H·W)`; the best of --repeats runs after one warm-up, with
GFLOP/s at 2·B·C²·k²·H·W flops per pass. Run it in turn with om4's profile (docs/benchmarks.md
gives the loop), so both see the same machine load.

    target/python/bin/python benches/step/conv.py [--channels 320] [--grid 90x180] [--batch 1]

With --om4-profile FILE (the output of `om4-train step --profile`), every k×k convolution row of
om4's table instead (`cin→cout dD HxW`, at --kernel and --batch), timed by torch as om4's profile
times it (the median of --repeats runs after one warm-up, dilation D, on the padded input), and
printed beside om4's milliseconds as a markdown table: each pass's torch / om4 time ratio (above 1:
om4 faster); then both sides' seconds per step (the passes times the profile's uses) summed over
the shapes with fewer than 128 channels on a side.
"""

import argparse
import json
import re
import statistics
import time

import torch


def times(f, repeats: int) -> list:
    """Seconds of `repeats` runs of `f` after one warm-up run."""
    f()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def best(f, repeats: int) -> float:
    return min(times(f, repeats))


def median(f, repeats: int) -> float:
    return statistics.median(times(f, repeats))


def passes(b: int, cin: int, cout: int, k: int, d: int, h: int, w: int, timer, repeats: int):
    """Forward, data gradient and weight gradient seconds of one convolution on a padded input (the
    gradients as forward + backward with only that input tracked, minus the forward)."""
    p = d * (k - 1)
    x = torch.randn(b, cin, h + p, w + p)
    weight = torch.randn(cout, cin, k, k)
    bias = torch.zeros(cout)

    def run(gx: bool, gw: bool):
        xs, ws = x.clone().requires_grad_(gx), weight.clone().requires_grad_(gw)

        def once():
            y = torch.nn.functional.conv2d(xs, ws, bias, dilation=d).sum()
            if gx or gw:
                y.backward()
        return once

    with torch.no_grad():
        forward = timer(run(False, False), repeats)
    data = timer(run(True, False), repeats) - forward
    weight_grad = timer(run(False, True), repeats) - forward
    return forward, data, weight_grad


def beside_om4(path: str, k: int, b: int, repeats: int) -> None:
    """The k×k rows of om4's profile beside torch's times at the same shapes."""
    row = re.compile(r"^\| conv k×k \| (\d+)→(\d+) d(\d+) (\d+)×(\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {b}, {k}×{k}, median of {repeats}")
    print("| shape | om4 forward / data grad / weight grad ms | torch ms | torch / om4 |")
    print("|---|---|---|---|")
    small = [0.0, 0.0]  # seconds per step of the shapes with fewer than 128 channels on a side: om4, torch
    for line in open(path, encoding="utf-8"):
        m = row.match(line)
        if not m:
            continue
        cin, cout, d, h, w, uses = (int(v) for v in m.groups()[:6])
        om4 = [float(v) for v in m.groups()[6:]]
        torch_ms = [1e3 * max(t, 0.0) for t in passes(b, cin, cout, k, d, h, w, median, repeats)]
        ratio = " / ".join(f"{t / o:.2f}" if o > 0 else "-" for t, o in zip(torch_ms, om4))
        print(f"| {cin}→{cout} d{d} {h}×{w} | {' / '.join(f'{o:.2f}' for o in om4)} | "
              f"{' / '.join(f'{t:.2f}' for t in torch_ms)} | {ratio} |")
        if min(cin, cout) < 128:
            small[0] += uses * sum(om4) / 1e3
            small[1] += uses * sum(torch_ms) / 1e3
    print(f"\nthe shapes with fewer than 128 channels on a side, all three passes: om4 {small[0]:.4f} s per step, "
          f"torch {small[1]:.4f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--channels", type=int, default=320)
    ap.add_argument("--kernel", type=int, default=3)
    ap.add_argument("--grid", default="90x180", help="the output's YxX")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--om4-profile", help="om4-train step --profile's output: time its k×k convolutions' shapes")
    args = ap.parse_args()
    if args.om4_profile:
        beside_om4(args.om4_profile, args.kernel, args.batch, args.repeats)
        return
    h, w = (int(v) for v in args.grid.split("x"))
    c, k, b = args.channels, args.kernel, args.batch
    torch.manual_seed(0)
    flops = 2.0 * b * c * c * k * k * h * w
    forward, data, weight_grad = passes(b, c, c, k, 1, h, w, best, args.repeats)
    lhs, rhs = torch.randn(c, c * k * k), torch.randn(c * k * k, b * h * w)
    gemm = best(lambda: lhs @ rhs, args.repeats)
    row = {"framework": "torch " + torch.__version__, "threads": torch.get_num_threads(), "shape": f"{c}→{c} {k}×{k} {h}×{w} b{b}",
           "gflop": flops / 1e9}
    for name, t in [("gemm", gemm), ("forward", forward), ("data_grad", data), ("weight_grad", weight_grad)]:
        row[name + "_s"] = round(t, 4)
        row[name + "_gflops"] = round(flops / t / 1e9, 1)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
