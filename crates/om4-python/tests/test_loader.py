"""om4.Loader: batches equal upstream Samudra's own loader bit for bit, and its lifecycle.

The upstream fixtures under tests/data/upstream/cases were written by upstream's own loader
(tests/data/upstream/make_upstream_batches.py); om4's Rust test tests/upstream_batches.rs holds
`om4 batch` to the same files.
"""

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest

import om4

UPSTREAM = Path(__file__).resolve().parents[3] / "tests" / "data" / "upstream"
CASES = json.loads((UPSTREAM / "cases" / "index.json").read_text())["cases"]


def case_loader(case, store=UPSTREAM / "store", **overrides):
    """om4.Loader for an upstream case; `store` is a directory, or a function of the file name
    (data.zarr, means.zarr, stds.zarr) that gives any store location."""
    at = store if callable(store) else (lambda name: store / name)
    args = dict(
        means=at("means.zarr"),
        stds=at("stds.zarr"),
        prognostic=case["prognostic_channels_per_time"],
        boundary=case["boundary_channels_per_time"],
        split=case["split"],
        hist=case["hist"],
        steps=case["steps"],
        stride=case["data_stride"][0],
        batch_size=case["batch_size"],
        seed=case["seed"],
        normalize_before_mask=case["normalize_before_mask"],
        fill_value=case["masked_fill_value"],
        max_concurrent_reads=2,
    )
    span = case["val_time"] if case["split"] == "val" else case["train_time"]
    args["time"] = f"{span['start']}..{span['end']}"
    if case["distributed"]:
        args.update(rank=case["rank"], world_size=case["world_size"])
    args.update(overrides)
    return om4.Loader(at("data.zarr"), **args)


@pytest.mark.parametrize("name", CASES)
def test_batches_equal_upstreams_model_batch_bit_for_bit(name):
    directory = UPSTREAM / "cases" / name
    case = json.loads((directory / "case.json").read_text())
    if len(case["data_stride"]) != 1:
        pytest.skip("several strides in one run: upstream's loader fails on them, no batches to compare")
    loader = case_loader(case)
    schedule = json.loads((directory / "schedule.json").read_text())["batches"]
    assert len(loader) == len(schedule)
    np.testing.assert_array_equal(loader.label_mask, np.load(directory / "label_mask.npy"))
    compared = 0
    with loader.epoch(case["epoch"]) as batches:
        for b, batch in zip(range(case["batches_written"]), batches):
            assert batch.samples == schedule[b]
            for k, step in enumerate(batch.steps):
                for field in ["prognostic", "boundary", "label", "model_input"]:
                    want = np.load(directory / f"batch_{b:03}" / f"step_{k}" / f"{field}.npy")
                    got = getattr(step, field)
                    assert got.dtype == want.dtype and got.shape == want.shape, (name, b, k, field)
                    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (name, b, k, field)
                    compared += 1
    assert compared == case["batches_written"] * case["steps"] * 4


def a_case(name="train_h1_s2_st2"):
    return json.loads((UPSTREAM / "cases" / name / "case.json").read_text())


def test_epochs_end_and_repeat():
    loader = case_loader(a_case(), prefetch=3)
    first = [b.samples for b in loader.epoch(1)]
    assert len(first) == len(loader)
    assert [b.samples for b in loader.epoch(1)] == first
    assert [b.samples for b in loader.epoch(2)] != first  # reshuffled
    epoch = loader.epoch(1)
    list(epoch)
    with pytest.raises(StopIteration):
        next(epoch)


def test_arrays_are_shared_through_dlpack_and_outlive_the_loader():
    loader = case_loader(a_case())
    batch = next(iter(loader.epoch(1)))
    step = batch.steps[0]
    assert np.shares_memory(step.prognostic, step.model_input)
    assert np.shares_memory(step.boundary, step.model_input)
    shared = np.from_dlpack(step.label)
    assert np.shares_memory(shared, step.label)
    kept = step.label.copy()
    del loader
    gc.collect()
    np.testing.assert_array_equal(step.label, kept)


def test_released_batches_return_their_buffers_to_the_pool():
    loader = case_loader(a_case("train_h0_s1_st1"), prefetch=2)
    batches = len(loader)
    assert batches >= 8
    for _ in range(2):
        for batch in loader.epoch(1):
            step = batch.steps[0]
            assert step.model_input.flags.writeable and step.model_input.flags.c_contiguous
            step.label[...] = 0  # the arrays are the caller's to use
    # Two arrays per step per batch, for the six batches the loader reserves before an epoch (one
    # being prepared, two at the finishing stage, three with the consumer): without reuse this
    # would be 2 * steps * batches * 2 epochs.
    assert loader.buffer_allocations <= 2 * 6, loader.buffer_allocations


def test_close_early_drop_and_consumer_exceptions_end_cleanly():
    loader = case_loader(a_case(), prefetch=4)
    epoch = loader.epoch(1)
    next(epoch)
    epoch.close()
    with pytest.raises(StopIteration):
        next(epoch)
    with pytest.raises(ValueError, match="consumer"):
        with loader.epoch(1) as batches:
            for _ in batches:
                raise ValueError("the consumer failed")
    threads = len(os.listdir("/proc/self/task"))  # the process's threads, Rust's included
    for _ in range(20):  # started and dropped: their read-ahead threads end with them
        it = loader.epoch(1)
        next(it)
        del it
    gc.collect()
    assert len(os.listdir("/proc/self/task")) <= threads
    assert len(list(loader.epoch(1))) == len(loader)


def test_a_failing_read_is_an_error_at_its_batch(tmp_path):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(UPSTREAM / "store", store)
    case = a_case()
    for chunk in (store / "data.zarr").glob("*/*"):
        if chunk.name[0].isdigit() and chunk.parent.name.startswith("uo"):
            chunk.write_bytes(b"corrupt")
    loader = case_loader(case, store)
    with pytest.raises(RuntimeError, match="uo"):
        for _ in loader.epoch(0):
            pass


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(split="test"), 'split "test"'),
        (dict(time="2010-01-01"), "time"),
        (dict(rank=1), "world_size"),
        (dict(batch_size=0), "batch"),
        (dict(prognostic=["nope_0"]), "nope_0"),
        (dict(rank=3, world_size=2), "rank 3 is outside a world of 2"),
        (dict(steps=0), "steps"),
        (dict(prefetch=1000), "at most 64"),
        (dict(max_concurrent_reads=0), "0 threads"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(RuntimeError, match=match):
        case_loader(a_case(), **kwargs)


@pytest.mark.parametrize(
    "value, match",
    [("cuda:x", "not a device index"), ("cpu", "expected True, False"), ("cuda:1:2", "not a device index")],
)
def test_pin_memory_names_a_cuda_device(value, match):
    with pytest.raises(RuntimeError, match=match):
        case_loader(a_case(), pin_memory=value)


def test_pin_memory_gives_the_same_batches_or_says_why_not():
    case = a_case()
    plain = case_loader(case)
    assert not plain.pin_memory
    try:
        pinned = case_loader(case, pin_memory=True)
    except RuntimeError as error:  # no CUDA driver or device here
        assert "pin_memory" in str(error)
        if os.environ.get("OM4_REQUIRE_GPU"):  # scripts/gpu-check.sh: on a GPU it must work
            raise
        return
    assert pinned.pin_memory and pinned.pin_device == 0
    for a, b in zip(plain.epoch(1), pinned.epoch(1)):
        assert [s.model_input.tobytes() for s in a.steps] == [s.model_input.tobytes() for s in b.steps]
