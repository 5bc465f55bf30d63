"""om4's wheel: the samudra_rust_loader readers against xarray, their errors, and their threads.

Stores are written by xarray (zarr 2) in each test's temporary directory; run by
scripts/python-check.sh.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import xarray as xr

import om4
import samudra_rust_loader


def write(path, variables):
    xr.Dataset(variables).to_zarr(path, mode="w", consolidated=False)
    return path


@pytest.fixture
def flat(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((6, 4, 5), dtype=np.float32)
    values[1, 2, 3] = np.nan
    data = {
        "thetao_0": (("time", "lat", "lon"), values),
        "thetao_1": (("time", "lat", "lon"), values * 2),
        "zos": (("time", "lat", "lon"), values - 7),
    }
    return write(tmp_path / "flat.zarr", data), data


@pytest.fixture
def compact(tmp_path):
    rng = np.random.default_rng(1)
    depth = rng.standard_normal((3, 6, 4, 5), dtype=np.float32)
    surface = rng.standard_normal((6, 4, 5), dtype=np.float32)
    data = {
        "thetao": (("lev", "time", "y", "x"), depth),
        "so": (("time", "lev", "y", "x"), depth.transpose(1, 0, 2, 3) + 1),
        "zos": (("time", "y", "x"), surface),
    }
    return write(tmp_path / "compact.zarr", data), data


def pool(n=2):
    return om4.FlatOm4ReadPool(n)


def test_the_drop_in_module_is_om4():
    assert samudra_rust_loader.FlatOm4Reader is om4.FlatOm4Reader
    assert samudra_rust_loader.CompactOm4Reader is om4.CompactOm4Reader
    assert samudra_rust_loader.FlatOm4ReadPool is om4.FlatOm4ReadPool
    assert om4.FlatOm4ReadPool(3).max_concurrent_reads == 3


def test_flat_reads_equal_xarray_in_the_calls_order(flat):
    path, data = flat
    reader = om4.FlatOm4Reader(str(path), ["thetao_0", "thetao_1", "zos"], pool())
    assert reader.shape == (6, 4, 5)
    indexes, names = [5, 1, 1, 0], ["zos", "thetao_0"]  # repeated and unsorted, a subset reordered
    out = np.full((4, 2, 4, 5), -1.0, np.float32)
    reader.read_into(indexes, names, out)
    expected = np.stack([data[n][1][indexes] for n in names], axis=1)
    np.testing.assert_array_equal(out, expected)  # NaN where NaN


def test_compact_reads_equal_xarray_for_both_level_orders(compact):
    path, data = compact
    selectors = [("so", 2), ("zos", None), ("thetao", 0), ("thetao", 2)]
    reader = om4.CompactOm4Reader(path, selectors, pool())  # a PathLike path
    assert reader.shape == (6, 4, 5)
    out = np.empty((2, 4, 4, 5), np.float32)
    reader.read_into([4, 0], selectors, out)
    so, zos, thetao = data["so"][1], data["zos"][1], data["thetao"][1]
    expected = np.stack([so[[4, 0], 2], zos[[4, 0]], thetao[0, [4, 0]], thetao[2, [4, 0]]], axis=1)
    np.testing.assert_array_equal(out, expected)


def test_readers_share_one_pool_across_threads(flat, compact):
    shared = pool(3)
    readers = [om4.FlatOm4Reader(flat[0], ["zos"], shared), om4.CompactOm4Reader(compact[0], [("zos", None)], shared)]
    expected = [flat[1]["zos"][1], compact[1]["zos"][1]]

    def read(i):
        out = np.empty((6, 1, 4, 5), np.float32)
        readers[i % 2].read_into(list(range(6))[::-1], ["zos"] if i % 2 == 0 else [("zos", None)], out)
        return np.array_equal(out[:, 0], expected[i % 2][::-1], equal_nan=True)

    with ThreadPoolExecutor(max_workers=4) as executor:
        assert all(executor.map(read, range(32)))


def test_a_target_in_use_by_another_read_is_refused(flat):
    # The GIL is released during a read while the target stays borrowed: the second thread gets in
    # while the first reads, and is refused instead of writing the same array.
    path, _ = flat
    reader = om4.FlatOm4Reader(path, ["zos"], pool())
    out = np.empty((20_000, 1, 4, 5), np.float32)
    barrier = threading.Barrier(2)

    def read():
        barrier.wait()
        reader.read_into([0] * len(out), ["zos"], out)

    with ThreadPoolExecutor(max_workers=2) as executor:
        errors = [f.exception() for f in [executor.submit(read) for _ in range(2)]]
    refused = [e for e in errors if e is not None]
    assert len(refused) == 1, errors
    assert isinstance(refused[0], RuntimeError) and "could not be borrowed for writing" in str(refused[0])


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: np.empty((1, 1, 4, 5), np.float64), "float32 numpy array of 4 dimensions"),
        (lambda: np.empty((1, 4, 5), np.float32), "float32 numpy array of 4 dimensions"),
        (lambda: [[0.0]], "float32 numpy array of 4 dimensions"),
        (lambda: np.empty((1, 1, 4, 6), np.float32), r"output has shape \[1, 1, 4, 6\]; expected \[1, 1, 4, 5\]"),
        (lambda: np.empty((1, 1, 5, 4), np.float32).transpose(0, 1, 3, 2), "C-contiguous"),
    ],
)
def test_bad_targets_are_refused_untouched(flat, make, match):
    path, _ = flat
    reader = om4.FlatOm4Reader(path, ["zos"], pool())
    target = make()
    before = np.array(target, copy=True)
    with pytest.raises(RuntimeError, match=match):
        reader.read_into([0], ["zos"], target)
    np.testing.assert_array_equal(np.asarray(target), before)


def test_read_only_target_is_refused(flat):
    reader = om4.FlatOm4Reader(flat[0], ["zos"], pool())
    out = np.zeros((1, 1, 4, 5), np.float32)
    out.setflags(write=False)
    with pytest.raises(RuntimeError, match="could not be borrowed for writing"):
        reader.read_into([0], ["zos"], out)
    assert not out.any()


@pytest.mark.parametrize(
    ("indexes", "names", "match"),
    [
        ([-1], ["zos"], "time index must be non-negative, got -1"),
        ([6], ["zos"], "time index 6 is out of bounds for length 6"),
        ([0], ["thetao_1"], 'variable "thetao_1" was not opened'),
        ([0], [], "at least one variable is required for a read"),
    ],
)
def test_bad_reads_are_refused(flat, indexes, names, match):
    reader = om4.FlatOm4Reader(flat[0], ["zos", "thetao_0"], pool())
    with pytest.raises(RuntimeError, match=match):
        reader.read_into(indexes, names, np.empty((len(indexes), max(len(names), 1), 4, 5), np.float32))


def test_compact_selector_not_opened_names_the_selector(compact):
    reader = om4.CompactOm4Reader(compact[0], [("thetao", 0)], pool())
    with pytest.raises(RuntimeError, match=r'variable selector \("thetao", 1\) was not opened'):
        reader.read_into([0], [("thetao", 1)], np.empty((1, 1, 4, 5), np.float32))


def test_pool_size_must_be_positive():
    for n in (0, -2):
        with pytest.raises(RuntimeError, match="must be positive"):
            om4.FlatOm4ReadPool(n)


def test_opening_refuses_what_the_contract_refuses(tmp_path, flat, compact):
    zeros = np.zeros((2, 4, 5), np.float32)
    cases = [
        (lambda: om4.FlatOm4Reader(tmp_path / "absent.zarr", ["zos"], pool()), "opening local Zarr store"),
        (lambda: om4.FlatOm4Reader(flat[0], [], pool()), "at least one variable is required"),
        (lambda: om4.FlatOm4Reader(flat[0], [""], pool()), "must not be empty"),
        (lambda: om4.FlatOm4Reader(flat[0], ["so_0"], pool()), 'opening variable "so_0"'),
        (lambda: om4.CompactOm4Reader(compact[0], [("so", 3)], pool()), "selects level 3.*has 3 levels"),
        (lambda: om4.CompactOm4Reader(compact[0], [("so", -1)], pool()), "must be non-negative"),
        (lambda: om4.CompactOm4Reader(compact[0], [("zos", 0)], pool()), r"expected \(time, lev, lat, lon\)"),
        (lambda: om4.CompactOm4Reader(compact[0], [("thetao", None)], pool()), r"expected \(time, lat, lon\)"),
        (lambda: om4.CompactOm4Reader(compact[0], [("missing", 0)], pool()), 'opening compact OM4 variable "missing"'),
    ]
    f64 = write(tmp_path / "f64.zarr", {"v": (("time", "y", "x"), zeros.astype(np.float64))})
    cases.append((lambda: om4.FlatOm4Reader(f64, ["v"], pool()), "float64; flat OM4 Rust loading requires float32"))
    swapped = write(tmp_path / "swapped.zarr", {"v": (("time", "lon", "lat"), zeros)})
    cases.append((lambda: om4.FlatOm4Reader(swapped, ["v"], pool()), r"expected \(time, lat/y, lon/x\)"))
    mixed = write(tmp_path / "mixed.zarr", {"a": (("time", "y", "x"), zeros), "b": (("t2", "y", "x"), zeros[:1])})
    attrs = mixed / "b" / ".zattrs"
    attrs.write_text(attrs.read_text().replace('"t2"', '"time"'))
    cases.append((lambda: om4.FlatOm4Reader(mixed, ["a", "b"], pool()), "time/spatial shape"))
    for make, match in cases:
        with pytest.raises(RuntimeError, match=match):
            make()


def test_what_om4_refuses_is_refused_with_its_reason(tmp_path):
    zeros = np.zeros((2, 4, 5), np.float32)
    packed = xr.Dataset({"v": (("time", "y", "x"), zeros)})
    packed["v"].attrs["scale_factor"] = 0.5
    packed.to_zarr(tmp_path / "packed.zarr", mode="w", consolidated=False, encoding={"v": {"dtype": "float32"}})
    with pytest.raises(RuntimeError, match="packed data"):
        om4.FlatOm4Reader(tmp_path / "packed.zarr", ["v"], pool())
    sentinel = write(tmp_path / "sentinel.zarr", {"v": (("time", "y", "x"), zeros)})
    meta = sentinel / "v" / ".zarray"
    meta.write_text(meta.read_text().replace('"fill_value": "NaN"', '"fill_value": -999.0'))
    with pytest.raises(RuntimeError, match="not NaN"):
        om4.FlatOm4Reader(sentinel, ["v"], pool())


def test_a_corrupt_chunk_is_an_error_that_says_the_target_is_partly_written(flat):
    path, _ = flat
    reader = om4.FlatOm4Reader(path, ["zos"], pool())
    chunk = next((path / "zos").glob("0.*"))
    chunk.write_bytes(b"not a blosc frame")
    with pytest.raises(RuntimeError, match="partly written"):
        reader.read_into([0, 1], ["zos"], np.empty((2, 1, 4, 5), np.float32))
