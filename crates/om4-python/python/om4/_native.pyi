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
