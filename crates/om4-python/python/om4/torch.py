"""om4 batches as PyTorch tensors on a device, with copies that never race om4's buffer reuse.

``om4.Loader`` hands out batches whose NumPy arrays view pooled buffers: when a batch is garbage,
its buffers go back to the pool and the loader's threads fill them with a later batch. With
``pin_memory`` those buffers are CUDA page-locked memory, so ``torch.from_numpy(a).to("cuda",
non_blocking=True)`` returns before the copy has read them, and torch records no event for memory
it did not allocate. Dropping the batch right after queuing such a copy lets the pool reuse a
buffer while the copy still reads it: the device silently receives parts of a later batch.

``to_device`` does the copies safely::

    loader = om4.Loader(store, hist=1, steps=2, batch_size=4, pin_memory="cuda:0")
    for batch in om4.torch.to_device(loader.epoch(1), "cuda:0"):
        out = model(batch.steps[0].model_input)      # tensors on cuda:0, ready on this stream

Each batch is copied on a side stream (``non_blocking``) while the previous one is used; an event
is recorded after its copies; the consumer's current stream waits on that event before the batch
is yielded (so the tensors are ready for any kernel queued after); and the om4 batch, with its
pooled buffers, is held until that event has completed, then released to the pool. The rule for
copies made by hand is the same: keep the om4 batch (or its arrays) alive until an event recorded
after the copies has completed (``event.synchronize()`` or ``event.query()``).

**Preparation on the device.** With ``om4.Loader(..., prepare="device")`` the loader hands out
``om4.RawBatch``es: each batch's unique raw planes (a plane used by several samples, steps or as
both input and label is there once: about two thirds of the prepared batch's bytes at Samudra's
settings) and the plan that makes the model batch of them. ``to_device`` then copies only those
planes, and normalizes, masks and gathers them on the device, on its side stream; the tensors it
yields equal the host path's bit for bit (the same float32 or float64 arithmetic, NaN to 0, ±inf to
the largest finite value, land cells filled). This is the path to use on a GPU::

    loader = om4.Loader(store, hist=1, steps=4, batch_size=4, pin_memory="cuda:0", prepare="device")
    for batch in om4.torch.to_device(loader.epoch(1), "cuda:0"):
        ...

Batch N+1 is taken from the loader, and its copies queued, before batch N is yielded only when it
has already been read (``EpochIter.ready()``): a slow read never holds back a batch that is ready.

torch is imported when ``to_device`` is first called: the wheel does not depend on it.
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

__all__ = ["DeviceBatch", "DeviceStep", "ResidentCopy", "to_device"]


@dataclass
class DeviceStep:
    """One rollout step on the device, as ``om4.Step``: ``prognostic`` and ``boundary`` are views
    of ``model_input`` (its first and last channels)."""

    model_input: Any
    prognostic: Any
    boundary: Any
    label: Any


@dataclass
class DeviceBatch:
    """One batch on the device: ``samples`` and ``wait_s`` as ``om4.Batch``, ``steps`` as tensors,
    and ``copied_bytes``, what was copied to the device for it."""

    samples: list
    steps: list
    wait_s: float
    copied_bytes: int = 0


class _TorchCuda:
    """The copies, streams and events of a CUDA device (what ``to_device`` uses on a GPU)."""

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def side(self) -> Any:
        """Runs what is queued inside on the side stream."""
        return self.torch.cuda.stream(self.stream)

    def copy(self, array: Any) -> Any:
        """Queues the copy of `array` on the side stream."""
        with self.side():
            return self.torch.from_numpy(array).to(self.device, non_blocking=True)

    def record(self) -> Any:
        """An event after every copy queued so far."""
        event = self.torch.cuda.Event()
        event.record(self.stream)
        return event

    def hand_over(self, event: Any, tensors: list) -> None:
        """Makes the consumer's current stream wait for the copies, and tells torch's allocator
        that the tensors (allocated on the side stream) are used on it."""
        current = self.torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for t in tensors:
            t.record_stream(current)


class _TorchHost:
    """On a CPU device copies are synchronous: nothing to wait for."""

    class _Done:
        def query(self) -> bool:
            return True

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = device

    def side(self) -> Any:
        return contextlib.nullcontext()

    def copy(self, array: Any) -> Any:
        return self.torch.from_numpy(array).to(self.device, copy=True)

    def record(self) -> Any:
        return self._Done()

    def hand_over(self, event: Any, tensors: list) -> None:
        pass


class _Normalizations:
    """A loader's ``om4.Normalization``s on the device, made once per tuple."""

    def __init__(self, torch: Any, device: Any, normalizations: tuple):
        self.source = normalizations  # held, so that the cache key (its id) stays its own
        self.sets = []
        for n in normalizations:
            dtype = torch.float32 if n.precision == "float32" else torch.float64
            stat = lambda v: torch.from_numpy(v).to(device=device, dtype=dtype).view(1, -1, 1, 1)
            self.sets.append((stat(n.mean), stat(n.std), torch.from_numpy(n.wet).to(device), n))

    def apply(self, torch: Any, x: Any, source: int) -> Any:
        """Normalizes and masks raw planes `(T, C, Y, X)` of variable set `source` as the host
        path does (om4_batch's ``Normalization::prepare_group``)."""
        mean, std, wet, n = self.sets[source]

        def normalize(v: Any) -> Any:
            if n.precision == "float32":
                return torch.nan_to_num((v - mean) / std, nan=0.0)  # ±inf → ±float32 max
            y = (v.double() - mean) / std
            return torch.nan_to_num(y, nan=0.0, posinf=float("inf"), neginf=float("-inf")).float()

        if n.normalize_before_mask:
            return torch.where(wet, normalize(x), n.fill)
        return normalize(torch.where(wet, x, n.fill))


