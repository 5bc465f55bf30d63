"""Upstream PyTorch Samudra's training step at 1°, timed: the reference for om4's step time.

Builds upstream's own model (m2lines/Samudra 018a6a7, imported from --upstream-src, as
tests/data/upstream/make_upstream_model.py does) for a preset with Samudra's channel counts
(77 prognostic + 3 boundary variables, hist 1: 160 inputs, 154 outputs, 180 × 360), then times
what one om4 optimizer step does: an autoregressive rollout of --steps forward passes (each
step's prediction is the next input's prognostic part, boundary forcing fresh), masked MSE,
backward, Adam. --dtype bf16 runs the forward under torch.autocast(bfloat16), as upstream's
use_bfloat16. Prints one JSON line: median and best step time after warm-up, peak memory.
With --serve it prints that line's settings after the warm-up, then reads a step count per line
from standard input and prints those steps' times as one JSON line each (the interleaved rounds
of benches/step/step.py).

    python scripts/gpu/torch_step.py --upstream-src DIR [--preset v2] [--batch 1] [--steps 4]
        [--dtype f32|bf16] [--device cuda] [--repeats 10] [--warmup 3] [--serve]
"""

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_HELPERS = HERE.parent.parent / "tests" / "data" / "upstream" / "make_upstream_model.py"
PRESETS = {
    "tiny": {"ch_width": [16, 24, 32, 48], "upscale_factor": 2, "norm": "instance", "up": "zonally_periodic_upsample"},
    "v2": {"ch_width": [280, 380, 480, 520], "upscale_factor": 2, "norm": "batch", "up": "zonally_periodic_upsample"},
    "v2_highres": {"ch_width": [280, 380, 480, 520], "upscale_factor": 2, "norm": "instance",
                   "up": "zonally_periodic_upsample"},
}
H, W, HIST, N_PROG, N_BND = 180, 360, 1, 77, 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", required=True)
    ap.add_argument("--preset", default="v2", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--serve", action="store_true", help="time step counts read from stdin, one per line")
    ap.add_argument("--grid", default=f"{H}x{W}", help="YxX (smaller grids for a CPU smoke run)")
    args = ap.parse_args()
    ny, nx = (int(v) for v in args.grid.split("x"))

    spec = importlib.util.spec_from_file_location("make_upstream_model", MODEL_HELPERS)
    mum = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mum)
    prog_ch, bnd_ch = (HIST + 1) * N_PROG, (HIST + 1) * N_BND
    mum.PROG_CH, mum.BND_CH, mum.HIST = prog_ch, bnd_ch, HIST
    sys.path.insert(0, str(Path(args.upstream_src)))
    mum.install_stub_modules()
    import torch
    from samudra.utils.ctx import GridContext

    device = torch.device(args.device)
    torch.manual_seed(0)
    _, model = mum.build_model(PRESETS[args.preset], grid=(ny, nx))
    model = model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    label_mask = (torch.rand(prog_ch, ny, nx, generator=gen) > 0.3).to(device)
    lat = torch.linspace(-89.5, 89.5, ny, dtype=torch.float64)
    lon = torch.linspace(0.5, 359.5, nx, dtype=torch.float64)
    ctx = GridContext(label_mask, (lat, lon), (lat, lon))
    b = args.batch
    prog0 = torch.randn(b, prog_ch, ny, nx, generator=gen).to(device)
    forcing = [torch.randn(b, bnd_ch, ny, nx, generator=gen).to(device) for _ in range(args.steps)]
    labels = [torch.randn(b, prog_ch, ny, nx, generator=gen).to(device) for _ in range(args.steps)]
    mask = label_mask.unsqueeze(0).float()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            prog, loss = prog0, 0.0
            for k in range(args.steps):
                pred = model.forward_once(prog, forcing[k], ctx)
                loss = loss + (((pred.float() - labels[k]) * mask) ** 2).mean()
                prog = pred
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def timed(n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        return times

    out = {
        "framework": "pytorch", "preset": args.preset, "batch": b, "steps": args.steps, "dtype": args.dtype,
        "grid": [ny, nx], "parameters": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    if args.serve:
        print(json.dumps(out), flush=True)
        for line in sys.stdin:
            print(json.dumps({"times": timed(int(line))}), flush=True)
        return
    times = timed(args.repeats)
    out.update({
        "step_s_median": statistics.median(times), "step_s_best": min(times),
        "samples_per_s": b / statistics.median(times),
        "peak_memory_gib": (torch.cuda.max_memory_allocated() / 2**30) if device.type == "cuda" else None,
    })
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
