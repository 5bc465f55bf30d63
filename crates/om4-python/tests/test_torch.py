"""om4.torch.to_device's ordering, on the CPU against a stand-in device (torch is not needed).

The stand-in behaves as a CUDA copy from pinned memory does: a "copy" is queued, and reads its
source only when its event completes; it holds no reference to the source (a DMA reads raw
memory). If to_device let an om4 batch go before the event behind its copies completed, the
batch's arrays would be gone (their buffers back in the loader's pool, refilled by later
batches) when the copy reads them: the stand-in then records the fault. scripts/gpu-check.sh runs
the same iterator with torch on a GPU.
"""

import weakref

import numpy as np

import om4.torch
from test_loader import a_case, case_loader


class StandInDevice:
    """Copies that read their source when their event completes, on the test's say-so."""

    def __init__(self):
        self.queued = []  # (weak source, destination) since the last event
        self.events = []
        self.faults = []

    def copy(self, array):
        out = np.full_like(array, np.nan)
        self.queued.append((weakref.ref(array), out))
        return out

    def record(self):
        event = StandInEvent(self, self.queued)
        self.queued = []
        self.events.append(event)
        return event

    def hand_over(self, event, tensors):
        pass

    def complete_all_but(self, newest):
        """Completes every event but the newest `newest` (the copies still running)."""
        for event in self.events[: max(0, len(self.events) - newest)]:
            event.complete()


class StandInEvent:
    def __init__(self, device, copies):
        self.device, self.copies, self.done = device, copies, False

    def complete(self):
        if self.done:
            return
        for source, out in self.copies:
            array = source()
            if array is None:
                self.device.faults.append("a copy read a buffer that had gone back to the pool")
            else:
                np.copyto(out, array)
        self.done = True

    def query(self):
        return self.done

    def synchronize(self):
        self.complete()


def reference(loader):
    return [[(s.model_input.copy(), s.label.copy()) for s in b.steps] for b in loader.epoch(1)]


def test_no_batch_goes_back_to_the_pool_before_its_copies_complete():
    case = a_case()
    want = reference(case_loader(case))
    loader = case_loader(case, prefetch=3)
    device = StandInDevice()
    got = []
    for k, batch in enumerate(om4.torch.to_device(loader.epoch(1), _copier=device)):
        got.append(batch)
        # The device lags: only copies two or more batches old have run.
        device.complete_all_but(2)
        assert device.faults == [], f"batch {k}: {device.faults}"
    for event in device.events:
        event.complete()
    assert device.faults == []
    assert len(got) == len(want) > 3
    for k, (batch, steps) in enumerate(zip(got, want)):
        for s, (model_input, label) in zip(batch.steps, steps):
            assert s.model_input.tobytes() == model_input.tobytes(), f"batch {k}"
            assert s.label.tobytes() == label.tobytes(), f"batch {k}"
            c = s.prognostic.shape[1]
            assert np.shares_memory(s.prognostic, s.model_input) and s.boundary.shape[1] == s.model_input.shape[1] - c


def test_a_consumer_that_stops_early_releases_nothing_under_a_running_copy():
    loader = case_loader(a_case(), prefetch=3)
    device = StandInDevice()
    batches = om4.torch.to_device(loader.epoch(1), _copier=device)
    next(batches)
    next(batches)
    batches.close()  # no event has completed: closing waits for each (synchronize), then releases
    assert all(e.done for e in device.events)
    assert device.faults == []


def test_released_batches_return_their_buffers():
    """Batches whose copies completed are let go: buffers are reused, as without to_device."""
    loader = case_loader(a_case("train_h0_s1_st1"), prefetch=2)
    assert len(loader) >= 8
    device = StandInDevice()
    for _ in range(2):
        for _batch in om4.torch.to_device(loader.epoch(1), _copier=device):
            device.complete_all_but(0)
    assert device.faults == []
    # Two arrays per step per batch; to_device holds two batches more than a plain loop.
    assert loader.buffer_allocations <= 2 * (2 + 3 + 2), loader.buffer_allocations
