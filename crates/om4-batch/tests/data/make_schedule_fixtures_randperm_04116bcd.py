"""Regenerate schedules_randperm_04116bcd.json: epoch schedules in the OLDER seeded order.

The non-DDP shuffle restated here (torch `randperm` through `SubsetRandomSampler` with one
`torch.Generator().manual_seed(seed + epoch)`, then `random.Random(seed + epoch).shuffle` of the
batch list) is the sampler of upstream m2lines/Samudra branch `codex/rust-loader-prefetch-plan`
from commit 04116bcd on; om4 keeps it as `Order::ShuffleTorchRandperm04116bcd`. Upstream main
draws differently since 953be722: see make_schedule_fixtures_018a6a7.py. The DDP cases are the
same on both (the DDP sampler never used torch).

Restates the sampler semantics with the real `random.Random`, `torch.Generator`,
`torch.utils.data.BatchSampler` and `SubsetRandomSampler`, so the fixture captures the exact
random streams. torch is needed only here, never by the tests:

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch
    /tmp/torchenv/bin/python make_schedule_fixtures_randperm_04116bcd.py > schedules_randperm_04116bcd.json
"""

import itertools
import json
import random

import torch
from torch.utils.data import BatchSampler, SubsetRandomSampler


def single(groups, batch_size, shuffle, drop_last, seed, epoch):
    if not shuffle:
        return [list(b) for g in groups for b in BatchSampler(g, batch_size, drop_last)]
    generator = torch.Generator().manual_seed(seed + epoch)
    batches = []
    for g in groups:
        batches.extend(list(b) for b in BatchSampler(SubsetRandomSampler(g, generator=generator), batch_size, drop_last))
    random.Random(seed + epoch).shuffle(batches)
    return batches


def distributed(groups, batch_size, shuffle, drop_last, seed, epoch, world, rank):
    rng = random.Random(seed + epoch)
    chunks = []
    for g in groups:
        batches = [list(b) for b in BatchSampler(g, batch_size, drop_last)]
        group_chunks = [list(batches[i:i + world]) for i in range(0, len(batches), world)]
        if group_chunks and len(group_chunks[-1]) < world:
            if drop_last:
                group_chunks.pop()
            else:
                pool = list(batches)
                if shuffle:
                    rng.shuffle(pool)
                cycle = itertools.cycle(pool)
                while len(group_chunks[-1]) < world:
                    group_chunks[-1].append(next(cycle))
        if shuffle:
            rng.shuffle(group_chunks)
        chunks.extend(group_chunks)
    if shuffle:
        rng.shuffle(chunks)
    flat = [b for c in chunks for b in c]
    return flat[rank::world]


def groups_of(sizes):
    out, start = [], 0
    for n in sizes:
        out.append(list(range(start, start + n)))
        start += n
    return out


cases = []
for sizes in ([10], [7, 5], [23, 1, 9], [100]):
    groups = groups_of(sizes)
    for batch_size in (1, 3, 4):
        for seed, epoch in ((0, 1), (15, 2), (12345, 7)):
            for shuffle, drop_last in ((True, True), (True, False), (False, False), (False, True)):
                cases.append(dict(groups=sizes, batch_size=batch_size, seed=seed, epoch=epoch, shuffle=shuffle,
                                  drop_last=drop_last, world_size=None, rank=None,
                                  batches=single(groups, batch_size, shuffle, drop_last, seed, epoch)))
                for world in (2, 3):
                    for rank in range(world):
                        cases.append(dict(groups=sizes, batch_size=batch_size, seed=seed, epoch=epoch,
                                          shuffle=shuffle, drop_last=drop_last, world_size=world, rank=rank,
                                          batches=distributed(groups, batch_size, shuffle, drop_last, seed, epoch,
                                                              world, rank)))
# A check of torch's randperm stream on its own.
randperm = {str(s): torch.randperm(50, generator=torch.Generator().manual_seed(s)).tolist() for s in (0, 16, 12352)}
print(json.dumps({"torch": torch.__version__, "randperm50": randperm, "cases": cases}, separators=(",", ":")))
