"""Regenerate schedules_018a6a7.json: epoch schedules drawn by upstream Samudra's own samplers.

Runs the real `EquivalenceGroupBatchSampler` and `DistributedEquivalenceGroupBatchSampler` of
m2lines/Samudra at 018a6a7 (`src/samudra/utils/samplers.py`), loaded from a file given on the
command line; no upstream code is kept in this repository. Needs Python >= 3.12 (the module uses
`type` aliases and `itertools.batched`):

    git --git-dir=<Samudra clone>/.git show 018a6a74:src/samudra/utils/samplers.py > /tmp/samplers.py
    python3.12 make_schedule_fixtures_018a6a7.py /tmp/samplers.py > schedules_018a6a7.json

The module imports only `torch.utils.data.{Sampler, BatchSampler}`. When torch is installed it is
used as is; otherwise a minimal stand-in is registered first: `Sampler` as a plain generic base
class and `BatchSampler` with torch's documented behaviour (consecutive chunks of `batch_size`,
the short last one dropped with `drop_last`; `len` = floor or ceil of `len(sampler) / batch_size`).
The shuffles themselves come from upstream's code and CPython's `random`, never from torch.
"""

import importlib.util
import json
import math
import sys
import types
from typing import Generic, TypeVar


def install_torch_stand_in():
    try:
        import torch.utils.data  # noqa: F401

        return "torch " + __import__("torch").__version__
    except ImportError:
        pass
    T = TypeVar("T")

    class Sampler(Generic[T]):
        def __init__(self, data_source=None):
            pass

    class BatchSampler(Sampler[list[int]]):
        def __init__(self, sampler, batch_size, drop_last):
            self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

        def __iter__(self):
            batch = []
            for idx in self.sampler:
                batch.append(idx)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
            if batch and not self.drop_last:
                yield batch

        def __len__(self):
            n = len(self.sampler)
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")
    data.Sampler, data.BatchSampler = Sampler, BatchSampler
    torch.utils, utils.data = utils, data
    sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.data": data})
    return "stand-in for torch.utils.data"


def load_samplers(path):
    spec = importlib.util.spec_from_file_location("upstream_samplers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Dataset:
    """What `from_datasets` reads of a dataset: `len` and the group key."""

    def __init__(self, size, key):
        self.size, self.key = size, key

    def __len__(self):
        return self.size


def datasets_of(sizes, keys):
    return [Dataset(n, k) for n, k in zip(sizes, keys)]


def main():
    torch_used = install_torch_stand_in()
    up = load_samplers(sys.argv[1])
    # (dataset sizes, group keys): one group; several contiguous groups; an empty dataset; and
    # datasets sharing a key, so that a group is not contiguous and groups are sorted by key
    layouts = [
        ([24], [0]),
        ([10], [0]),
        ([7, 5], [0, 1]),
        ([23, 1, 9], [0, 1, 2]),
        ([100], [0]),
        ([3, 0, 4], [0, 1, 2]),
        ([6, 5, 4], [1, 0, 1]),
    ]
    # seed + epoch: the example (15, 1), epoch 0, a two-word key and one past 2^64
    seeds = [(15, 1), (0, 1), (15, 2), (12345, 7), (3, 0), (2**32 - 1, 5), (2**64 - 2, 3)]
    cases = []
    for sizes, keys in layouts:
        for batch_size in (1, 2, 3, 4):
            for seed, epoch in seeds:
                for shuffle, drop_last in ((True, True), (True, False), (False, False), (False, True)):
                    s = up.EquivalenceGroupBatchSampler.from_datasets(
                        datasets=datasets_of(sizes, keys), group_key=lambda d: d.key, batch_size=batch_size,
                        shuffle=shuffle, drop_last=drop_last, seed=seed)
                    s.set_epoch(epoch)
                    cases.append(dict(groups=s.groups, batch_size=batch_size, seed=seed, epoch=epoch,
                                      shuffle=shuffle, drop_last=drop_last, world_size=None, rank=None,
                                      len=len(s), batches=[list(b) for b in s]))
                    for world in (1, 2, 3):
                        for rank in range(world):
                            d = up.DistributedEquivalenceGroupBatchSampler(
                                datasets=datasets_of(sizes, keys), group_key=lambda d: d.key,
                                batch_size=batch_size, num_replicas=world, rank=rank, shuffle=shuffle,
                                drop_last=drop_last, seed=seed)
                            d.set_epoch(epoch)
                            cases.append(dict(groups=d._inner.groups, batch_size=batch_size, seed=seed, epoch=epoch,
                                              shuffle=shuffle, drop_last=drop_last, world_size=world, rank=rank,
                                              len=len(d), batches=[list(b) for b in d]))
    out = {"upstream": "m2lines/Samudra 018a6a7 src/samudra/utils/samplers.py", "torch": torch_used,
           "python": sys.version.split()[0], "cases": cases}
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
