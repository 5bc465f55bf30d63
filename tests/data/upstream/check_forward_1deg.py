"""Forward parity of om4's Samudra with upstream PyTorch Samudra at the 1° grid (180 × 360).

Builds upstream's own model (m2lines/Samudra 018a6a7, imported from --upstream-src) for the
presets `tiny` (om4's: widths [16, 24, 32, 48], instance norm), `v1`, `v2` and `v2_highres`
with Samudra's channel counts (77 prognostic + 3 boundary variables, hist 1: 160 inputs, 154
outputs), random weights with perturbed batch-norm statistics (as make_upstream_model.py does),
saves them as safetensors with a random input and ocean mask, runs the float64 forward in torch,
then om4's `samudra_forward` example on the same files, and prints
max|om4 − ref| / max|ref| per preset (the bound is 1e-5), beside torch's own float32 forward's
error on the same case. Not run in CI (torch, minutes of CPU).

Two cases (--case):
- `nested` (the first): inputs 2·N(0, 1), nested ocean masks shared by the variables, weights
  with perturbed batch-norm statistics;
- `independent`: upstream's default initialization (seeded, nothing perturbed), standard-normal
  inputs zeroed on land, one random land mask per channel covering 18–37 % of the cells (smooth
  blobs: a coarse random field upsampled and thresholded at the channel's fraction; or with
  `--masks cells` cell by cell).

    python check_forward_1deg.py --upstream-src /path/to/Samudra/src \
        --forward-bin target/release/examples/samudra_forward [--presets tiny,v2_highres] \
        [--case nested|independent] [--masks blobs|cells] [--seed N] [--work DIR]

On a GPU (scripts/gpu-check.sh): `--forward-bin "om4-train forward --device cuda"` (a command
line: the forward pass on the device) and `--torch-device cuda` (torch's float64 reference and its
float32 forward there, TF32 off so that float32 is float32).
"""

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PRESETS = {
    "tiny": {"ch_width": [16, 24, 32, 48], "upscale_factor": 2, "norm": "instance", "up": "zonally_periodic_upsample"},
    "v1": {"ch_width": [200, 250, 300, 400], "upscale_factor": 4, "norm": "batch", "up": "bilinear_upsample"},
    "v2": {"ch_width": [280, 380, 480, 520], "upscale_factor": 2, "norm": "batch", "up": "zonally_periodic_upsample"},
    "v2_highres": {
        "ch_width": [280, 380, 480, 520],
        "upscale_factor": 2,
        "norm": "instance",
        "up": "zonally_periodic_upsample",
    },
}
H, W, HIST, N_PROG, N_BND = 180, 360, 1, 77, 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", default=os.environ.get("SAMUDRA_SRC", "/work/upstream-samudra/src"))
    ap.add_argument("--forward-bin", required=True, help="samudra_forward, or a command line that runs it")
    ap.add_argument("--torch-device", default="cpu", help="where torch's reference forwards run")
    ap.add_argument("--presets", default="tiny,v1,v2,v2_highres")
    ap.add_argument("--case", default="nested", choices=["nested", "independent"])
    ap.add_argument("--masks", default="blobs", choices=["blobs", "cells"],
                    help="independent case: land in smooth blobs, or cell by cell at random")
    ap.add_argument("--work", default=None)
    ap.add_argument("--seed", type=int, default=None, help="inputs, masks and weights (default: make_upstream_model's)")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_upstream_model", HERE / "make_upstream_model.py")
    mum = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mum)
    prog_ch, bnd_ch = (HIST + 1) * N_PROG, (HIST + 1) * N_BND
    mum.PROG_CH, mum.BND_CH, mum.HIST = prog_ch, bnd_ch, HIST
    src = Path(args.upstream_src)
    sys.path.insert(0, str(src))
    mum.install_stub_modules()
    import torch
    from safetensors.torch import save_file
    from samudra.utils.ctx import GridContext

    torch.set_num_threads(os.cpu_count() or 2)
    dev = torch.device(args.torch_device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    fwd64 = mum.forward_once_float64(src)
    work = Path(args.work or tempfile.mkdtemp(prefix="om4-1deg-"))
    work.mkdir(parents=True, exist_ok=True)
    seed = mum.SEED if args.seed is None else args.seed
    gen = torch.Generator().manual_seed(seed)
    lat = torch.linspace(-89.5, 89.5, H, dtype=torch.float64)
    lon = torch.linspace(0.5, 359.5, W, dtype=torch.float64)
    if args.case == "nested":
        x = torch.randn(1, prog_ch + bnd_ch, H, W, generator=gen, dtype=torch.float32) * 2.0
        depth = torch.randn(H, W, generator=gen)
        # Nested ocean masks, one per level of 19, shared by the variables; the first row is land.
        levels = torch.stack([depth > -1.5 + 0.1 * k for k in range(19)])
        levels[:, 0, :] = False
        var_mask = torch.cat([levels, levels, levels, levels, levels[:1]])  # uo, vo, thetao, so, zos
        label_mask = var_mask.repeat(HIST + 1, 1, 1)
    else:
        n_vars = N_PROG + N_BND
        if args.masks == "cells":
            field = torch.rand(n_vars, H, W, generator=gen)
        else:
            coarse = torch.randn(n_vars, 1, H // 10, W // 10, generator=gen)
            field = torch.nn.functional.interpolate(coarse, size=(H, W), mode="bilinear", align_corners=False)[:, 0]
        land_share = 0.18 + 0.19 * torch.rand(n_vars, generator=gen)
        cut = torch.stack([torch.quantile(f.flatten(), q) for f, q in zip(field, land_share)])
        ocean = field > cut[:, None, None]  # (variables, H, W): True = ocean
        # Inputs are time-major per variable set: [prog t0 | prog t1 | bnd t0 | bnd t1].
        prog_mask, bnd_mask = ocean[:N_PROG].repeat(HIST + 1, 1, 1), ocean[N_PROG:].repeat(HIST + 1, 1, 1)
        x = torch.randn(1, prog_ch + bnd_ch, H, W, generator=gen, dtype=torch.float32)
        x = torch.where(torch.cat([prog_mask, bnd_mask])[None], x, 0.0)
        label_mask = prog_mask
        shares = 1 - ocean.float().mean(dim=(1, 2))
        print(f"land share per channel {shares.min():.3f}-{shares.max():.3f}", flush=True)
    ctx = GridContext(label_mask, (lat, lon), (lat, lon))
    np.save(work / "input.npy", x.numpy())
    np.save(work / "mask.npy", label_mask.numpy())
    results = {}
    for name in args.presets.split(","):
        torch.manual_seed(seed)
        _, model = mum.build_model(PRESETS[name], grid=(H, W))
        if args.case == "nested":
            mum.perturb(model, gen)
        model.eval()
        weights = work / f"{name}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
        xd, ctxd = x.to(dev), ctx.to(dev)
        model.to(dev)
        with torch.no_grad():
            ref32 = model.forward_once(xd[:, :prog_ch], xd[:, prog_ch:], ctxd).cpu().numpy().astype(np.float64)
        t0 = time.time()
        with torch.no_grad():
            ref = fwd64(model.double(), xd[:, :prog_ch].double(), xd[:, prog_ch:].double(), ctxd).cpu().numpy()
        t_torch = time.time() - t0
        err32 = float(np.max(np.abs(ref32 - ref)) / np.max(np.abs(ref)))
        out = work / f"{name}_om4.npy"
        t0 = time.time()
        subprocess.run(
            [*shlex.split(args.forward_bin), "--weights", str(weights), "--model", name, "--in-channels", str(prog_ch + bnd_ch),
             "--out-channels", str(prog_ch), "--input", str(work / "input.npy"), "--mask", str(work / "mask.npy"),
             "--out", str(out)],
            check=True,
        )
        t_om4 = time.time() - t0
        got = np.load(out).astype(np.float64)
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        results[name] = {"case": args.case, "relative_error": err, "torch_float32_relative_error": err32,
                         "torch_float64_s": round(t_torch, 1), "om4_s": round(t_om4, 1),
                         "n_parameters": sum(p.numel() for p in model.parameters())}
        print(f"{name} ({args.case}): max|om4 - ref| / max|ref| = {err:.3e} (bound 1e-5), torch float32 {err32:.3e} "
              f"[torch float64 {t_torch:.0f} s, om4 {t_om4:.0f} s]", flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results))
    if any(r["relative_error"] > 1e-5 for r in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
