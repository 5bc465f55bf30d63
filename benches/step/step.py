"""Samudra's training step, om4 against upstream PyTorch, side by side in interleaved rounds.

Each case starts two resident processes, om4's (`om4-train step --serve`) and upstream's model
in PyTorch (`scripts/gpu/torch_step.py --serve`), each warmed up on its own first, then asks them
in turn for the same number of optimizer steps, round after round, alternating which goes
first, so both see the same machine load. A step is the same work on both sides: an
autoregressive rollout of --steps forward passes of the same network on the same grid, masked
MSE, backward, gradient clipping to norm 1, Adam. Prints a Markdown table (median and p95 of
the step, om4/PyTorch of the medians with the range of the per-round ratios, and the threads
each side's step ran on) and writes the rounds as JSON.

    python3 benches/step/step.py --upstream-src DIR/src [--case tiny:90x180:1 ...] [--rounds 5]

DIR is upstream Samudra's checkout (m2lines/Samudra 018a6a7, as scripts/gpu/torch_step.py); a
case is PRESET:YxX:BATCH[:bf16]. Without --python, a Python 3.12 venv with torch 2.9.1 and numpy
1.26.4 is made under target/torch-venv (from PyPI; pyenv's 3.12.1 or --python-base). om4 is
built first (cargo build --release -p om4-train) unless --om4 names a binary.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH_STEP = ROOT / "scripts" / "gpu" / "torch_step.py"
VENV = ROOT / "target" / "torch-venv"
PYTHON_BASE = Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python"
DEFAULT_CASES = ["tiny:90x180:1", "tiny:180x360:1", "tiny:180x360:4", "v2:90x180:1"]


# What upstream's model import needs besides torch and numpy, at the versions of its uv.lock.
UPSTREAM_DEPS = ["xarray==2025.1.2", "zarr==2.18.7", "numcodecs==0.15.1", "dask==2025.2.0", "pandas==2.2.3",
                 "cftime==1.6.4.post1", "einops==0.7.0", "jaxtyping==0.3.0", "pydantic==2.10.6",
                 "pydantic-settings==2.8.1", "pyyaml==6.0.2", "xarray-einstats==0.8.0", "torchinfo==1.8.0",
                 "scipy==1.15.2", "safetensors==0.6.2"]


def torch_python(base: Path) -> Path:
    """The venv's interpreter, made (torch 2.9.1, numpy 1.26.4, upstream's imports) if missing.

    PyPI's torch wheel loads its CUDA libraries even on the CPU, so the install is the whole
    wheel with its nvidia-* dependencies (about 7 GB under target/)."""
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import torch, numpy, xarray; assert torch.__version__.startswith('2.9.1')"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    if not base.exists():
        sys.exit(f"no Python 3.12 at {base}: pass --python-base or --python")
    subprocess.run([str(base), "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.9.1", "numpy==1.26.4", *UPSTREAM_DEPS],
                   check=True)
    subprocess.run(check, check=True)
    return python


class Side:
    """A resident stepping process: `--serve` prints its settings after the warm-up, then one
    JSON line of step times per count written to it."""

    def __init__(self, name: str, argv: list[str]):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.head = self._line()
        self.times: list[float] = []

    def _line(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            sys.exit(f"{self.name} ended (exit {code}) before answering")
        return json.loads(line)

    def steps(self, n: int) -> list[float]:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        times = self._line()["times"]
        self.times += times
        return times

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def p95(v: list[float]) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def run_case(case: str, args, python: Path, om4: Path) -> dict:
    parts = case.split(":")
    preset, grid, batch = parts[0], parts[1], int(parts[2])
    bf16 = len(parts) > 3 and parts[3] == "bf16"
    common = ["--preset", preset, "--grid", grid, "--batch", str(batch), "--steps", str(args.steps),
              "--device", args.device, "--warmup", str(args.warmup), "--serve"]
    om4_argv = [str(om4), "step", *common] + (["--bf16"] if bf16 else [])
    torch_argv = [str(python), str(TORCH_STEP), "--upstream-src", args.upstream_src, *common,
                  "--dtype", "bf16" if bf16 else "f32"]
    t0 = time.monotonic()
    sides = [Side("om4", om4_argv), Side("pytorch", torch_argv)]
    if sides[0].head["parameters"] != sides[1].head["parameters"]:
        sys.exit(f"{case}: om4 has {sides[0].head['parameters']} parameters, PyTorch {sides[1].head['parameters']}")
    ratios = []
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        got = {s.name: s.steps(args.per_round) for s in order}
        ratios.append(statistics.median(got["om4"]) / statistics.median(got["pytorch"]))
        print(f"  {case} round {r + 1}/{args.rounds}: om4 {statistics.median(got['om4']):.3f} s, "
              f"pytorch {statistics.median(got['pytorch']):.3f} s", file=sys.stderr, flush=True)
    for s in sides:
        s.close()
    om4_t, torch_t = sides[0].times, sides[1].times
    return {
        "case": case, "preset": preset, "grid": grid, "batch": batch, "steps": args.steps,
        "dtype": "bf16" if bf16 else "f32", "device": args.device, "parameters": sides[0].head["parameters"],
        "om4": {"median": statistics.median(om4_t), "p95": p95(om4_t), "first": sides[0].head["first_step_s"],
                "threads": sides[0].head["threads"], "times": om4_t},
        "pytorch": {"median": statistics.median(torch_t), "p95": p95(torch_t),
                    "threads": sides[1].head["threads"], "times": torch_t},
        "ratio": statistics.median(om4_t) / statistics.median(torch_t),
        "round_ratios": ratios, "wall_s": time.monotonic() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", required=True, help="upstream Samudra's src folder")
    ap.add_argument("--case", action="append", help=f"PRESET:YxX:BATCH[:bf16] (default {' '.join(DEFAULT_CASES)})")
    ap.add_argument("--steps", type=int, default=4, help="rollout steps per optimizer step")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=1, help="optimizer steps per side per round")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--python", type=Path, help="a Python with torch (default: target/torch-venv, made if missing)")
    ap.add_argument("--python-base", type=Path, default=PYTHON_BASE, help="the Python 3.12 the venv is made from")
    ap.add_argument("--om4", type=Path, help="a built om4-train (default: build it)")
    ap.add_argument("--json", type=Path, default=ROOT / "target" / "step-bench.json")
    args = ap.parse_args()
    if not (Path(args.upstream_src) / "samudra").is_dir():
        sys.exit(f"--upstream-src {args.upstream_src}: no samudra package there")
    python = args.python or torch_python(args.python_base)
    om4 = args.om4
    if om4 is None:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "om4-train"], check=True, cwd=ROOT)
        om4 = ROOT / "target" / "release" / "om4-train"
    results = []
    for case in args.case or DEFAULT_CASES:
        results.append(run_case(case, args, python, om4))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": results, "cpus": os.cpu_count()}, indent=1))
    print(f"| case | om4 median (p95) s | PyTorch median (p95) s | om4 / PyTorch (rounds) | om4 first step s "
          f"| threads, om4 / PyTorch |")
    print("|---|---|---|---|---|---|")
    for r in results:
        lo, hi = min(r["round_ratios"]), max(r["round_ratios"])
        print(f"| {r['preset']} {r['grid']} batch {r['batch']} {r['dtype']} | {r['om4']['median']:.3f} "
              f"({r['om4']['p95']:.3f}) | {r['pytorch']['median']:.3f} ({r['pytorch']['p95']:.3f}) | "
              f"{r['ratio']:.2f}x ({lo:.2f}-{hi:.2f}) | {r['om4']['first']:.2f} "
              f"| {r['om4']['threads']} / {r['pytorch']['threads']} |")


if __name__ == "__main__":
    main()
