"""om4.torch.to_device's ordering, on the CPU against a stand-in device (torch is not needed).

The stand-in behaves as a CUDA copy from pinned memory does: a "copy" is queued, and reads its
source only when its event completes; it holds no reference to the source (a DMA reads raw
memory). If to_device let an om4 batch go before the event behind its copies completed, the
batch's arrays would be gone (their buffers back in the loader's pool, refilled by later
batches) when the copy reads them: the stand-in then records the fault. scripts/gpu-check.sh runs
the same iterator with torch on a GPU.
"""

import os
import weakref

import numpy as np
import pytest

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
    # Two arrays per step per batch for the six batches the loader reserves (to_device's two
    # extra fit the consumer's three); none allocated after.
    assert loader.buffer_allocations == 2 * 6, loader.buffer_allocations


# Preparation on the device (prepare="device"), on the CPU with torch CPU tensors: the same
# arithmetic as om4's host path, so the same bits. scripts/gpu-check.sh runs these tests on a GPU
# (OM4_TORCH_DEVICE=cuda: batches pinned, copied and prepared there).
DEVICE = os.environ.get("OM4_TORCH_DEVICE", "cpu")
PIN = {"pin_memory": DEVICE} if DEVICE.startswith("cuda") else {}


def on_host(tensor):
    return tensor.contiguous().cpu().numpy()

DEVICE_CASES = ["train_h1_s2_st2", "train_h0_s1_st1_maskfirst_fill", "train_h0_s1_st1_normfirst_fill",
                "train_ddp2_rank1_st12_bs3", "val_h1_st2"]


@pytest.mark.parametrize("name", DEVICE_CASES)
def test_batches_prepared_on_the_device_equal_the_host_path_bit_for_bit(name):
    torch = pytest.importorskip("torch")
    case = a_case(name)
    host = case_loader(case, prefetch=2)
    raw = case_loader(case, prefetch=2, prepare="device", **PIN)
    assert (host.prepare, raw.prepare) == ("host", "device")
    want = list(host.epoch(1))
    got = list(om4.torch.to_device(raw.epoch(1), DEVICE))
    assert len(got) == len(want) == len(raw) > 0
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.samples == w.samples
        assert len(g.steps) == len(w.steps)
        for gs, ws in zip(g.steps, w.steps):
            for field in ("model_input", "prognostic", "boundary", "label"):
                a, b = getattr(gs, field), getattr(ws, field)
                assert tuple(a.shape) == b.shape and a.dtype == torch.float32, f"batch {k} {field}"
                assert on_host(a).tobytes() == np.ascontiguousarray(b).tobytes(), f"batch {k} {field}"
        # Unique planes only: no more bytes than the prepared arrays, fewer once planes repeat.
        assert 0 < g.copied_bytes <= sum(s.model_input.nbytes + s.label.nbytes for s in w.steps)


def test_a_raw_batch_holds_each_plane_once_and_its_plan():
    case = a_case("train_h1_s2_st2")
    loader = case_loader(case, prepare="device")
    batch = next(iter(loader.epoch(1)))
    assert isinstance(batch, om4.RawBatch)
    assert batch.normalizations is loader.normalizations or batch.normalizations == loader.normalizations
    y, x = loader.grid
    for g, (planes, times, source) in enumerate(zip(batch.groups, batch.times, batch.sources)):
        assert planes.dtype == np.float32 and planes.shape[0] == len(times) and planes.shape[2:] == (y, x)
        assert times == sorted(set(times)), "unique, sorted time positions"
        assert planes.shape[1] == len(loader.normalizations[source].mean)
    states = case["hist"] + 1
    for role in (batch.input, batch.label, batch.boundary):
        g, rows = role
        assert rows.shape == (case["batch_size"], case["steps"], states) and rows.dtype == np.int64
        assert rows.min() >= 0 and rows.max() < len(batch.times[g])
    # step k+1's input states are step k's labels: the same planes, not copies
    np.testing.assert_array_equal(batch.input[1][:, 1:], batch.label[1][:, :-1])
    n = loader.normalizations[0]
    assert n.wet.dtype == np.bool_ and n.wet.shape == (len(n.mean), y, x) and n.precision in ("float32", "float64")


def test_device_normalization_matches_the_formula_on_awkward_values():
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    c, y, x = 3, 4, 5
    i = np.arange(2 * c * y * x)
    raw = (np.sin(i * 0.731) * 40 + 0.1).astype(np.float32)
    for k, v in enumerate([np.nan, np.inf, -np.inf, 3.0e38, -0.0]):
        raw[k::11] = v
    raw = raw.reshape(2, c, y, x)
    wet = (np.arange(c * y * x) % 7 != 3).reshape(c, y, x)
    mean, std = np.array([0.1, -2.7, 1e-3]), np.array([0.3, 1.7, 1e-30])
    for precision in ("float32", "float64"):
        for before in (True, False):
            dt = np.float32 if precision == "float32" else np.float64
            m, s = mean.astype(np.float32).astype(np.float64), std.astype(np.float32).astype(np.float64)
            n = SimpleNamespace(mean=m, std=s, precision=precision, wet=wet, normalize_before_mask=before, fill=-3.5)
            norms = om4.torch._Normalizations(torch, torch.device(DEVICE), (n,))
            got = on_host(norms.apply(torch, torch.from_numpy(raw).to(DEVICE), 0))

            def normalize(v):
                with np.errstate(all="ignore"):
                    out = (v.astype(dt) - m.astype(dt)[:, None, None]) / s.astype(dt)[:, None, None]
                if precision == "float32":
                    return np.nan_to_num(out, nan=0.0)
                with np.errstate(over="ignore"):  # beyond float32's range: ±inf, as in Rust
                    return np.where(np.isnan(out), 0.0, out).astype(np.float32)

            if before:
                want = np.where(wet, normalize(raw), np.float32(-3.5))
            else:
                want = normalize(np.where(wet, raw, np.float32(-3.5)))
            assert got.dtype == np.float32
            assert got.tobytes() == want.astype(np.float32).tobytes(), (precision, before)


