"""How far upstream Samudra's bfloat16 forward (use_bfloat16: the U-Net under
torch.autocast(bfloat16), the decoder in float32) is from its float32 forward: the yardstick for
om4's `use_bfloat16` (crates/om4-samudra/tests/model.rs asserts om4's deviation on the same
network and grid). Upstream m2lines/Samudra 018a6a7, imported from --upstream-src; CPU is enough.

    python check_bf16_deviation.py --upstream-src /path/to/Samudra/src [--seeds 3]

Prints the relative L2 difference ||bf16 - f32|| / ||f32|| per seed for the tiny network
(widths [16, 24, 32, 48], instance norm, periodic upsampling), 4 inputs (hist 1, 1 prognostic and
1 boundary variable), 2 outputs, 64 x 128 grid, random weights and inputs in [-1, 1]. Measured
2026-12-01 with torch 2.9.1 on CPU: 0.0149, 0.0174, 0.0204.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY = dict(ch_width=[16, 24, 32, 48], upscale_factor=2, norm="instance", up="zonally_periodic_upsample")
H, W = 64, 128


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", required=True)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("make_upstream_model", HERE / "make_upstream_model.py")
    mum = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mum)
    mum.PROG_CH, mum.BND_CH, mum.HIST = 2, 2, 1
    sys.path.insert(0, str(Path(args.upstream_src)))
    mum.install_stub_modules()
    import torch
    from samudra.utils.ctx import GridContext

    lat = torch.linspace(-89.5, 89.5, H, dtype=torch.float64)
    lon = torch.linspace(0.5, 359.5, W, dtype=torch.float64)
    ctx = GridContext(torch.ones(2, H, W, dtype=torch.bool), (lat, lon), (lat, lon))
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        _, model = mum.build_model(TINY, grid=(H, W))
        model.eval()
        x = (torch.rand(1, 4, H, W) - 0.5) * 2
        with torch.no_grad():
            model.use_bfloat16 = False
            ref = model.forward_once(x[:, :2], x[:, 2:], ctx)
            model.use_bfloat16 = True
            got = model.forward_once(x[:, :2], x[:, 2:], ctx)
        print(f"seed {seed}: relative L2 {float((got - ref).norm() / ref.norm()):.4f}")


if __name__ == "__main__":
    main()