class ResidentCopy:
    """A loader's whole split on a device (``om4.Loader(..., prepare="device", resident=BYTES)``):
    per variable set one tensor ``(times, channels, y, x)`` of prepared planes. Batches passed
    through ``to_device(..., resident=copy)`` write the planes they are the first to need into it
    and gather from it; the loader then reads each plane once, and from the epoch after every
    plane was first used, reads nothing and copies nothing to the device.

    Making one clears the loader's record of what its device copy holds: one copy per loader,
    the newest. Its memory is ``loader.split_bytes``, allocated here.
    """

    def __init__(self, loader: Any, device: Any = "cuda"):
        import numpy as np
        import torch

        if loader.split_bytes is None:
            raise ValueError("this loader's split is not resident: om4.Loader(..., prepare=\"device\", resident=BYTES)")
        self.device = torch.device(device)
        y, x = loader.grid
        self.sets = [torch.zeros((loader.time_len, len(n.mean), y, x), device=self.device) for n in loader.normalizations]
        self.filled = [np.zeros(loader.time_len, dtype=bool) for _ in loader.normalizations]
        loader.clear_resident()

    @property
    def nbytes(self) -> int:
        """Bytes of the copy on the device."""
        return sum(t.numel() * t.element_size() for t in self.sets)

    @property
    def held_planes(self) -> int:
        """Times written so far, summed over the variable sets."""
        return int(sum(f.sum() for f in self.filled))


def _launch_prepared(copier: Any, batch: Any) -> tuple[DeviceBatch, list]:
    steps, tensors, copied = [], [], 0
    for step in batch.steps:
        model_input, label = copier.copy(step.model_input), copier.copy(step.label)
        copied += step.model_input.nbytes + step.label.nbytes
        prognostic = step.prognostic.shape[1]
        steps.append(DeviceStep(model_input, model_input[:, :prognostic], model_input[:, prognostic:], label))
        tensors += [model_input, label]
    return DeviceBatch(list(batch.samples), steps, batch.wait_s, copied), tensors


def _write_resident(copier: Any, batch: Any, norms: _Normalizations, copy: ResidentCopy) -> list:
    """Writes a resident batch's fresh planes into `copy` (on the side stream), marks them, and
    returns each group's planes: the copy's tensor of its variable set, indexed by time."""
    import numpy as np

    torch = copier.torch
    for g, s, fresh in zip(batch.groups, batch.sources, batch.fresh_times):
        if fresh:
            at = torch.tensor(fresh, dtype=torch.int64).to(copier.device, non_blocking=True)
            copy.sets[s].index_copy_(0, at, norms.apply(torch, copier.copy(g), s))
            copy.filled[s][fresh] = True
    batch.mark_resident()
    for s, times in zip(batch.sources, batch.times):
        missing = np.asarray(times)[~copy.filled[s][times]]
        if missing.size:
            raise RuntimeError(
                f"time positions {missing[:4].tolist()} of variable set {s} are neither in this batch nor in the "
                "device copy: another ResidentCopy or consumer took this loader's batches"
            )
    return [copy.sets[s] for s in batch.sources]


