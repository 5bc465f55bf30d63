from os import PathLike

import numpy as np
from numpy.typing import NDArray

__version__: str

class FlatOm4ReadPool:
    def __init__(self, max_concurrent_reads: int) -> None: ...
    @property
    def max_concurrent_reads(self) -> int: ...

class FlatOm4Reader:
    def __init__(self, path: str | PathLike[str], variables: list[str], read_pool: FlatOm4ReadPool) -> None: ...
    @property
    def shape(self) -> tuple[int, int, int]: ...
    def read_into(self, indexes: list[int], variables: list[str], target: NDArray[np.float32]) -> None: ...

class CompactOm4Reader:
    def __init__(
        self, path: str | PathLike[str], variable_selectors: list[tuple[str, int | None]], read_pool: FlatOm4ReadPool
    ) -> None: ...
    @property
    def shape(self) -> tuple[int, int, int]: ...
    def read_into(
        self, indexes: list[int], variable_selectors: list[tuple[str, int | None]], target: NDArray[np.float32]
    ) -> None: ...

class Step:
    model_input: NDArray[np.float32]
    prognostic: NDArray[np.float32]
    boundary: NDArray[np.float32]
    label: NDArray[np.float32]

class Batch:
    samples: list[int]
    steps: list[Step]
    wait_s: float

class EpochIter:
    def __iter__(self) -> EpochIter: ...
    def __next__(self) -> Batch: ...
    def close(self) -> None: ...
    def __enter__(self) -> EpochIter: ...
    def __exit__(self, *args: object) -> bool: ...

class Loader:
    def __init__(
        self,
        store: str | PathLike[str],
        *,
        means: str | PathLike[str] | None = None,
        stds: str | PathLike[str] | None = None,
        prognostic: list[str] | None = None,
        boundary: list[str] | None = None,
        levels: int = 19,
        time: str | None = None,
        split: str = "train",
        hist: int = 1,
        steps: int = 1,
        stride: int = 1,
        batch_size: int = 1,
        seed: int = 0,
        rank: int = 0,
        world_size: int | None = None,
        normalize_before_mask: bool = True,
        fill_value: float = 0.0,
        prefetch: int = 2,
        max_concurrent_reads: int = 4,
        pin_memory: bool | int | str | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def epoch(self, epoch: int) -> EpochIter: ...
    @property
    def prognostic(self) -> list[str]: ...
    @property
    def boundary(self) -> list[str]: ...
    @property
    def grid(self) -> tuple[int, int]: ...
    @property
    def time_len(self) -> int: ...
    @property
    def validation(self) -> bool: ...
    @property
    def label_mask(self) -> NDArray[np.uint8]: ...
    @property
    def buffer_allocations(self) -> int: ...
    @property
    def pin_memory(self) -> bool: ...
    @property
    def pin_device(self) -> int | None: ...
