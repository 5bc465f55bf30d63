"""The training loop's time per batch beside the bare step's, at the same shapes, in interleaved rounds.

`om4-train step` times Samudra's optimizer step on synthetic tensors and nothing else; a training
epoch (`om4-train train`) runs the same step with the data pipeline beside it: the read pool,
prefetch, the EMA, validation. If anything held a core while the step's GEMMs ran (on a small
machine the step's rayon pool has every core), the epoch's batches would be slower than the
step. This harness writes a synthetic store at the step's shapes (`om4 synth`: 19 levels, so
Samudra's 77 prognostic + 3 boundary channels, history 1: the 160 input channels of `step`),
then alternates, round by round and in alternating order:
- `om4-train step --preset P --grid YxX --batch B --steps S --repeats R`: the step's median;
- `om4-train train --store … --model P --batch-size B --steps S --epochs 1`: the epoch's time
  per batch after its first ("s per batch after it"), its data wait and its CPU use
  (user + system CPU seconds over wall seconds, of the whole process).
Prints a Markdown table and writes the rounds as JSON.

    python3 benches/step/epoch.py [--grid 2deg] [--preset tiny] [--codec none] [--batches 12] [--rounds 3]

Both binaries are built first (cargo build --release) unless --om4 and --om4-train name them.
"""

import argparse
import datetime
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRIDS = {"2deg": (90, 180), "1deg": (180, 360)}


def timed(argv: list[str]) -> tuple[str, float, float]:
    """Runs `argv`; its standard output, wall seconds and CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, wall, cpu


def store(om4: Path, grid: str, codec: str, batches: int, batch: int, steps: int, out: Path) -> tuple[Path, Path]:
    """A synthetic store whose training split holds `batches` batches, and the split's config."""
    # History 1: each of a sample's 1 + steps states is 2 five-day times; the validation split
    # gets one sample.
    span = 2 * (1 + steps)
    train_times = batches * batch + span - 1
    times = train_times + span
    if times > 73:
        sys.exit(f"--batches {batches} × --batch {batch}: over a year of five-day times ({times} > 73)")
    data = out / f"synth-{grid}-{codec}-{times}"
    if not (data / "OM4.zarr").exists():
        subprocess.run([str(om4), "synth", str(data), "--grid", grid, "--times", str(times), "--codec", codec],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    # The store's times run from 1958-01-03 12:00, five days apart (a noleap calendar: no February
    # 29 within a year): the split ends on the last training day, validation starts on the next.
    day = lambda i: (datetime.date(1958, 1, 3) + datetime.timedelta(days=5 * i)).isoformat()
    last, first_val = day(train_times - 1), day(train_times)
    config = out / f"split-{grid}-{batches}x{batch}-{steps}.yaml"
    config.write_text(f'data:\n  train_time: {{end: "{last}"}}\n  val_time: {{start: "{first_val}"}}\n')
    return data, config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="2deg")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--codec", default="none", help="the store's codec (om4 synth --codec)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4, help="rollout steps per optimizer step")
    ap.add_argument("--batches", type=int, default=12, help="training batches in the epoch")
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per `step` run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--om4", type=Path, help="a built om4 (default: build it)")
    ap.add_argument("--om4-train", type=Path, help="a built om4-train (default: build it)")
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "epoch-bench")
    ap.add_argument("--json", type=Path, default=ROOT / "target" / "epoch-bench.json")
    args = ap.parse_args()
    om4, om4_train = args.om4, args.om4_train
    if om4 is None or om4_train is None:
        for package in ["om4", "om4-train"]:
            subprocess.run(["cargo", "build", "--release", "--locked", "-p", package, "--bin", package], check=True,
                           cwd=ROOT)
        om4 = om4 or ROOT / "target" / "release" / "om4"
        om4_train = om4_train or ROOT / "target" / "release" / "om4-train"
    args.work.mkdir(parents=True, exist_ok=True)
    data, config = store(om4, args.grid, args.codec, args.batches, args.batch, args.steps, args.work)
    y, x = GRIDS[args.grid]
    step_argv = [str(om4_train), "step", "--preset", args.preset, "--grid", f"{y}x{x}", "--batch", str(args.batch),
                 "--steps", str(args.steps), "--repeats", str(args.repeats)]
    train_argv = [str(om4_train), "train", "--store", str(data / "OM4.zarr"), "--config", str(config),
                  "--model", args.preset, "--batch-size", str(args.batch), "--steps", str(args.steps), "--epochs", "1"]
    rounds = []
    for r in range(args.rounds):
        got = {}
        for side in (["step", "train"] if r % 2 == 0 else ["train", "step"]):
            out, wall, cpu = timed(step_argv if side == "step" else train_argv)
            if side == "step":
                j = json.loads(out.strip().splitlines()[-1])
                got["step"] = {"median_s": j["step_s_median"], "times": j["times"], "threads": j["threads"],
                               "wall_s": wall, "cpu_s": cpu}
            else:
                header = re.search(r"^training .*the step on (\d+) CPU threads", out, re.M)
                per_batch = re.search(r"first batch ([\d.]+) s .*?, ([\d.]+) s per batch after it", out)
                epoch = re.search(r"data wait p50 ([\d.]+) ms p95 ([\d.]+) ms", out)
                if not (header and per_batch and epoch):
                    sys.exit(f"unexpected output of {' '.join(train_argv)}:\n{out}")
                got["train"] = {"header": header.group(0), "threads": int(header.group(1)),
                                "first_s": float(per_batch.group(1)), "per_batch_s": float(per_batch.group(2)),
                                "wait_p50_ms": float(epoch.group(1)), "wait_p95_ms": float(epoch.group(2)),
                                "wall_s": wall, "cpu_s": cpu}
        ratio = got["train"]["per_batch_s"] / got["step"]["median_s"]
        print(f"round {r + 1}/{args.rounds}: step {got['step']['median_s']:.3f} s, epoch "
              f"{got['train']['per_batch_s']:.3f} s per batch ({ratio:.3f}x)", file=sys.stderr, flush=True)
        rounds.append({**got, "ratio": ratio})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    # Paths inside the checkout as the checkout names them.
    text = json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "cpus": os.cpu_count(), "rounds": rounds},
                      indent=1)
    args.json.write_text(text.replace(f"{ROOT}/", ""))
    print(rounds[0]["train"]["header"])
    print("| round | step median s (threads) | epoch s per batch after the first (threads) | epoch / step "
          "| data wait p50 / p95 ms | CPU use, step / train process |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(rounds):
        s, t = r["step"], r["train"]
        print(f"| {i + 1} | {s['median_s']:.3f} ({s['threads']}) | {t['per_batch_s']:.3f} ({t['threads']}) "
              f"| {r['ratio']:.3f}x | {t['wait_p50_ms']:.2f} / {t['wait_p95_ms']:.2f} "
              f"| {s['cpu_s'] / s['wall_s']:.2f} / {t['cpu_s'] / t['wall_s']:.2f} |")
    print(f"median epoch / step: {statistics.median(r['ratio'] for r in rounds):.3f}x")


if __name__ == "__main__":
    main()
