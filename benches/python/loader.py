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
stream ahead of the model), against om4's GPU paths, all pinned and through ``om4.torch.to_device``:
``om4 host`` (prepared on the host, the prepared arrays copied), ``om4 device``
(``prepare="device"``: unique raw planes copied, prepared on the GPU), and ``om4 resident e1`` /
``e2`` (``resident=``: a fresh ``ResidentCopy``, then the epoch after a whole one went through it).
The consumer's compute is GPU work (``torch.cuda._sleep``) for --compute-ms, synchronized at the
end of each step as a loss read back would; each step's overhead is its wall time less that compute
(the primary figure, with the exposed wait in ``next``). Every timer starts after the iterator
exists and after one untimed batch, on both sides (upstream's ``iter()`` reads its first batch
itself). Also reported: MB copied to the device per batch (``DeviceBatch.copied_bytes``; upstream's
is not exposed), pinned buffers allocated during the timed batches, and, apart, the host-to-device
rate of the arrays om4 copies, from CUDA events. ``--levels 19 --steps 4`` are Samudra v2's
settings (77 + 3 channels); the default, 5 levels and 2 steps, 21 + 3. With ``--device cpu
--torch`` the om4 columns run through torch on the CPU (a dry run of the GPU code).

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
            prognostic_vars_key=f"thermo_dynamic_{args.levels}",
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
    config.steps = [args.steps]
    config.step_transition = []
    scope = MultitonScope()
    scope.__enter__()
    trainer = Trainer(config)
    trainer.init_data_loaders(cur_step=args.steps)
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


def om4_loader(root: Path, prognostic, boundary, args, **options):
    return om4.Loader(
        root / "OM4.zarr", prognostic=prognostic, boundary=boundary, time=args.train, hist=1, steps=args.steps,
        batch_size=args.batch_size, seed=15, prefetch=args.prefetch, max_concurrent_reads=args.threads, **options,
    )


class Consumer:
    """The training loop's side: compute of a given length on the device, a sync as a loss read
    back, and device-event timing (CUDA), or their CPU stand-ins."""

    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            torch.cuda.init()
            # torch.cuda._sleep spins for a number of clock cycles: calibrate cycles per second.
            torch.cuda._sleep(1_000_000)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.cuda._sleep(100_000_000)
            torch.cuda.synchronize()
            self.cycles_per_s = 100_000_000 / (time.perf_counter() - t0)

    def compute(self, seconds):
        if self.cuda:
            self.torch.cuda._sleep(int(seconds * self.cycles_per_s))
        else:
            time.sleep(seconds)

    def sync(self):
        """What a loss read back waits for: the model's stream."""
        if self.cuda:
            self.torch.cuda.current_stream().synchronize()

    def finish(self):
        if self.cuda:
            self.torch.cuda.synchronize()  # every stream: upstream and om4 prepare on their own

    def copy_rates(self, arrays):
        """GB/s of each array's host-to-device copy, timed by device events (wall time on a CPU)."""
        rates = []
        for a in arrays:
            if a.nbytes == 0:
                continue
            src = self.torch.from_numpy(a)
            if self.cuda:
                start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                start.record()
                src.to(self.device, non_blocking=True)
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                src.to(self.device, copy=True)
                seconds = time.perf_counter() - t0
            rates.append(a.nbytes / seconds / 1e9)
        return rates


