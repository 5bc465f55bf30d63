"""om4.Loader against upstream Samudra's own Rust-backed loader, prepared batches on the CPU.

Upstream's loader is built by upstream's own ``Trainer.init_data_loaders`` from its test
configuration (``configs/test/train_default.yaml``) with ``data.loading.type: rust``: its
extension reads (plan, ``np.unique`` dedup, ``read_into``) on a Python prefetch thread, and torch
normalizes, masks and gathers on the CPU into a ``ModelBatch``. om4.Loader does all of it in
Rust. Both read the same store with the same channels (``thermo_dynamic_5`` + ``tau_hfds``),
window (hist 1, 2 steps), batch size and read threads; rounds alternate which goes first. Each
round times an epoch's first BATCHES batches pulled back to back (prepared-batch throughput), then
the exposed wait per batch while the consumer computes for --compute-ms (the wait a training loop
sees). Upstream reads through the ``samudra_rust_loader`` installed (om4's drop-in, with the
wheel), or through upstream's own extension with ``--upstream-so`` (the .so in its wheel).

    target/torch-venv/bin/python benches/python/loader.py --upstream-src DIR STORE_DIR

On a GPU (``--device cuda``; scripts/gpu-check.sh runs it): upstream's loader as its Trainer builds
it for a CUDA run (``prefetch_to_device``: pinned read buffers, copied and prepared on its own CUDA
stream ahead of the model), against om4.Loader with ``pin_memory=True`` and without, each batch's
arrays put on the GPU as a plain PyTorch loop does (``torch.from_numpy(a).to("cuda",
non_blocking=True)``). The consumer's compute is GPU work (``torch.cuda._sleep``) for --compute-ms,
synchronized at the end of each step as a loss read back would; each batch's overhead is the step's
wall time minus that compute (waiting for the batch plus copies not hidden). Back to back, the
seconds of each om4 batch's copy are timed too (host-to-device GB/s, pinned against pageable).

STORE_DIR holds OM4.zarr, OM4_means.zarr, OM4_stds.zarr (``om4 synth --grid 1deg``). Upstream's
xarray code needs two things of a store that ``om4 synth`` writes otherwise: a julian calendar
(synth writes noleap; the dates agree within 1958) and bool masks without a fill value (xarray
decodes ``fill_value: false`` masks as objects); ``--patch-store`` rewrites both in STORE_DIR's
metadata once.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import om4


def load_extension(so: Path):
    """Upstream's own extension module from its .so, under its name, without installing it."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader("samudra_rust_loader", str(so))
    spec = importlib.util.spec_from_file_location("samudra_rust_loader", so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def upstream_loader(src: Path, root: Path, args, out: Path, loading="rust", module=None):
    """Upstream's training loader as its Trainer builds it. `loading`: "rust" (its extension;
    `module` is the samudra_rust_loader to read through, default the one installed, or upstream's
    own with --upstream-so) or "cpu" (its xarray datasets under a PyTorch DataLoader with
    --threads worker processes)."""
    if module is None and args.upstream_so:
        module = load_extension(args.upstream_so)
    if module is not None:
        sys.modules["samudra_rust_loader"] = module
    if str(src / "src") not in sys.path:
        sys.path.insert(0, str(src / "src"))
    from samudra.config import (
        CpuDataLoadingConfig,
        Om4DataSourceConfig,
        Om4TimeConfig,
        RustDataLoadingConfig,
        TrainConfig,
    )
    from samudra.train import Trainer
    from samudra.utils.location import UnresolvedLocation
    from samudra.utils.multiton import MultitonScope

    config = TrainConfig.from_yaml_and_cli(
        [str(src / "configs/test/train_default.yaml"), "--experiment.data_root", str(root),
         "--experiment.base_output_dir", str(out), "--backend", args.device]
    )
    train, val = args.train.split(".."), args.val.split("..")
    config.data.sources = [
        Om4DataSourceConfig(
            train_time=Om4TimeConfig.model_validate({"start": train[0], "end": train[1]}),
            val_time=Om4TimeConfig.model_validate({"start": val[0], "end": val[1]}),
            data_location=UnresolvedLocation(path="OM4.zarr"),
            data_means_location=UnresolvedLocation(path="OM4_means.zarr"),
            data_stds_location=UnresolvedLocation(path="OM4_stds.zarr"),
            prognostic_vars_key="thermo_dynamic_5",
            boundary_vars_key="tau_hfds",
        )
    ]
    if loading == "rust":
        config.data.loading = RustDataLoadingConfig(
            prefetch_batches=args.prefetch, max_concurrent_reads=args.threads,
            prefetch_to_device=args.device == "cuda",
        )
    else:
        config.data.loading = CpuDataLoadingConfig(num_workers=args.threads, persistent_workers=True)
    config.data.hist = 1
    config.inference_epochs = []
    config.batch_size = args.batch_size
    config.data_stride = [1]
    config.steps = [2]
    config.step_transition = []
    scope = MultitonScope()
    scope.__enter__()
    trainer = Trainer(config)
    trainer.init_data_loaders(cur_step=2)
    return trainer.train_loader, scope


def patch_store(data: Path):
    def edit(meta: dict, key: str):
        if key.endswith(".zarray") and meta.get("dtype") == "|b1" and meta.get("fill_value") is False:
            meta["fill_value"] = None
        if key == "time/.zattrs":
            meta["calendar"] = "julian"

    for path in [*data.glob("*/.zarray"), data / "time" / ".zattrs"]:
        meta = json.loads(path.read_text())
        edit(meta, f"{path.parent.name}/{path.name}")
        path.write_text(json.dumps(meta))
    consolidated = data / ".zmetadata"
    if consolidated.exists():
        meta = json.loads(consolidated.read_text())
        for key, value in meta["metadata"].items():
            edit(value, key)
        consolidated.write_text(json.dumps(meta))


def om4_loader(root: Path, prognostic, boundary, args, pin_memory=False):
    return om4.Loader(
        root / "OM4.zarr", prognostic=prognostic, boundary=boundary, time=args.train, hist=1, steps=2,
        batch_size=args.batch_size, seed=15, prefetch=args.prefetch, max_concurrent_reads=args.threads,
        pin_memory=pin_memory,
    )


class Gpu:
    """The consumer's side on a CUDA device: om4's arrays put on it as a plain loop does, and GPU
    compute of a given length."""

    def __init__(self):
        import torch

        self.torch = torch
        self.device = torch.device("cuda")
        torch.cuda.init()
        # torch.cuda._sleep spins for a number of clock cycles: calibrate cycles per second.
        torch.cuda._sleep(1_000_000)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(100_000_000)
        torch.cuda.synchronize()
        self.cycles_per_s = 100_000_000 / (time.perf_counter() - t0)

    def put(self, batch):
        """om4's batch on the GPU (model input and label of each step; prognostic and boundary
        are views of the input); upstream's is there already."""
        if not hasattr(batch, "steps") or not hasattr(batch.steps[0], "model_input"):
            return batch, 0
        to = lambda a: self.torch.from_numpy(a).to(self.device, non_blocking=True)  # noqa: E731
        steps = [(to(s.model_input), to(s.label)) for s in batch.steps]
        return steps, sum(s.model_input.nbytes + s.label.nbytes for s in batch.steps)

    def compute(self, seconds):
        self.torch.cuda._sleep(int(seconds * self.cycles_per_s))

    def sync(self):
        """What a loss read back waits for: the model's stream."""
        self.torch.cuda.current_stream().synchronize()


def pull(iterator, batches, compute_s, gpu=None):
    """Seconds for `batches` batches back to back (compute_s = 0), each batch's wait, each step's
    overhead (wall time less compute, on a GPU) and each batch's copy seconds and bytes."""
    waits, overheads, copies = [], [], []
    batch = None
    t_all = time.perf_counter()
    for _ in range(batches):
        t0 = time.perf_counter()
        new = next(iterator)
        waits.append(time.perf_counter() - t0)
        if gpu is not None:
            t1 = time.perf_counter()
            new, nbytes = gpu.put(new)
            if not compute_s and nbytes:  # om4's copy, timed by itself
                gpu.sync()
                copies.append((time.perf_counter() - t1, nbytes))
        batch = new  # as a training loop holds its batch until the next one: freeing it is not waiting
        if compute_s:
            if gpu is None:
                time.sleep(compute_s)
            else:
                gpu.compute(compute_s)
                gpu.sync()
                overheads.append(time.perf_counter() - t0 - compute_s)
    del batch
    if gpu is not None:
        gpu.torch.cuda.synchronize()  # every stream: upstream prepares on its own
    return time.perf_counter() - t_all, waits, overheads, copies


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--upstream-src", type=Path, required=True)
    ap.add_argument("--patch-store", action="store_true", help="make STORE_DIR readable by upstream's xarray code")
    ap.add_argument("--upstream-so", type=Path, help="upstream's own samudra_rust_loader extension (.so)")
    ap.add_argument("--train", default="1958-01-03..1958-04-18")
    ap.add_argument("--val", default="1958-04-23..1958-05-28")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compute-ms", type=float, default=500.0)
    ap.add_argument("--json", type=Path, help="write every round's numbers here (benches/python/plot.py reads them)")
    ap.add_argument("--xarray", action="store_true",
                    help="also upstream's CPU loader (xarray datasets, --threads DataLoader workers) as a third column")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: batches delivered on the GPU (upstream's CUDA prefetch; om4 pinned and pageable)")
    args = ap.parse_args()
    if args.xarray and args.device != "cpu":
        ap.error("--xarray is a CPU column: run it with --device cpu")
    gpu = Gpu() if args.device == "cuda" else None
    if args.patch_store:
        patch_store(args.root / "OM4.zarr")
    with tempfile.TemporaryDirectory() as out:
        up, _scope = upstream_loader(args.upstream_src.resolve(), args.root.resolve(), args, Path(out))
        print("upstream reads through", sys.modules["samudra_rust_loader"].__file__, file=sys.stderr)
        from samudra.constants import build_om4_layout

        layout = build_om4_layout(prognostic_vars_key="thermo_dynamic_5", boundary_vars_key="tau_hfds")
        channels = list(layout.prognostic_var_names), list(layout.boundary_var_names)
        mine = {"om4": om4_loader(args.root, *channels, args)}
        if gpu is not None:
            mine["om4 pinned"] = om4_loader(args.root, *channels, args, pin_memory=True)
        ours = mine["om4"]
        # Both loaders' first batch of an epoch, before anything is timed: the same shapes, and
        # (same seed, same sampler) the same values.
        upstream = {"upstream": up}
        if args.xarray:
            upstream["xarray"], _xr_scope = upstream_loader(
                args.upstream_src.resolve(), args.root.resolve(), args, Path(out), loading="cpu"
            )
        b = next(iter(ours.epoch(0)))
        for name, loader in upstream.items():
            loader.set_epoch(0)
            a = next(iter(loader))
            for k, step in enumerate(b.steps):
                for i, field in enumerate(["prognostic", "boundary", "label"]):
                    theirs, ours_ = a[k][i].cpu().numpy(), getattr(step, field)
                    assert theirs.shape == ours_.shape, (name, k, field, theirs.shape, ours_.shape)
                    same = theirs.tobytes() == ours_.tobytes()
                    print(f"{name} step {k} {field}: equal bit for bit: {same}", file=sys.stderr)
        names = [*upstream, *mine]
        results = {name: {"all": [], "wait": [], "overhead": [], "copy_gbs": []} for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                for compute in (0.0, args.compute_ms / 1e3):
                    if name in upstream:
                        upstream[name].set_epoch(r)
                        it = iter(upstream[name])
                    else:
                        it = mine[name].epoch(r)
                    total, waits, overheads, copies = pull(it, args.batches, compute, gpu)
                    del it
                    if compute:
                        results[name]["wait"] += waits[1:]  # the first batch has nothing to hide behind
                        results[name]["overhead"] += overheads[1:]
                    else:
                        results[name]["all"].append(args.batches / total)
                        results[name]["copy_gbs"] += [n / s / 1e9 for s, n in copies]
        ms = lambda v, q: sorted(v)[min(len(v) - 1, int(q * len(v)))] * 1e3  # noqa: E731
        where = "on the GPU" if gpu else "prepared"
        print(f"{'loader':<11} {'batches/s ' + where + ' (median)':>30} {'exposed wait p50 ms':>20} {'p95 ms':>8}"
              + (f" {'step overhead p50 ms':>21} {'p95 ms':>8} {'copy GB/s':>10}" if gpu else ""))
        for name, res in results.items():
            line = (f"{name:<11} {statistics.median(res['all']):>30.2f} {ms(res['wait'], 0.5):>20.2f}"
                    f" {ms(res['wait'], 0.95):>8.2f}")
            if gpu:
                copy = f"{statistics.median(res['copy_gbs']):.1f}" if res["copy_gbs"] else "-"
                line += f" {ms(res['overhead'], 0.5):>21.2f} {ms(res['overhead'], 0.95):>8.2f} {copy:>10}"
            print(line)
        for name in upstream:
            for own in mine:
                ratio = statistics.median(results[own]["all"]) / statistics.median(results[name]["all"])
                print(f"{own} / {name} batches per second {where}: {ratio:.2f}x (batch {args.batch_size}, hist 1, "
                      f"2 steps, {args.threads} read threads, prefetch {args.prefetch}, {args.device})")
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))


if __name__ == "__main__":
    main()
