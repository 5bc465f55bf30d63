#!/usr/bin/env python3
"""Generate model parity fixtures from upstream Samudra's own model code (issue 12).

Upstream: github.com/m2lines/Samudra at commit
    018a6a7453bd2b600daffcc971af964102ab90a1

Nothing from upstream is committed here: the script imports upstream's `samudra` package
from `--upstream-src` or `$SAMUDRA_SRC` (default /work/upstream-samudra/src).
`perceiver_pytorch` and `aurora` (imported at module load by samudra.config and
samudra.models, unused by the Samudra U-Net) are replaced by stub modules in sys.modules.

How to run (Python 3.12, torch 2.9.1 CPU, numpy 1.26.4, safetensors 0.6.2, plus what
make_upstream_batches.py lists):

    python tests/data/upstream/make_upstream_model.py [--upstream-src DIR] [--out DIR]

Upstream has no `tiny` preset (its presets: samudra_om4 == samudra_om4_v2, samudra_om4_v1,
samudra_om4_v2_highres, plus the perceiver models samudra_mini/samudra_multi). Every
model here is upstream's `SamudraConfig(...).build(...)` (src/samudra/config.py) with the
hyperparameters below:

  variant          ch_width          upscale  norm      up_sampling_block
  small_batch      [4, 6, 8, 12]     2        batch     zonally_periodic_upsample  (v2-like)
  small_instance   [4, 6, 8, 12]     2        instance  zonally_periodic_upsample  (v2_highres-like)
  small_v1         [2, 3, 4, 6]      4        batch     bilinear_upsample          (v1-like)
  tiny             [16, 24, 32, 48]  2        instance  zonally_periodic_upsample  (om4's `tiny`,
                                                        crates/om4-samudra/src/model.rs)
  all: dilation [1, 2, 4, 8], n_layers [1,1,1,1], kernel 3, capped_gelu, avg_pool,
       pad "circular", last_kernel_size 3, pred_residuals false, pos_channels 0,
       add_3d_coordinates false, use_bfloat16 false, checkpointing null.

Inputs: hist 0, 2 prognostic vars, 1 boundary var => 2 prognostic + 1 boundary = 3 input
channels, 2 output channels; grid 16 x 128 (lat x lon). 128 is the smallest width that
PyTorch accepts: the middle block runs at W/16 with dilation 8, i.e. a circular pad of 8,
and torch refuses a circular pad wider than the tensor.

What it writes under --out (default: this script's folder), in model/:
  <variant>.safetensors     state_dict (float32), upstream key names, incl. buffers
                            (`cap` of every CappedGELU, BN running_mean/var,
                            num_batches_tracked as int64)
  small_batch_ckpt.pt       {"model": state_dict, "ema": EMATracker.get_state(True),
                             "epoch": 3} as Trainer.save_checkpoint writes it (no optimizer)
  small_batch_ema_ckpt_module.pt  the EMA checkpoint as Trainer.save_checkpoint(...,
                            for_inference=True) writes it under DDP: "model" = state_dict
                            with the EMA parameters copied in (buffers are the model's),
                            every key prefixed by "module."; "ema" = get_state(False)
  input.npy                 (1, 3, 16, 128) float32, shared by all variants
  mask.npy                  (2, 16, 128) bool, True = ocean (GridContext.label_mask)
  <variant>_output.npy      (1, 2, 16, 128) float64: eval-mode forward in float64
  <variant>_output_f32.npy  (1, 2, 16, 128) float32: unmodified upstream forward, float32
                            (small_batch and tiny only)
  small_batch_output_ema.npy float64 forward with the EMA parameters copied in
                            (EMATracker.copy_to; buffers stay the model's): the expected
                            output of small_batch_ema_ckpt_module.pt
  model.json                shapes, constructor arguments, tolerances seen
and tests/data/upstream/model_keys.txt: every state_dict key with shape and dtype.

The float64 forward: upstream's Samudra.forward_once casts to float32 before the head
(`fts = fts.to(torch.float32)`), which fails for a double model. The script takes
forward_once's source from models/samudra.py and replaces only that line with
`fts = fts.to(self.decoder.weight.dtype)`; everything else is upstream's code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import textwrap
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np

UPSTREAM_COMMIT = "018a6a7453bd2b600daffcc971af964102ab90a1"
HERE = Path(__file__).resolve().parent

H, W = 16, 128
N_PROG_VARS, N_BND_VARS, HIST = 2, 1, 0
PROG_CH = (HIST + 1) * N_PROG_VARS
BND_CH = (HIST + 1) * N_BND_VARS
SEED = 1234

VARIANTS = {
    "small_batch": dict(ch_width=[4, 6, 8, 12], upscale_factor=2, norm="batch", up="zonally_periodic_upsample"),
    "small_instance": dict(ch_width=[4, 6, 8, 12], upscale_factor=2, norm="instance", up="zonally_periodic_upsample"),
    "small_v1": dict(ch_width=[2, 3, 4, 6], upscale_factor=4, norm="batch", up="bilinear_upsample"),
    "tiny": dict(ch_width=[16, 24, 32, 48], upscale_factor=2, norm="instance", up="zonally_periodic_upsample"),
}


def install_stub_modules() -> None:
    class _Anything:
        def __init__(self, *a, **k):
            raise RuntimeError("stubbed module object used")

    def make(name: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = []  # type: ignore[attr-defined]

        def __getattr__(attr: str):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Anything

        mod.__getattr__ = __getattr__  # type: ignore[method-assign]
        return mod

    for name in [
        "perceiver_pytorch",
        "perceiver_pytorch.perceiver_io",
        "perceiver_pytorch.perceiver_pytorch",
        "aurora",
        "aurora.model",
        "aurora.model.posencoding",
        "aurora.model.fourier",
    ]:
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = make(name)


def forward_once_float64(src: Path):
    """Upstream Samudra.forward_once with its float32 cast made dtype-following."""
    import torch

    import samudra.models.samudra as ms

    path = src / "samudra" / "models" / "samudra.py"
    text = path.read_text()
    tree = ast.parse(text)
    seg = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Samudra":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward_once":
                    seg = textwrap.dedent(ast.get_source_segment(text, item))
    assert seg is not None
    old = "fts = fts.to(torch.float32)"
    assert seg.count(old) == 1, "upstream forward_once changed; revisit the float64 patch"
    seg = seg.replace(old, "fts = fts.to(self.decoder.weight.dtype)")
    ns = dict(vars(ms))
    ns["torch"] = torch
    exec(compile(seg, str(path), "exec"), ns)
    return ns["forward_once"]


def build_model(variant: dict, grid=(H, W)):
    from samudra.config import SamudraConfig

    cfg = SamudraConfig.model_validate(
        {
            "pred_residuals": False,
            "last_kernel_size": 3,
            "pad": "circular",
            "unet": {
                "ch_width": variant["ch_width"],
                "dilation": [1, 2, 4, 8],
                "n_layers": [1, 1, 1, 1],
                "core_block": {
                    "block_type": "conv_next_block",
                    "kernel_size": 3,
                    "activation": "capped_gelu",
                    "upscale_factor": variant["upscale_factor"],
                    "norm": variant["norm"],
                },
                "down_sampling_block": "avg_pool",
                "up_sampling_block": variant["up"],
            },
        }
    )
    src = types.SimpleNamespace(grid_size=grid)
    model = cfg.build(
        prog_channels=PROG_CH, boundary_channels=BND_CH, out_channels=PROG_CH, hist=HIST, srcs=[src]
    )
    return cfg, model


def perturb(model, gen):
    """Non-trivial weights: rescale conv/linear weights, random BN affine + running stats."""
    import torch

    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(2.0 + 1.0 * torch.randn(c, generator=gen))
                mod.bias.copy_(0.5 * torch.randn(c, generator=gen))
                mod.running_mean.copy_(0.5 * torch.randn(c, generator=gen))
                mod.running_var.copy_(0.3 + 1.5 * torch.rand(c, generator=gen))
                mod.num_batches_tracked.fill_(int(torch.randint(1, 1000, (1,), generator=gen)))
            elif isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
                mod.weight.mul_(1.5)
                if mod.bias is not None:
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=gen))


def count_capped(model, fwd, x, ctx):
    """How many CappedGELU outputs hit the cap (so clamping is exercised)."""
    import torch

    from samudra.models.modules.activations import CappedGELU

    hits = [0, 0]

    def hook(mod, inp, out):
        hits[0] += int((out >= mod.cap).sum())
        hits[1] += out.numel()

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, CappedGELU)]
    with torch.no_grad():
        fwd(model, x[0], x[1], ctx)
    for h in hs:
        h.remove()
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", default=os.environ.get("SAMUDRA_SRC", "/work/upstream-samudra/src"))
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    src = Path(args.upstream_src)
    out = Path(args.out)
    mdir = out / "model"
    mdir.mkdir(parents=True, exist_ok=True)

    sys.path.insert(0, str(src))
    install_stub_modules()
    import torch
    from safetensors.torch import save_file

    import samudra

    assert str(Path(samudra.__file__).resolve()).startswith(str(src.resolve()))
    from samudra.models.samudra import Samudra
    from samudra.utils.ctx import GridContext
    from samudra.utils.data import Masks
    from samudra.utils.ema import EMATracker

    torch.set_num_threads(2)
    fwd64 = forward_once_float64(src)

    gen = torch.Generator().manual_seed(SEED)
    # Inputs: prognostic (hist-major) then boundary, as Samudra.forward_once concatenates.
    x = torch.randn(1, PROG_CH + BND_CH, H, W, generator=gen, dtype=torch.float32) * 2.0
    # Masks: per prognostic variable, nested with depth-like structure; prognostic_with_hist.
    noise = torch.randn(H, W, generator=gen)
    var_masks = torch.stack([noise > -0.8, noise > -0.2])
    var_masks[:, 0, :] = False
    var_masks[:, 6:9, 40:60] = False
    masks = Masks(var_masks, var_masks[0])
    label_mask = masks.prognostic_with_hist(HIST)  # (PROG_CH, H, W) bool
    lat = torch.linspace(-80, 80, H, dtype=torch.float64)
    lon = torch.linspace(1.40625, 358.59375, W, dtype=torch.float64)
    ctx = GridContext(label_mask, (lat, lon), (lat, lon))
    x = torch.where(torch.cat([label_mask, label_mask[: BND_CH // (HIST + 1)].repeat(HIST + 1, 1, 1)]), x, 0.0)
    np.save(mdir / "input.npy", x.numpy())
    np.save(mdir / "mask.npy", label_mask.numpy())

    keys_lines = []
    info = {
        "upstream_commit": UPSTREAM_COMMIT,
        "torch": torch.__version__,
        "seed": SEED,
        "grid": [H, W],
        "hist": HIST,
        "prog_channels": PROG_CH,
        "boundary_channels": BND_CH,
        "in_channels": PROG_CH + BND_CH,
        "out_channels": PROG_CH,
        "mask_applied": "Samudra.forward_once: torch.where(ctx.label_mask, decoder_out, 0.0)",
        "float64_patch": "forward_once: 'fts = fts.to(torch.float32)' -> 'fts = fts.to(self.decoder.weight.dtype)'",
        "variants": {},
    }
    for vname, variant in VARIANTS.items():
        torch.manual_seed(SEED)
        cfg, model = build_model(variant)
        assert isinstance(model, Samudra)
        perturb(model, gen)
        model.eval()
        sd = model.state_dict()
        save_file({k: v.contiguous() for k, v in sd.items()}, str(mdir / f"{vname}.safetensors"))

        keys_lines.append(f"# {vname}: {variant}")
        for k, v in sd.items():
            keys_lines.append(f"{vname}\t{k}\t{tuple(v.shape)}\t{str(v.dtype).removeprefix('torch.')}")
        n_params = sum(p.numel() for p in model.parameters())

        with torch.no_grad():
            out32 = model.forward_once(x[:, :PROG_CH], x[:, PROG_CH:], ctx)
        capped = count_capped(model, lambda m, p, b, c: m.forward_once(p, b, c), (x[:, :PROG_CH], x[:, PROG_CH:]), ctx)
        m64 = model.double()
        with torch.no_grad():
            out64 = fwd64(m64, x[:, :PROG_CH].double(), x[:, PROG_CH:].double(), ctx)
        assert out64.dtype == torch.float64
        assert torch.isfinite(out64).all() and torch.isfinite(out32).all()
        assert (out64[:, ~label_mask] == 0).all() and (out32[:, ~label_mask] == 0).all()
        diff = float((out64 - out32.double()).abs().max())
        np.save(mdir / f"{vname}_output.npy", out64.numpy())
        if vname in ("small_batch", "tiny"):
            np.save(mdir / f"{vname}_output_f32.npy", out32.numpy())
        vinfo = {
            "config": cfg.model_dump(mode="json"),
            "n_parameters": n_params,
            "n_state_dict_tensors": len(sd),
            "max_abs_output": float(out64.abs().max()),
            "max_abs_diff_f32_vs_f64": diff,
            "capped_gelu_outputs_at_cap": capped,
        }

        if vname == "small_batch":
            # A checkpoint as Trainer.save_checkpoint writes it ("model" + "ema"), the EMA
            # built by upstream's EMATracker after a few updates of perturbed weights.
            model = model.float()
            ema = EMATracker(model, decay=0.999, faster_decay_at_start=True)
            decays = []
            with torch.no_grad():
                for _ in range(3):
                    for p in model.parameters():
                        p.add_(0.05 * torch.randn(p.shape, generator=gen))
                    ema(model)
                    decays.append(float(ema.cur_decay))
            sd = model.state_dict()
            # the "model" weights changed: rewrite safetensors + outputs for them
            save_file({k: v.contiguous() for k, v in sd.items()}, str(mdir / f"{vname}.safetensors"))
            with torch.no_grad():
                out32 = model.forward_once(x[:, :PROG_CH], x[:, PROG_CH:], ctx)
                out64 = fwd64(model.double(), x[:, :PROG_CH].double(), x[:, PROG_CH:].double(), ctx)
            np.save(mdir / f"{vname}_output.npy", out64.numpy())
            np.save(mdir / f"{vname}_output_f32.npy", out32.numpy())
            vinfo["max_abs_output"] = float(out64.abs().max())
            vinfo["max_abs_diff_f32_vs_f64"] = float((out64 - out32.double()).abs().max())
            model = model.float()
            state = ema.get_state(include_ema_params=True)
            ckpt = {"model": OrderedDict(sd), "ema": state, "epoch": 3}
            torch.save(ckpt, mdir / "small_batch_ckpt.pt")
            # forward with EMA parameters (buffers are not averaged)
            ema.store(model.parameters())
            ema.copy_to(model)
            ema_sd = {k: v.clone() for k, v in model.state_dict().items()}
            ckpt_m = {
                "model": OrderedDict((f"module.{k}", v) for k, v in ema_sd.items()),
                "ema": ema.get_state(include_ema_params=False),
                "epoch": 3,
            }
            torch.save(ckpt_m, mdir / "small_batch_ema_ckpt_module.pt")
            with torch.no_grad():
                out_ema = fwd64(model.double(), x[:, :PROG_CH].double(), x[:, PROG_CH:].double(), ctx)
            model = model.float()
            ema.restore(model.parameters())
            np.save(mdir / f"{vname}_output_ema.npy", out_ema.numpy())
            vinfo["ema"] = {
                "decay": 0.999,
                "faster_decay_at_start": True,
                "num_updates": int(state["num_updates"]),
                "cur_decay_per_update": decays,
                "ema_param_names_example": list(state["ema_params"])[:4],
                "max_abs_output_ema": float(out_ema.abs().max()),
            }
        info["variants"][vname] = vinfo
        print(vname, {k: v for k, v in vinfo.items() if k != "config"})

    (out / "model_keys.txt").write_text(
        f"# upstream {UPSTREAM_COMMIT}: Samudra state_dict keys (variant, key, shape, dtype)\n"
        + "\n".join(keys_lines)
        + "\n"
    )
    (mdir / "model.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