def pull(make, batches, compute_s, consumer=None, loader=None):
    """Makes the iterator, takes one untimed batch, then times `batches` more: seconds for all
    (compute_s = 0: back to back), each batch's wait, each step's overhead (wall time less compute),
    bytes copied per batch, and pinned (staging and output) buffers allocated meanwhile."""
    it = make()
    warm = next(it)  # every loader starts reading when its iterator is made; this batch is not timed
    del warm
    allocations = lambda: loader.staging_allocations + loader.buffer_allocations if loader else 0  # noqa: E731
    before = allocations()
    waits, overheads, copied = [], [], []
    batch = None
    t_all = time.perf_counter()
    for _ in range(batches):
        t0 = time.perf_counter()
        new = next(it)
        waits.append(time.perf_counter() - t0)
        if hasattr(new, "copied_bytes"):
            copied.append(new.copied_bytes)
        batch = new  # as a training loop holds its batch until the next one: freeing it is not waiting
        if compute_s:
            if consumer is None:
                time.sleep(compute_s)
            else:
                consumer.compute(compute_s)
                consumer.sync()
                overheads.append(time.perf_counter() - t0 - compute_s)
    del batch
    if consumer is not None:
        consumer.finish()
    total = time.perf_counter() - t_all
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return total, waits, overheads, copied, allocations() - before


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--upstream-src", type=Path, required=True)
    ap.add_argument("--patch-store", action="store_true", help="make STORE_DIR readable by upstream's xarray code")
    ap.add_argument("--upstream-so", type=Path, help="upstream's own samudra_rust_loader extension (.so)")
    ap.add_argument("--train", default="1958-01-03..1958-04-18")
    ap.add_argument("--val", default="1958-04-23..1958-05-28")
    ap.add_argument("--levels", type=int, default=5, choices=[5, 19],
                    help="prognostic levels: 5 (thermo_dynamic_5, 21 channels) or 19 (v2's 77)")
    ap.add_argument("--steps", type=int, default=2, help="rollout steps (v2: 4)")
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
                    help="cuda: batches delivered on the GPU (upstream's CUDA prefetch; om4's GPU paths)")
    ap.add_argument("--torch", action="store_true", help="on the CPU, om4's GPU paths through torch CPU tensors too")
    args = ap.parse_args()
    if args.xarray and args.device != "cpu":
        ap.error("--xarray is a CPU column: run it with --device cpu")
    gpu = args.device == "cuda" or args.torch
    consumer = Consumer(args.device) if gpu else None
    if args.patch_store:
        patch_store(args.root / "OM4.zarr")
    with tempfile.TemporaryDirectory() as out:
        up, _scope = upstream_loader(args.upstream_src.resolve(), args.root.resolve(), args, Path(out))
        print("upstream reads through", sys.modules["samudra_rust_loader"].__file__, file=sys.stderr)
        from samudra.constants import build_om4_layout

        layout = build_om4_layout(prognostic_vars_key=f"thermo_dynamic_{args.levels}", boundary_vars_key="tau_hfds")
        channels = list(layout.prognostic_var_names), list(layout.boundary_var_names)
        pin = {"pin_memory": args.device} if args.device == "cuda" else {}
        reference = om4_loader(args.root, *channels, args)
        loaders, makers = {}, {}
        if not gpu:
            loaders["om4"] = reference
            makers["om4"] = lambda r: reference.epoch(r)
        else:
            import om4.torch

            to_device = om4.torch.to_device
            loaders["om4 host"] = om4_loader(args.root, *channels, args, **pin)
            loaders["om4 device"] = om4_loader(args.root, *channels, args, prepare="device", **pin)
            resident = om4_loader(args.root, *channels, args, prepare="device", resident=1 << 40, **pin)
            loaders["om4 resident e1"] = loaders["om4 resident e2"] = resident
            makers["om4 host"] = lambda r: to_device(loaders["om4 host"].epoch(r), args.device)
            makers["om4 device"] = lambda r: to_device(loaders["om4 device"].epoch(r), args.device)

            def resident_epoch(r, warm):
                copy = om4.torch.ResidentCopy(resident, args.device)  # empty: clears the loader's record
                if warm:  # a whole epoch first: the timed one is the copy's second
                    for _ in to_device(resident.epoch(1000 + r), args.device, resident=copy):
                        pass
                return to_device(resident.epoch(r), args.device, resident=copy)

            makers["om4 resident e1"] = lambda r: resident_epoch(r, False)
            makers["om4 resident e2"] = lambda r: resident_epoch(r, True)
        # Upstream's first batch of an epoch against om4's host path, before anything is timed: the
        # same shapes, and (same seed, same sampler) the same values.
        upstream = {"upstream": up}
        if args.xarray:
            upstream["xarray"], _xr_scope = upstream_loader(
                args.upstream_src.resolve(), args.root.resolve(), args, Path(out), loading="cpu"
            )
        b = next(iter(reference.epoch(0)))
        for name, loader in upstream.items():
            loader.set_epoch(0)
            a = next(iter(loader))
            for k, step in enumerate(b.steps):
                for i, field in enumerate(["prognostic", "boundary", "label"]):
                    theirs, ours_ = a[k][i].cpu().numpy(), getattr(step, field)
                    assert theirs.shape == ours_.shape, (name, k, field, theirs.shape, ours_.shape)
                    same = theirs.tobytes() == ours_.tobytes()
                    print(f"{name} step {k} {field}: equal bit for bit: {same}", file=sys.stderr)
        del b

        def upstream_epoch(name, r):
            upstream[name].set_epoch(r)
            return iter(upstream[name])

        for name in upstream:
            makers[name] = lambda r, name=name: upstream_epoch(name, r)
        names = [*upstream, *loaders]
        results = {name: {"all": [], "wait": [], "overhead": [], "copied": [], "allocations": []} for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                for compute in (0.0, args.compute_ms / 1e3):
                    total, waits, overheads, copied, allocations = pull(
                        lambda: makers[name](r), args.batches, compute, consumer, loaders.get(name)
                    )
                    if compute:
                        results[name]["wait"] += waits
                        results[name]["overhead"] += overheads
                    else:
                        results[name]["all"].append(args.batches / total)
                    results[name]["copied"] += copied
                    results[name]["allocations"].append(allocations)
        # The host-to-device rate of what om4 copies (prepared arrays; raw planes), by device events.
        rates = {}
        if consumer is not None:
            host = next(iter(loaders["om4 host"].epoch(0)))
            rates["om4 host"] = consumer.copy_rates([a for s in host.steps for a in (s.model_input, s.label)])
            raw = next(iter(loaders["om4 device"].epoch(0)))
            rates["om4 device"] = consumer.copy_rates(list(raw.groups))
            del host, raw
        ms = lambda v, q: sorted(v)[min(len(v) - 1, int(q * len(v)))] * 1e3 if v else float("nan")  # noqa: E731
        where = f"on the {args.device}" if gpu else "prepared"
        print(f"{'loader':<16} {'batches/s ' + where:>22} {'wait p50 ms':>12} {'p95 ms':>8}"
              + (f" {'overhead p50 ms':>16} {'p95 ms':>8} {'MB copied':>10} {'copy GB/s':>10} {'allocs':>7}"
                 if gpu else ""))
        for name, res in results.items():
            line = (f"{name:<16} {statistics.median(res['all']):>22.2f} {ms(res['wait'], 0.5):>12.2f}"
                    f" {ms(res['wait'], 0.95):>8.2f}")
            if gpu:
                mb = f"{statistics.median(res['copied']) / 1e6:.1f}" if res["copied"] else "-"
                rate = f"{statistics.median(rates[name]):.1f}" if rates.get(name) else "-"
                allocs = sum(res["allocations"]) if name in loaders else "-"
                line += (f" {ms(res['overhead'], 0.5):>16.2f} {ms(res['overhead'], 0.95):>8.2f} {mb:>10}"
                         f" {rate:>10} {allocs:>7}")
            print(line)
        for name in upstream:
            for own in loaders:
                ratio = statistics.median(results[own]["all"]) / statistics.median(results[name]["all"])
                print(f"{own} / {name} batches per second {where}: {ratio:.2f}x (batch {args.batch_size}, hist 1, "
                      f"{args.steps} steps, {args.levels} levels, {args.threads} read threads, prefetch {args.prefetch})")
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results,
                                             "copy_gbs": rates}))


if __name__ == "__main__":
    main()
