"""om4: OM4 Zarr stores read in Rust for ocean-emulator training.

``FlatOm4ReadPool``, ``FlatOm4Reader`` and ``CompactOm4Reader`` read planes of a store's
channels into a caller's float32 NumPy array, ``(times, channels, y, x)``, on a shared pool of
read threads, with the GIL released. The same classes are importable as
``samudra_rust_loader`` (upstream Samudra's ``data.loading.type: rust``).

``Loader`` is Samudra's whole batch pipeline in Rust: ``Loader(store, hist=1, steps=2,
batch_size=4, seed=0)``, then ``for batch in loader.epoch(n)``: each ``batch.steps[k]`` holds
``model_input``, ``prognostic``, ``boundary`` and ``label`` as float32 NumPy arrays
``(batch, channels, y, x)``, equal bit for bit to upstream's ``ModelBatch``; ``loader.label_mask``
is its label mask. ``torch.from_dlpack(array)`` shares an array's memory; for copies to a GPU,
``om4.torch.to_device(loader.epoch(n), "cuda")`` holds each batch until its copies completed
(its arrays' pooled buffers are reused once the batch is gone). With ``prepare="device"`` the
loader yields ``RawBatch``es (each unique raw plane once, and the plan), which ``to_device``
normalizes, masks and gathers on the GPU, to the host path's bits.
"""

from om4._native import (
    Batch,
    CompactOm4Reader,
    EpochIter,
    FlatOm4ReadPool,
    FlatOm4Reader,
    Loader,
    Normalization,
    RawBatch,
    Step,
    __version__,
)

__all__ = [
    "Batch",
    "CompactOm4Reader",
    "EpochIter",
    "FlatOm4ReadPool",
    "FlatOm4Reader",
    "Loader",
    "Normalization",
    "RawBatch",
    "Step",
    "__version__",
]
