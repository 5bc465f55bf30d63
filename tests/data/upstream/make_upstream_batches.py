#!/usr/bin/env python3
"""Generate data-pipeline parity fixtures from upstream Samudra's own code (issue 16).

Upstream: github.com/m2lines/Samudra at commit
    018a6a7453bd2b600daffcc971af964102ab90a1  ("Fix z_l->lev rename for OM4 snapshot sources (#756)")

Nothing from upstream is committed here: the script imports upstream's `samudra` package
from a checkout given by `--upstream-src` or `$SAMUDRA_SRC` (default
/work/upstream-samudra/src).

How to run (Python 3.12; versions follow upstream's uv.lock: torch 2.9.1 (CPU use only),
numpy 1.26.4, xarray 2025.1.2, zarr 2.18.7, numcodecs 0.15.1, dask 2025.2.0, pandas 2.2.3,
cftime 1.6.4.post1, einops 0.7.0, jaxtyping 0.3.0, pydantic 2.10.6, pydantic-settings 2.8.1,
pyyaml 6.0.2, xarray-einstats 0.8.0, torchinfo 1.8.0, scipy 1.15.2):

    python tests/data/upstream/make_upstream_batches.py [--upstream-src DIR] [--out DIR]

What it writes (under --out, default: the folder holding this script):

  store/data.zarr, store/means.zarr, store/stds.zarr
      A small OM4-like store built the way upstream's tests/conftest.py "mock-om4"
      fixture builds its data (non-compact `<var>_lev_<depth>` variables, a `wetmask`
      (lev, lat, lon) coordinate, 2-D boundary variables, `zos`), scaled down to an
      8x16 grid, 5 populated levels (`wetmask` keeps all 19 levels because upstream's
      `flatten_masks` indexes every one of them), 36 five-day steps on a julian calendar at
      12:00. Land is NaN, except a few finite land cells; a few ocean cells are NaN.
      Values are plain random numbers (float32) instead of the fixture's bit-encoded
      floats. means/stds are `data.mean/std(dim=["time","lat","lon"])` as in the fixture,
      computed in float64 and stored as float64. Zarr v2, no compression (as the fixture).

  cases/<case>/case.json        every parameter of the case, channel names, split dates
  cases/<case>/schedule.json    the whole epoch's batch schedule (global and per-dataset
                                sample indices, time indices and dates of every step)
  cases/<case>/label_mask.npy   uint8 (C_prog*(hist+1), H, W), 1 = ocean: GridContext.label_mask
  cases/<case>/boundary_mask.npy uint8 (H, W): the surface mask used for boundary channels
  cases/<case>/prognostic_mask.npy uint8 (C_prog, H, W): per-channel mask (no history)
  cases/<case>/batch_NNN/step_K/{prognostic,boundary,label,model_input}.npy  float32
      exactly the tensors of TrainData.example_by_step[K] of the NNN-th batch the
      loader yields in that epoch (only the first few batches are written).
      model_input = torch.cat((prognostic, boundary), dim=1), as Samudra.forward_once
      builds it. For K>0 the model itself replaces `prognostic` by its own previous
      prediction (BaseModel.forward); the file still holds the data's (teacher) tensor.

The loaders are built by upstream's own `Trainer.init_data_loaders` (its source is read
from src/samudra/train.py with `ast` and executed against a stand-in `self`, so that
train.py's wandb/matplotlib/aggregator imports are never loaded). Data sources come
from upstream's `DataConfig.build` (real time-split code). Only `perceiver_pytorch` and
`aurora`, imported at module load by samudra.config / samudra.models but unused by the
Samudra U-Net and the data code, are replaced by stub modules in sys.modules.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import logging
import os
import shutil
import sys
import textwrap
import types
from pathlib import Path

import numpy as np

UPSTREAM_COMMIT = "018a6a7453bd2b600daffcc971af964102ab90a1"
HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------------------
# Import plumbing
# --------------------------------------------------------------------------------------
def install_stub_modules() -> None:
    """Stub perceiver_pytorch / aurora (imported at module load, unused here)."""

    class _Anything:
        def __init__(self, *a, **k):
            raise RuntimeError("stubbed module object used")

    def make(name: str) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = []  # type: ignore[attr-defined]
        def __getattr__(attr: str):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Anything

        mod.__getattr__ = __getattr__  # type: ignore[method-assign]
        return mod

    for name in [
        "perceiver_pytorch",
        "perceiver_pytorch.perceiver_io",
        "perceiver_pytorch.perceiver_pytorch",
        "aurora",
        "aurora.model",
        "aurora.model.posencoding",
        "aurora.model.fourier",
    ]:
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = make(name)


def import_upstream(src: Path):
    sys.path.insert(0, str(src))
    install_stub_modules()
    import samudra  # noqa: F401

    got = Path(samudra.__file__).resolve()
    if not str(got).startswith(str(src.resolve())):
        raise SystemExit(f"imported samudra from {got}, expected under {src}")
    return src


def load_init_data_loaders(src: Path):
    """Return upstream's Trainer.init_data_loaders as a plain function.

    Its source is taken verbatim from src/samudra/train.py and executed in a namespace
    holding the names train.py imports for it.
    """
    import torch
    from torch.utils.data import ConcatDataset, DataLoader

    from samudra.datasets import RawTrainData, TorchTrainDataset, TrainDataLoader
    from samudra.utils.samplers import (
        DistributedEquivalenceGroupBatchSampler,
        EquivalenceGroupBatchSampler,
    )
    from samudra.utils.train import collate_raw_train_data

    train_py = src / "samudra" / "train.py"
    text = train_py.read_text()
    tree = ast.parse(text)
    fn_src = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "init_data_loaders":
                    fn_src = ast.get_source_segment(text, item)
                    lineno = item.lineno
    if fn_src is None:
        raise SystemExit("Trainer.init_data_loaders not found in train.py")
    ns = dict(
        torch=torch,
        ConcatDataset=ConcatDataset,
        DataLoader=DataLoader,
        RawTrainData=RawTrainData,
        TorchTrainDataset=TorchTrainDataset,
        TrainDataLoader=TrainDataLoader,
        DistributedEquivalenceGroupBatchSampler=DistributedEquivalenceGroupBatchSampler,
        EquivalenceGroupBatchSampler=EquivalenceGroupBatchSampler,
        collate_raw_train_data=collate_raw_train_data,
        logger=logging.getLogger("samudra.train"),
    )
    code = compile(textwrap.dedent(fn_src), f"{train_py}:{lineno}", "exec")
    exec(code, ns)
    return ns["init_data_loaders"], f"src/samudra/train.py:{lineno}"


# --------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------
N_LAT, N_LON, N_TIME, N_LEV_DATA = 8, 16, 36, 5
TIME_START = "1975-08-05 12:00"


def _fmtl(lev: float) -> str:  # as conftest.py
    return str(lev).replace(".", "_")


def build_store(out: Path) -> dict:
    import cftime  # noqa: F401
    import xarray as xr

    import samudra.constants as c

    spec = c.build_om4_spec(prognostic_vars_key="thermo_dynamic_5", boundary_vars_key="tau_hfds")
    rng = np.random.RandomState(42)

    time = xr.cftime_range(TIME_START, periods=N_TIME, freq="5D", calendar="julian")
    lat = np.linspace(-78.75, 78.75, N_LAT)
    lon = np.linspace(11.25, 348.75, N_LON)
    lev = np.array(spec.depth_levels)  # all 19: flatten_masks indexes every level

    # Nested wet masks (deeper levels have less ocean); row 0 and a block of land.
    wet = np.zeros((len(lev), N_LAT, N_LON), dtype=np.int64)
    noise = rng.normal(size=(N_LAT, N_LON))
    base = noise > -0.6
    base[0, :] = False  # a land row (Antarctica)
    base[3:5, 5:8] = False  # a continent
    for k in range(len(lev)):
        thresh = -0.6 + 0.25 * k
        wet[k] = (base & (noise > thresh)).astype(np.int64)
    coords = {
        "time": ("time", np.array(list(time))),
        "lat": ("lat", lat),
        "lon": ("lon", lon),
        "lev": ("lev", lev),
        "wetmask": (("lev", "lat", "lon"), wet),
    }

    scales = {  # (mean, std) of the random values
        "hfds": (-5.0, 80.0),
        "hfds_anomalies": (0.0, 20.0),
        "tauuo": (0.02, 0.08),
        "tauvo": (-0.01, 0.05),
        "so": (34.5, 0.8),
        "thetao": (12.0, 6.0),
        "uo": (0.01, 0.1),
        "vo": (-0.005, 0.07),
        "zos": (-0.2, 0.6),
    }
    nan_ocean_cells = []
    finite_land_cells = []

    def field(name: str, level: int) -> np.ndarray:
        m, s = scales[name]
        # smooth-ish in time, random in space, different per level
        a = rng.normal(size=(1, N_LAT, N_LON))
        b = rng.normal(size=(N_TIME, N_LAT, N_LON))
        t = np.arange(N_TIME)[:, None, None]
        x = m * (1.0 + 0.1 * level) + s * (0.7 * a + 0.3 * b + 0.2 * np.sin(t / 5.0 + level))
        x = x.astype(np.float32)
        mask = wet[level].astype(bool)
        x[:, ~mask] = np.nan
        # a few finite land cells
        land = np.argwhere(~mask)
        for j, i in land[rng.choice(len(land), size=2, replace=False)]:
            x[:, j, i] = np.float32(m + 3.0 * s)
            finite_land_cells.append([name, level, int(j), int(i)])
        # a few NaN ocean cells (some at all times, some at one time)
        ocean = np.argwhere(mask)
        pick = ocean[rng.choice(len(ocean), size=2, replace=False)]
        j, i = pick[0]
        x[:, j, i] = np.nan
        nan_ocean_cells.append([name, level, "all", int(j), int(i)])
        j, i = pick[1]
        tt = int(rng.randint(N_TIME))
        x[tt, j, i] = np.nan
        nan_ocean_cells.append([name, level, tt, int(j), int(i)])
        return x

    vars_2d = {v: (("time", "lat", "lon"), field(v, 0)) for v in ["hfds", "hfds_anomalies", "tauuo", "tauvo"]}
    vars_3d = {
        f"{v}_lev_{_fmtl(float(lev[k]))}": (("time", "lat", "lon"), field(v, k))
        for v in ["so", "thetao", "uo", "vo"]
        for k in range(N_LEV_DATA)
    }
    vars_3d["zos"] = (("time", "lat", "lon"), field("zos", 0))
    data = xr.Dataset(vars_2d | vars_3d, coords=coords)

    # As conftest.py: means/stds over time, lat, lon (skipna, ddof=0), here in float64.
    data64 = data.astype(np.float64)
    means = data64.mean(dim=["time", "lat", "lon"])
    stds = data64.std(dim=["time", "lat", "lon"])

    store = out / "store"
    if store.exists():
        shutil.rmtree(store)
    store.mkdir(parents=True)
    enc = {dv: {"compressor": None} for dv in data.data_vars}
    data.to_zarr(store / "data.zarr", encoding=enc, zarr_format=2)
    means.to_zarr(store / "means.zarr", encoding={dv: {"compressor": None} for dv in means.data_vars}, zarr_format=2)
    stds.to_zarr(store / "stds.zarr", encoding={dv: {"compressor": None} for dv in stds.data_vars}, zarr_format=2)
    return {
        "grid": [N_LAT, N_LON],
        "n_time": N_TIME,
        "time_start": TIME_START,
        "calendar": "julian",
        "time_step_days": 5,
        "populated_levels": N_LEV_DATA,
        "nan_ocean_cells[var, level, time|'all', lat_i, lon_i]": nan_ocean_cells,
        "finite_land_cells[var, level, lat_i, lon_i]": finite_land_cells,
    }


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------
# Store stamps: 1975-08-05 12:00 + 5 days * k, k = 0..35 (last 1976-01-27).
TRAIN_START, TRAIN_END = "1975-08-10", "1975-11-28"  # both on a stamp day: k = 1..23
VAL_START, VAL_END = "1975-11-30", "1976-01-22"  # start between stamps (11-28, 12-03): k = 24..34

BASE = dict(
    prognostic_vars_key="thermo_dynamic_5",
    boundary_vars_key="tau_hfds",
    hist=0,
    steps=1,
    data_stride=[1],
    batch_size=2,
    seed=15,
    epoch=1,
    world_size=None,
    rank=None,
    split="train",
    normalize_before_mask=True,
    masked_fill_value=0.0,
    train_time=[TRAIN_START, TRAIN_END],
    val_time=[VAL_START, VAL_END],
    write_batches=2,
)


def case(name, **kw):
    d = dict(BASE)
    d.update(kw)
    d["name"] = name
    return d


CASES = [
    case("train_h0_s1_st1"),
    case("train_h1_s1_st1", hist=1),
    case("train_h0_s2_st1", steps=2),
    case("train_h0_s1_st2", data_stride=[2]),
    case("train_h1_s2_st2", hist=1, steps=2, data_stride=[2]),
    case("train_h0_s1_st12", data_stride=[1, 2]),
    case("train_h0_s1_st1_epoch2", epoch=2),
    case("train_h0_s1_st1_seed7", seed=7, write_batches=0),
    case("train_ddp2_rank0", world_size=2, rank=0),
    case("train_ddp2_rank1", world_size=2, rank=1),
    case("train_ddp2_rank0_st12_bs3", world_size=2, rank=0, data_stride=[1, 2], batch_size=3, write_batches=0),
    case("train_ddp2_rank1_st12_bs3", world_size=2, rank=1, data_stride=[1, 2], batch_size=3, write_batches=0),
    case("val_h0", split="val"),
    case("val_h1_st2", split="val", hist=1, data_stride=[2]),
    case("val_ddp2_rank0_bs3", split="val", world_size=2, rank=0, batch_size=3, write_batches=0),
    case("val_ddp2_rank1_bs3", split="val", world_size=2, rank=1, batch_size=3, write_batches=0),
    case("train_h0_s1_st1_maskfirst_fill", normalize_before_mask=False, masked_fill_value=-3.5),
    case("train_h0_s1_st1_normfirst_fill", normalize_before_mask=True, masked_fill_value=-3.5),
]


def run_case(cfg: dict, out: Path, store: Path, init_data_loaders, init_ref: str) -> dict:
    import torch

    from samudra.config import DataConfig
    from samudra.constants import LoaderVersion  # noqa: F401
    from samudra.datasets import TorchTrainDataset
    from samudra.utils.location import LocalLocation

    data_cfg = DataConfig.model_validate(
        {
            "sources": [
                {
                    "type": "om4",
                    "prognostic_vars_key": cfg["prognostic_vars_key"],
                    "boundary_vars_key": cfg["boundary_vars_key"],
                    "train_time": {"start": cfg["train_time"][0], "end": cfg["train_time"][1]},
                    "val_time": {"start": cfg["val_time"][0], "end": cfg["val_time"][1]},
                    "data_location": "data.zarr",
                    "data_means_location": "means.zarr",
                    "data_stds_location": "stds.zarr",
                }
            ],
            "loading": {"type": "cpu", "num_workers": 0},
            "hist": cfg["hist"],
            "normalize_before_mask": cfg["normalize_before_mask"],
            "masked_fill_value": cfg["masked_fill_value"],
            "concurrent_compute": False,
        }
    )
    container = data_cfg.build(data_root=LocalLocation(path=store.resolve()))
    spec = container.dataset_spec

    distributed = None
    if cfg["world_size"] is not None:
        distributed = types.SimpleNamespace(world_size=cfg["world_size"], rank=cfg["rank"], gpu=None)
    fake = types.SimpleNamespace(
        prognostic_var_names=spec.prognostic_var_names,
        boundary_var_names=spec.boundary_var_names,
        hist=cfg["hist"],
        normalize_before_mask=data_cfg.normalize_before_mask,
        normalize_fill_value=data_cfg.masked_fill_value,
        data_stride=list(cfg["data_stride"]),
        concurrent_compute=False,
        data_container=container,
        loader_version=container.loader_version,
        distributed=distributed,
        batch_size=cfg["batch_size"],
        rand_seed=cfg["seed"],
        num_workers=0,
        persistent_workers=False,
        pin_mem=False,
        mp_context=None,
        device=torch.device("cpu"),
    )
    init_data_loaders(fake, cfg["steps"])
    # Trainer.run(): set_epoch on both samplers before the epoch
    fake.train_sampler.set_epoch(cfg["epoch"])
    fake.val_sampler.set_epoch(cfg["epoch"])
    if cfg["split"] == "train":
        loader, sampler = fake.train_loader, fake.train_sampler
        src = container.train_sources[0]
        steps = cfg["steps"]
    else:
        loader, sampler = fake.val_loader, fake.val_sampler
        src = container.val_sources[0]
        steps = 1  # init_data_loaders: validation datasets always use steps=1

    concat = loader.dataset
    datasets: list[TorchTrainDataset] = list(concat.datasets)
    cum = [0] + list(itertools.accumulate(len(d) for d in datasets))
    times = [str(t) for t in src.data.time.values]
    import xarray as xr

    all_times = [str(t) for t in xr.open_zarr(store / "data.zarr").time.values]

    def locate(g: int):
        for di in range(len(datasets)):
            if cum[di] <= g < cum[di + 1]:
                return di, g - cum[di]
        raise IndexError(g)

    schedule = []
    batches = [list(b) for b in sampler]
    for b in batches:
        samples = []
        for g in b:
            di, li = locate(g)
            ds = datasets[di]
            step_info = []
            for k in range(steps):
                xi = ds._get_x_index(li, k).values.tolist()
                inp, lab = xi[: ds.hist + 1], xi[ds.hist + 1 :]
                step_info.append(
                    {
                        "input_time_indices": inp,
                        "label_time_indices": lab,
                        "input_times": [times[i] for i in inp],
                        "label_times": [times[i] for i in lab],
                    }
                )
            samples.append(
                {"global_index": g, "dataset": di, "stride": ds.stride, "local_index": li, "steps": step_info}
            )
        schedule.append(samples)

    cdir = out / "cases" / cfg["name"]
    if cdir.exists():
        shutil.rmtree(cdir)
    cdir.mkdir(parents=True)

    n_write = cfg["write_batches"]
    written = 0
    first_ds = datasets[0]
    loader_error = None
    try:
        loaded = []
        for bi, td in enumerate(loader):
            if bi >= n_write:
                break
            loaded.append(td)
    except AssertionError as e:  # upstream refuses batches mixing datasets (strides)
        loader_error = f"AssertionError: {e}"
        loaded = []
    for bi, td in enumerate(loaded):
        # cross-check: the loader's batch is the sampler's batch
        ref = [datasets[locate(g)[0]] for g in batches[bi]]
        assert all(r.id == ref[0].id for r in ref)
        for k in range(len(td)):
            prog, bnd, lab = td[k]
            mi = torch.cat((prog, bnd), dim=1)
            sdir = cdir / f"batch_{bi:03d}" / f"step_{k}"
            sdir.mkdir(parents=True)
            for nm, t in [("prognostic", prog), ("boundary", bnd), ("label", lab), ("model_input", mi)]:
                assert t.dtype == torch.float32
                arr = t.numpy()
                assert np.isfinite(arr).all(), (cfg["name"], nm)
                np.save(sdir / f"{nm}.npy", arr)
        # verify against direct dataset access for the first sample of the batch
        di, li = locate(batches[bi][0])
        raw = datasets[di][li]
        from samudra.utils.train import collate_raw_train_data

        td1 = datasets[di].to_train_data(collate_raw_train_data([raw]), torch.device("cpu"))
        assert torch.equal(td1[0][0][0], td[0][0][0])
        written += 1

    np.save(cdir / "label_mask.npy", first_ds.ctx.label_mask.numpy().astype(np.uint8))
    np.save(cdir / "prognostic_mask.npy", first_ds.wet_prognostic.numpy().astype(np.uint8))
    np.save(cdir / "boundary_mask.npy", first_ds.wet_surface.numpy().astype(np.uint8))

    h = cfg["hist"]
    prog_names = list(spec.prognostic_var_names)
    bnd_names = list(spec.boundary_var_names)
    case_json = {
        "upstream_commit": UPSTREAM_COMMIT,
        "loaders_built_by": init_ref + " (Trainer.init_data_loaders)",
        "split": cfg["split"],
        "prognostic_vars_key": cfg["prognostic_vars_key"],
        "boundary_vars_key": cfg["boundary_vars_key"],
        "prognostic_channels_per_time": prog_names,
        "boundary_channels_per_time": bnd_names,
        "prognostic_channels": [f"t{t}:{v}" for t in range(h + 1) for v in prog_names],
        "boundary_channels": [f"t{t}:{v}" for t in range(h + 1) for v in bnd_names],
        "model_input_channels": [f"prog:t{t}:{v}" for t in range(h + 1) for v in prog_names]
        + [f"bnd:t{t}:{v}" for t in range(h + 1) for v in bnd_names],
        "channel_layout": "time-major: channel = t * n_vars + var (t = 0 oldest); model_input = prognostic then boundary",
        "hist": h,
        "steps": steps,
        "train_steps_requested": cfg["steps"],
        "data_stride": cfg["data_stride"],
        "batch_size": cfg["batch_size"],
        "seed": cfg["seed"],
        "epoch": cfg["epoch"],
        "distributed": cfg["world_size"] is not None,
        "world_size": cfg["world_size"] or 1,
        "rank": cfg["rank"] or 0,
        "sampler": type(sampler).__name__,
        "sampler_shuffle": bool(sampler.shuffle),
        "sampler_drop_last": bool(sampler.drop_last),
        "normalize_before_mask": cfg["normalize_before_mask"],
        "masked_fill_value": cfg["masked_fill_value"],
        "train_time": {"start": cfg["train_time"][0], "end": cfg["train_time"][1], "at": "12:00 julian, inclusive"},
        "val_time": {"start": cfg["val_time"][0], "end": cfg["val_time"][1], "at": "12:00 julian, inclusive"},
        "split_times": times,
        "split_first_time_index_in_store": all_times.index(times[0]) if times[0] in all_times else None,
        "dataset_lengths": [len(d) for d in datasets],
        "dataset_strides": [d.stride for d in datasets],
        "num_batches_in_epoch": len(batches),
        "len_sampler": len(sampler),
        "batches_written": written,
        "loader_error": loader_error,
        "shapes": {
            "prognostic": [None, len(prog_names) * (h + 1), N_LAT, N_LON],
            "boundary": [None, len(bnd_names) * (h + 1), N_LAT, N_LON],
            "label": [None, len(prog_names) * (h + 1), N_LAT, N_LON],
        },
    }
    (cdir / "case.json").write_text(json.dumps(case_json, indent=1) + "\n")
    (cdir / "schedule.json").write_text(
        json.dumps({"batches": batches, "samples": schedule}, indent=None)
        + "\n"
    )
    return {"name": cfg["name"], "batches": len(batches), "written": written, "first": batches[:3], "error": loader_error}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-src", default=os.environ.get("SAMUDRA_SRC", "/work/upstream-samudra/src"))
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args()
    src = Path(args.upstream_src)
    out = Path(args.out)
    logging.basicConfig(level=logging.WARNING)

    import_upstream(src)
    import torch

    torch.set_num_threads(1)
    import dask

    dask.config.set(scheduler="synchronous")  # as Trainer.__init__

    init_data_loaders, init_ref = load_init_data_loaders(src)
    store_info = build_store(out)
    (out / "store" / "store.json").write_text(json.dumps(store_info, indent=1) + "\n")

    if (out / "cases").exists():
        shutil.rmtree(out / "cases")
    summary = []
    for cfg in CASES:
        r = run_case(cfg, out, out / "store", init_data_loaders, init_ref)
        summary.append(r)
        print(f"{r['name']:36s} batches={r['batches']:3d} written={r['written']} first={r['first']} error={r['error']}")
    (out / "cases" / "index.json").write_text(
        json.dumps({"upstream_commit": UPSTREAM_COMMIT, "cases": [c["name"] for c in CASES]}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
