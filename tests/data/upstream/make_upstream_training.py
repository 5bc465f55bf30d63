"""Training-semantics fixtures from upstream Samudra's own code (m2lines/Samudra 018a6a7).

Writes, under --out (default: this folder) in training/:
- ema_step{0,1,2,3}.safetensors: the `small_batch` model (make_upstream_model.py) at its start
  and after each of three parameter changes (buffers changed too, as training changes batch-norm
  statistics); upstream's `EMATracker(model, 0.999)` is called after each change, as train.py
  does after every optimizer step.
- ema_after3.safetensors: the model after `EMATracker.copy_to`: the EMA parameters with the live
  model's buffers, which is what upstream validates with.
- bn_input.npy, bn_running_mean.npy, bn_running_var.npy, bn_output.npy: one training-mode
  forward of `torch.nn.BatchNorm2d(3)` (momentum 0.1, eps 1e-5), whose running variance is
  updated with the unbiased batch variance.

    python make_upstream_training.py --upstream-src /path/to/Samudra/src
"""

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", default=os.environ.get("SAMUDRA_SRC", "/work/upstream-samudra/src"))
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_upstream_model", HERE / "make_upstream_model.py")
    mum = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mum)
    src = Path(args.upstream_src)
    sys.path.insert(0, str(src))
    mum.install_stub_modules()
    import torch
    from safetensors.torch import save_file
    from samudra.utils.ema import EMATracker

    out = Path(args.out) / "training"
    out.mkdir(parents=True, exist_ok=True)
    save = lambda m, name: save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(out / name))

    torch.manual_seed(mum.SEED)
    gen = torch.Generator().manual_seed(mum.SEED + 1)
    _, model = mum.build_model(mum.VARIANTS["small_batch"])
    mum.perturb(model, gen)
    save(model, "ema_step0.safetensors")
    ema = EMATracker(model, decay=0.999)
    for step in (1, 2, 3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
            for name, b in model.named_buffers():
                if name.endswith("running_mean") or name.endswith("running_var"):
                    b.mul_(1.0 + 0.01 * step).add_(0.003 * step)
        ema(model)
        save(model, f"ema_step{step}.safetensors")
    ema.copy_to(model)
    save(model, "ema_after3.safetensors")

    bn = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
        bn.running_var.copy_(torch.tensor([1.5, 0.5, 2.0]))
    bn.train()
    x = torch.randn(2, 3, 4, 5, generator=gen) * 3.0 + 1.0
    y = bn(x)
    np.save(out / "bn_input.npy", x.numpy())
    np.save(out / "bn_output.npy", y.detach().numpy())
    np.save(out / "bn_running_mean.npy", bn.running_mean.numpy())
    np.save(out / "bn_running_var.npy", bn.running_var.numpy())
    print(f"wrote {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