def _launch_raw(
    copier: Any, batch: Any, norms: _Normalizations, resident: ResidentCopy | None
) -> tuple[DeviceBatch, list]:
    import numpy as np

    torch, device = copier.torch, copier.device
    if batch.resident and resident is None:
        raise ValueError("this loader's split is resident: pass resident=om4.torch.ResidentCopy(loader, device)")
    with copier.side():
        roles = [r for r in (batch.input, batch.label, batch.boundary) if r is not None]
        if batch.resident:
            planes = _write_resident(copier, batch, norms, resident)
            # rows index each group's times; the copy is indexed by time position
            index = [torch.from_numpy(np.asarray(batch.times[g], dtype=np.int64)[r]) for g, r in roles]
        else:
            planes = [norms.apply(torch, copier.copy(g), s) for g, s in zip(batch.groups, batch.sources)]
            index = [torch.from_numpy(r) for _, r in roles]
        rows = [i.to(device, non_blocking=True) for i in index]
        n, n_steps, states = roles[0][1].shape

        def gather(role: int, k: int) -> Any:
            g = roles[role][0]
            c, y, x = planes[g].shape[1:]
            return planes[g].index_select(0, rows[role][:, k].reshape(-1)).reshape(n, states * c, y, x)

        steps, tensors = [], []
        for k in range(n_steps):
            prognostic, label = gather(0, k), gather(1, k)
            if batch.boundary is not None:
                model_input = torch.cat([prognostic, gather(2, k)], 1)
            else:
                model_input = prognostic
            c = prognostic.shape[1]
            steps.append(DeviceStep(model_input, model_input[:, :c], model_input[:, c:], label))
            tensors += [model_input, label]
    return DeviceBatch(list(batch.samples), steps, batch.wait_s, batch.nbytes), tensors


def to_device(
    batches: Iterable[Any], device: Any = "cuda", *, resident: ResidentCopy | None = None, _copier: Any = None
) -> Iterator[DeviceBatch]:
    """Yields each batch of `batches` (``om4.Batch``, or ``om4.RawBatch`` from a loader with
    ``prepare="device"``, prepared here on the device) as a :class:`DeviceBatch` on `device`
    (``"cuda"``, ``"cuda:1"``, a ``torch.device``, or ``"cpu"``), copying batch N+1 while batch N
    is used when N+1 has already been read.

    A batch's om4 buffers return to the loader's pool only after the event recorded behind its
    copies has completed, so no copy ever reads a buffer the loader is refilling. The tensors are
    ready on the consumer's current stream when yielded and safe to keep. With a resident split,
    `resident` is the loader's :class:`ResidentCopy` on `device`.
    """
    if _copier is None:
        import torch

        device = torch.device(device)
        _copier = _TorchCuda(torch, device) if device.type == "cuda" else _TorchHost(torch, device)
    copier = _copier
    norms: dict = {}
    # om4 batches whose copies may still be reading their buffers, oldest first, with the event
    # recorded behind those copies.
    in_flight: collections.deque = collections.deque()

    def launch(batch: Any) -> tuple[DeviceBatch, Any, list]:
        raw = getattr(batch, "groups", None) is not None
        if raw:
            key = id(batch.normalizations)
            if key not in norms:
                norms[key] = _Normalizations(copier.torch, copier.device, batch.normalizations)
            ready, tensors = _launch_raw(copier, batch, norms[key], resident)
        else:
            ready, tensors = _launch_prepared(copier, batch)
        event = copier.record()
        in_flight.append((batch, event))
        return ready, event, tensors

    def release_completed() -> None:
        while in_flight and in_flight[0][1].query():
            in_flight.popleft()

    source = iter(batches)
    is_ready = getattr(source, "ready", None)
    ahead = None  # launched, not yet yielded
    try:
        while True:
            if ahead is None:
                batch = next(source, None)
                if batch is None:
                    break
                ahead = launch(batch)
            following = None
            # Copy the next batch while this one is used, unless that means waiting for its read.
            if is_ready is None or is_ready():
                batch = next(source, None)
                if batch is not None:
                    following = launch(batch)
            batch = None  # only `in_flight` holds om4 batches
            ready, event, tensors = ahead
            copier.hand_over(event, tensors)
            ahead = following
            yield ready
            release_completed()
    finally:
        # Nothing is released before its copies complete, even when the consumer stops early.
        for _, event in in_flight:
            synchronize = getattr(event, "synchronize", None)
            if synchronize is not None:
                synchronize()
        in_flight.clear()
        close = getattr(source, "close", None)
        if close is not None:
            close()
