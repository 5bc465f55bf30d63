"""Weights saved by om4 load strictly into upstream PyTorch Samudra (m2lines/Samudra 018a6a7).

Takes a safetensors file written by `om4_samudra::save_upstream` from the `small_batch` fixture's
weights (the Rust test `saved_weights_round_trip_bit_for_bit_with_upstream_names` keeps it with
`OM4_KEEP_SAVED=DIR`), builds upstream's model for that variant with make_upstream_model.py's
builder, calls `load_state_dict(..., strict=True)`, and checks every tensor equals the upstream
file om4 loaded it from (the batch-norm counters om4 writes as 0 excepted).

    OM4_KEEP_SAVED=/tmp/keep cargo test -p om4-samudra --test upstream_weights saved
    python check_om4_weights_strict.py /tmp/keep/small_batch_from_om4.safetensors
"""

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    saved = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location("make_upstream_model", HERE / "make_upstream_model.py")
    mum = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mum)
    sys.path.insert(0, os.environ.get("SAMUDRA_SRC", "/work/upstream-samudra/src"))
    mum.install_stub_modules()
    import torch
    from safetensors.torch import load_file

    _, model = mum.build_model(mum.VARIANTS["small_batch"])
    state = load_file(str(saved))
    print(model.load_state_dict(state, strict=True))
    original = load_file(str(HERE / "model" / "small_batch.safetensors"))
    differ = [k for k in original if not k.endswith("num_batches_tracked") and not torch.equal(state[k], original[k])]
    print(f"{len(state)} tensors; differing from the upstream file: {differ or 'none'}")
    sys.exit(1 if differ or set(state) != set(original) else 0)


if __name__ == "__main__":
    main()
