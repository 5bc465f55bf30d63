"""om4: OM4 Zarr stores read in Rust for ocean-emulator training.

``FlatOm4ReadPool``, ``FlatOm4Reader`` and ``CompactOm4Reader`` read planes of a store's
channels into a caller's float32 NumPy array, ``(times, channels, y, x)``, on a shared pool of
read threads, with the GIL released. The same classes are importable as
``samudra_rust_loader`` (upstream Samudra's ``data.loading.type: rust``).
"""

from om4._native import CompactOm4Reader, FlatOm4ReadPool, FlatOm4Reader, __version__

__all__ = ["CompactOm4Reader", "FlatOm4ReadPool", "FlatOm4Reader", "__version__"]
