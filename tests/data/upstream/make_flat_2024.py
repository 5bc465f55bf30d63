"""The 2024 release's key layout, for om4's loader test.

Samudra's 2024 model (m2lines/Samudra at 6f4e8ab4, `src/models/unet.py`) kept every layer in one
flat `layers` ModuleList: the same blocks as today's `unet.layers.N` (down blocks 0, 2, 4, 6,
middle 8, up blocks 10, 12, 14, last block 16, each `skip_module` + `convblock.{0..6}`) with the
3×3 head at `layers.17` instead of `decoder`. This writes model/small_batch_flat2024.pt, a bare
state dict of the `small_batch` fixture's weights under those names (torch.save), whose forward is
model/small_batch_output.npy.

    python make_flat_2024.py
"""

import re
from pathlib import Path

import torch
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent


def flat_2024(key: str) -> str:
    key = re.sub(r"^unet\.layers\.", "layers.", key)
    return re.sub(r"^decoder\.", "layers.17.", key)


state = load_file(str(HERE / "model" / "small_batch.safetensors"))
torch.save({flat_2024(k): v for k, v in state.items()}, HERE / "model" / "small_batch_flat2024.pt")
print(sorted({k.split(".")[1] for k in map(flat_2024, state)}, key=int))