def test_the_next_batch_is_taken_early_only_when_it_is_ready():
    loader = case_loader(a_case(), prefetch=0)  # nothing is read ahead: never ready
    epoch = loader.epoch(1)
    assert not epoch.ready()
    device = StandInDevice()
    taken = []

    class Watch:
        def __iter__(self):
            return self

        def __next__(self):
            taken.append(len(yielded))
            return next(epoch)

        def ready(self):
            return epoch.ready()

        def close(self):
            epoch.close()

    yielded = []
    for batch in om4.torch.to_device(Watch(), _copier=device):
        yielded.append(batch)
        device.complete_all_but(0)
    # Batch k is taken only once k batches were yielded: never one ahead.
    assert taken[: len(yielded)] == list(range(len(yielded)))
    assert len(yielded) == len(loader)
    list(epoch)
    assert epoch.ready(), "an ended epoch returns at once"


def test_a_resident_split_gives_the_same_batches_and_copies_each_plane_once():
    torch = pytest.importorskip("torch")
    case = a_case("train_h1_s2_st2")
    plain = case_loader(case, prepare="device", **PIN)
    loader = case_loader(case, prepare="device", resident=1 << 34, **PIN)
    copy = om4.torch.ResidentCopy(loader, DEVICE)
    assert copy.nbytes == loader.split_bytes > 0 and loader.resident_bytes == 0
    for epoch in (1, 2):
        want = list(om4.torch.to_device(plain.epoch(epoch), DEVICE))
        got = list(om4.torch.to_device(loader.epoch(epoch), DEVICE, resident=copy))
        assert len(got) == len(want) > 0
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.samples == w.samples
            for gs, ws in zip(g.steps, w.steps):
                for field in ("model_input", "label"):
                    a, b = getattr(gs, field), getattr(ws, field)
                    assert on_host(a).tobytes() == on_host(b).tobytes(), f"epoch {epoch} batch {k} {field}"
        copied = sum(b.copied_bytes for b in got)
        if epoch == 1:
            assert 0 < copied <= sum(b.copied_bytes for b in want)
            assert loader.resident_bytes == copied, "what was copied is what the copy holds"
        else:
            assert copied == 0, "the second epoch copies nothing: every plane it needs is resident"
    raw = next(iter(loader.epoch(3)))
    planes = sum(len(t) * len(loader.normalizations[s].mean) for t, s in zip(raw.times, raw.sources))
    assert raw.resident and raw.nbytes == 0 and raw.resident_planes == planes


def test_a_resident_split_refuses_what_it_cannot_do():
    pytest.importorskip("torch")
    case = a_case("train_h1_s2_st2")
    with pytest.raises(RuntimeError, match="budget"):
        case_loader(case, prepare="device", resident=1000)
    with pytest.raises(RuntimeError, match="prepared on the device"):
        case_loader(case, resident=1 << 34)
    loader = case_loader(case, prepare="device", resident=1 << 34)
    with pytest.raises(ValueError, match="ResidentCopy"):
        next(om4.torch.to_device(loader.epoch(1), "cpu"))
    with pytest.raises(ValueError, match="not resident"):
        om4.torch.ResidentCopy(case_loader(case, prepare="device"), "cpu")
    # Another consumer's batches marked planes this copy never saw: a clear error, never wrong data.
    first = om4.torch.ResidentCopy(loader, "cpu")
    for batch in loader.epoch(1):
        batch.mark_resident()
    with pytest.raises(RuntimeError, match="neither in this batch nor in the device copy"):
        next(om4.torch.to_device(loader.epoch(2), "cpu", resident=first))


@pytest.mark.parametrize("prepare", ["host", "device"])
def test_no_staging_buffer_is_allocated_after_an_epochs_first_batches(prepare):
    """Pinned allocations synchronize the device: the loader sizes its staging buffers to the
    epoch's largest and keeps enough free, so after the first batches it allocates none."""
    pytest.importorskip("torch")
    loader = case_loader(a_case("train_h0_s1_st1"), prefetch=2, prepare=prepare, **PIN)
    counts = []
    for epoch in (1, 2, 3):
        for k, _batch in enumerate(om4.torch.to_device(loader.epoch(epoch), DEVICE)):
            if epoch == 1 and k == 2:
                counts.append(loader.staging_allocations + loader.buffer_allocations)
        counts.append(loader.staging_allocations + loader.buffer_allocations)
    assert len(set(counts)) == 1, f"allocations after batch 3 of epoch 1, then after each epoch: {counts}"
