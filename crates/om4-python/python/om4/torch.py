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

torch is imported when ``to_device`` is first called: the wheel does not depend on it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

__all__ = ["DeviceBatch", "DeviceStep", "to_device"]


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
    """One batch on the device: ``samples`` and ``wait_s`` as ``om4.Batch``, ``steps`` as tensors."""

    samples: list
    steps: list
    wait_s: float


class _TorchCuda:
    """The copies, streams and events of a CUDA device (what ``to_device`` uses on a GPU)."""

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def copy(self, array: Any) -> Any:
        """Queues the copy of `array` on the side stream."""
        with self.torch.cuda.stream(self.stream):
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

    def copy(self, array: Any) -> Any:
        return self.torch.from_numpy(array).to(self.device, copy=True)

    def record(self) -> Any:
        return self._Done()

    def hand_over(self, event: Any, tensors: list) -> None:
        pass


def _launch(copier: Any, batch: Any) -> tuple[DeviceBatch, Any]:
    steps, tensors = [], []
    for step in batch.steps:
        model_input, label = copier.copy(step.model_input), copier.copy(step.label)
        prognostic = step.prognostic.shape[1]
        steps.append(DeviceStep(model_input, model_input[:, :prognostic], model_input[:, prognostic:], label))
        tensors += [model_input, label]
    return DeviceBatch(list(batch.samples), steps, batch.wait_s), (copier.record(), tensors)


def to_device(batches: Iterable[Any], device: Any = "cuda", *, _copier: Any = None) -> Iterator[DeviceBatch]:
    """Yields each ``om4.Batch`` of `batches` as a :class:`DeviceBatch` on `device` (``"cuda"``,
    ``"cuda:1"``, a ``torch.device``, or ``"cpu"``), copying batch N+1 while batch N is used.

    A batch's om4 buffers return to the loader's pool only after the event recorded behind its
    copies has completed, so no copy ever reads a buffer the loader is refilling. The tensors are
    ready on the consumer's current stream when yielded and safe to keep.
    """
    if _copier is None:
        import torch

        device = torch.device(device)
        _copier = _TorchCuda(torch, device) if device.type == "cuda" else _TorchHost(torch, device)
    copier = _copier
    # om4 batches whose copies may still be reading their buffers, oldest first, with the event
    # recorded behind those copies.
    in_flight: collections.deque = collections.deque()

    def release_completed() -> None:
        while in_flight and in_flight[0][1].query():
            in_flight.popleft()

    source = iter(batches)
    ahead = None
    try:
        for batch in source:
            launched = _launch(copier, batch)
            in_flight.append((batch, launched[1][0]))
            del batch  # only `in_flight` holds it now
            if ahead is not None:
                ready, (event, tensors) = ahead
                copier.hand_over(event, tensors)
                yield ready
            ahead = launched
            release_completed()
        if ahead is not None:
            ready, (event, tensors) = ahead
            copier.hand_over(event, tensors)
            ahead = None
            yield ready
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
