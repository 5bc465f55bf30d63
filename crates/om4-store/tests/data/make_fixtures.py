"""Regenerate the zarr-python conformance fixtures under zarr_python/.

Each store holds channels thetao_0, thetao_1 and zos on a 4x6 grid with 5 time steps and NaN land,
written by zarr-python with one codec / layout / format; `expected.npy` holds the (time, channel,
y, x) float32 values every store must read back as, bit for bit. Needs zarr>=3 and numpy:

    python -m venv /tmp/zarr3 && /tmp/zarr3/bin/pip install zarr numpy
    /tmp/zarr3/bin/python make_fixtures.py
"""

import json
import shutil
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ShardingCodec, ZstdCodec
import numcodecs

OUT = Path(__file__).parent / "zarr_python"
T, L, Y, X = 5, 2, 4, 6

rng = np.random.default_rng(7)
thetao = rng.normal(10.0, 3.0, size=(T, L, Y, X)).astype(np.float32)
zos = rng.normal(0.0, 0.5, size=(T, Y, X)).astype(np.float32)
land = np.zeros((L, Y, X), dtype=bool)
land[0, 0, :2] = True
land[1, 0, :3] = True
land[1, 3, 5] = True
thetao[:, land] = np.nan
zos[:, land[0]] = np.nan
expected = np.concatenate([thetao, zos[:, None]], axis=1)  # (T, 3, Y, X): thetao_0, thetao_1, zos


def v2_compressor(name):
    return {
        "none": None,
        "blosc-lz4": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        "blosc-zstd-bit": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE),
        "blosc-blosclz-noshuffle": numcodecs.Blosc(cname="blosclz", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE),
        "blosc-zlib": numcodecs.Blosc(cname="zlib", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        "zstd": numcodecs.Zstd(level=3),
        "gzip": numcodecs.GZip(level=5),
    }[name]


def v3_codecs(name):
    return {
        "none": None,
        "blosc-lz4": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
        "zstd": [ZstdCodec(level=3)],
        "gzip": [GzipCodec(level=5)],
    }[name]


def write(name, fmt, layout, codec, time_chunk=1, order="C", shard=None, consolidated=None):
    path = OUT / f"{name}.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    time = root.create_array("time", shape=(T,), dtype="int64", chunks=(T,), fill_value=0,
                             **({"dimension_names": ["time"]} if fmt == 3 else {}))
    time[:] = np.arange(T) * 5
    if fmt == 2:
        time.attrs["_ARRAY_DIMENSIONS"] = ["time"]

    def array(aname, data, dims, chunks):
        kw = dict(shape=data.shape, dtype="float32", chunks=chunks, fill_value=np.nan)
        if fmt == 2:
            kw.update(compressors=v2_compressor(codec), order=order)
        else:
            kw.update(dimension_names=dims)
            kw.update(compressors=v3_codecs(codec))  # None: no compressor (zarr-python's default is zstd)
            if shard is not None:
                kw.update(shards=(shard,) + tuple(data.shape[1:]))
        a = root.create_array(aname, **kw)
        a[...] = data
        if fmt == 2:
            a.attrs["_ARRAY_DIMENSIONS"] = dims

    if layout == "flat":
        for k in range(L):
            array(f"thetao_{k}", thetao[:, k], ["time", "y", "x"], (time_chunk, Y, X))
    else:
        array("thetao", thetao, ["time", "lev", "y", "x"], (time_chunk, L, Y, X))
    array("zos", zos, ["time", "y", "x"], (time_chunk, Y, X))
    if consolidated if consolidated is not None else fmt == 2:  # v2 always; v3 where asked
        zarr.consolidate_metadata(str(path))


shutil.rmtree(OUT, ignore_errors=True)
OUT.mkdir()
cases = []
for codec in ["none", "blosc-lz4", "blosc-zstd-bit", "blosc-blosclz-noshuffle", "blosc-zlib", "zstd", "gzip"]:
    cases.append((f"v2_flat_{codec}", 2, "flat", codec, 1, "C", None))
cases += [
    ("v2_compact_blosc-lz4_t2", 2, "compact", "blosc-lz4", 2, "C", None),
    ("v2_flat_none_F_t3", 2, "flat", "none", 3, "F", None),
    ("v2_compact_zstd_F", 2, "compact", "zstd", 1, "F", None),
    ("v3_flat_none", 3, "flat", "none", 1, "C", None),
    ("v3_flat_zstd_t2", 3, "flat", "zstd", 2, "C", None),
    ("v3_compact_gzip", 3, "compact", "gzip", 1, "C", None),
    ("v3_flat_blosc-lz4_shard2", 3, "flat", "blosc-lz4", 1, "C", 2),
    ("v3_compact_blosc-lz4_shard3", 3, "compact", "blosc-lz4", 1, "C", 3),
    ("v3_flat_blosc-lz4_shard2_consolidated", 3, "flat", "blosc-lz4", 1, "C", 2, True),
    ("v3_compact_zstd_consolidated", 3, "compact", "zstd", 1, "C", None, True),
]
for c in cases:
    write(*c)
np.save(OUT / "expected.npy", expected)
(OUT / "cases.json").write_text(json.dumps({"zarr": zarr.__version__, "stores": [c[0] for c in cases]}, indent=1))
print(len(cases), "stores written with zarr", zarr.__version__)
