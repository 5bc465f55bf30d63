"""om4 against the Python Zarr readers: raw windows on the same windows in interleaved rounds (with CPU
seconds per GB and peak RSS per reader, and open + first window in a new process), and a Samudra
training batch on the host against a restatement of Samudra's CPU loader and TensorStore + dedup.

Every reader fills one reused (steps, channels, y, x) float32 buffer per window, with the channels
in om4's order (`om4 inspect --json`). Before any timing, each reader's first window is compared
(NaN-aware) with the planes om4 wrote for it (`om4 bench read --check-out`); a reader that differs
is reported and not timed. Run through run.sh, which builds om4 and the pinned environment.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def store_layout(om4, store):
    info = json.loads(subprocess.run([om4, "inspect", store, "--json"], check=True, capture_output=True, text=True).stdout)
    return info


def channel_map(store, channels):
    """channel -> (array, level or None), from what the store holds."""
    names = set(os.listdir(store))
    out = []
    for c in channels:
        if c in names:
            out.append((c, None))
        else:
            var, k = c.rsplit("_", 1)
            out.append((var, int(k)))
    return out


def zarr_format(store):
    return 3 if os.path.exists(os.path.join(store, "zarr.json")) else 2


# ----------------------------------------------------------------------------------- readers
def reader_xarray(store, cmap, steps):
    import xarray as xr

    consolidated = os.path.exists(os.path.join(store, ".zmetadata"))
    ds = xr.open_zarr(store, consolidated=consolidated, chunks=None, decode_times=False, mask_and_scale=False)

    def read(t0, out):
        for i, (a, k) in enumerate(cmap):
            sel = {"time": slice(t0, t0 + steps)}
            if k is not None:
                sel[ds[a].dims[1]] = k
            out[:, i] = ds[a].isel(sel).values

    return read


def reader_zarr(store, cmap, steps, zarrs_pipeline=False):
    import zarr

    if zarrs_pipeline:
        import zarrs  # noqa: F401  (registers the pipeline)

        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    else:
        zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"})
    g = zarr.open_group(store, mode="r")
    arrays = {a: g[a] for a, _ in cmap}

    def read(t0, out):
        for i, (a, k) in enumerate(cmap):
            arr = arrays[a]
            out[:, i] = arr[t0 : t0 + steps] if k is None else arr[t0 : t0 + steps, k]

    return read


def reader_tensorstore(store, cmap, steps):
    import tensorstore as ts

    driver = "zarr3" if zarr_format(store) == 3 else "zarr"
    ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    arrays = {
        a: ts.open({"driver": driver, "kvstore": {"driver": "file", "path": os.path.join(store, a)}}, read=True, context=ctx).result()
        for a, _ in cmap
    }
    views = {}

    def read(t0, out):
        key = out.ctypes.data
        if key not in views:  # wrap the caller's buffer once: TensorStore decodes into it
            views[key] = [ts.array(out[:, i], copy=False, write=True) for i in range(len(cmap))]
        futures = []
        for view, (a, k) in zip(views[key], cmap):
            src = arrays[a][t0 : t0 + steps] if k is None else arrays[a][t0 : t0 + steps, k]
            futures.append(view.write(src))
        for f in futures:
            f.result()

    return read


def reader_numcodecs(store, cmap, steps):
    """The least a Python program can do: each plane's chunk file read whole and blosc-decoded
    (numcodecs' C-Blosc, AVX2 dispatch, GIL released) or read straight into its slice of the
    caller's buffer, on one thread per core, with no Zarr library at all (v2 stores with one
    plane per chunk only; other stores report it as failed)."""
    from concurrent.futures import ThreadPoolExecutor

    from numcodecs import blosc

    blosc.use_threads = False
    metas = {}
    for a, _ in cmap:
        meta = json.load(open(os.path.join(store, a, ".zarray")))
        if tuple(meta["chunks"][-2:]) != tuple(meta["shape"][-2:]) or any(c != 1 for c in meta["chunks"][:-2]):
            raise ValueError("needs one plane per chunk")
        comp = meta.get("compressor")
        if comp is not None and comp["id"] != "blosc":
            raise ValueError(f"compressor {comp['id']}")
        metas[a] = (meta.get("dimension_separator", "."), comp is not None)
    pool = ThreadPoolExecutor(os.cpu_count())

    def one(job):
        path, compressed, dst = job
        if compressed:
            with open(path, "rb") as f:
                blosc.decompress(f.read(), dst)
        else:
            with open(path, "rb", buffering=0) as f:
                f.readinto(memoryview(dst).cast("B"))

    def read(t0, out):
        jobs = []
        for i, (a, k) in enumerate(cmap):
            sep, compressed = metas[a]
            for s in range(steps):
                key = sep.join(map(str, [t0 + s] + ([k] if k is not None else []) + [0, 0]))
                jobs.append((os.path.join(store, a, key), compressed, out[s, i]))
        list(pool.map(one, jobs, chunksize=16))

    return read


READERS = {
    "xarray_isel_values": reader_xarray,
    "zarr_python": reader_zarr,
    "zarr_python+zarrs": lambda s, c, w: reader_zarr(s, c, w, zarrs_pipeline=True),
    "tensorstore_into_buffer": reader_tensorstore,
    "numcodecs_threads": reader_numcodecs,
}


# ------------------------------------------------------------------------------------- om4
def om4_run(om4, store, starts, steps, threads, check_out=None, repeats=1, extra=()):
    cmd = [om4, "bench", "read", store, "--steps", str(steps), "--starts", ",".join(map(str, starts)), "--repeats", str(repeats), "--json", *extra]
    if threads:
        cmd += ["--threads", str(threads)]
    if check_out:
        cmd += ["--check-out", check_out]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def om4_pass(om4, store, starts, steps, threads, check_out=None):
    return om4_run(om4, store, starts, steps, threads, check_out)["gb_per_s_best"]


COLD = """
import json, sys, time
import numpy as np
sys.path.insert(0, {here!r})
import bench
t0 = time.perf_counter()
read = bench.READERS[{name!r}]({store!r}, {cmap!r}, {steps})
buf = np.empty({shape!r}, dtype=np.float32)
read({start}, buf)
print(time.perf_counter() - t0)
"""


USAGE = """
import json, resource, sys
import numpy as np
sys.path.insert(0, {here!r})
import bench
read = bench.READERS[{name!r}]({store!r}, {cmap!r}, {steps})
buf = np.empty({shape!r}, dtype=np.float32)
for s in {starts!r}:
    read(s, buf)
r0 = resource.getrusage(resource.RUSAGE_SELF)
for s in {starts!r}:
    read(s, buf)
r1 = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the (forked) parent across exec.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"cpu_s": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, "peak_rss_bytes": hwm * 1024}}))
"""


def usage(args, store, cmap, steps, shape, starts, readers, window_bytes):
    """CPU seconds per GB read (all threads, after one warm pass) and peak RSS of the whole process,
    each reader alone in a new process (om4 through its own /proc counters)."""
    gb = window_bytes * len(starts) / 1e9
    r = om4_run(args.om4, store, starts, steps, args.threads)
    out = {"om4": {"cpu_s_per_gb": r["cpu_seconds_per_gb"], "peak_rss_mb": r["peak_rss_bytes"] / 1e6}}
    here = os.path.dirname(os.path.abspath(__file__))
    for name in readers:
        code = USAGE.format(here=here, name=name, store=store, cmap=cmap, steps=steps, shape=shape, starts=starts)
        u = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
        out[name] = {"cpu_s_per_gb": u["cpu_s"] / gb, "peak_rss_mb": u["peak_rss_bytes"] / 1e6}
    return out


def open_first_window(args, store, cmap, steps, shape, start, readers):
    """Median seconds, in a new process each time, to open the store and read the first window.
    Python readers pay their library imports inside the timing; interpreter start is excluded."""
    out = {}
    runs = [om4_run(args.om4, store, [start], steps, args.threads)["open_plus_first_window_s"] for _ in range(args.open_rounds)]
    out["om4"] = statistics.median(runs)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in readers:
        code = COLD.format(here=here, name=name, store=store, cmap=cmap, steps=steps, shape=shape, start=start)
        runs = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
                for _ in range(args.open_rounds)]
        out[name] = statistics.median(runs)
    return out


def bench_store(args, store):
    info = store_layout(args.om4, store)
    channels = info["channels"]
    cmap = channel_map(store, channels)
    ny, nx = info["grid"]["y"], info["grid"]["x"]
    steps = args.steps
    t = info["time"]["steps"]
    rng = random.Random(args.seed)
    starts = [rng.randrange(0, t - steps + 1) for _ in range(args.windows)]
    window_bytes = steps * len(channels) * ny * nx * 4
    ref_path = os.path.join(args.workdir, "om4_first_window.npy")
    om4_pass(args.om4, store, starts[:1], steps, args.threads, check_out=ref_path)
    reference = np.load(ref_path)
    buf = np.empty((steps, len(channels), ny, nx), dtype=np.float32)
    readers, status = {}, {}
    for name in args.readers:
        try:
            read = READERS[name](store, cmap, steps)
            buf.fill(-1.0)
            read(starts[0], buf)
            if np.array_equal(buf, reference, equal_nan=True):
                readers[name] = read
                status[name] = "equal to om4"
                for s in starts:  # warm-up pass
                    read(s, buf)
            else:
                status[name] = "DIFFERS from om4: not timed"
        except Exception as e:  # a reader that cannot read this store is reported, not fatal
            status[name] = f"failed: {type(e).__name__}: {e}"
    rounds = {"om4": []} | {n: [] for n in readers}
    loads = []
    for r in range(args.rounds):
        order = ["om4"] + list(readers)
        order = order[r % len(order):] + order[: r % len(order)]
        for name in order:
            loads.append(loadavg())
            if name == "om4":
                rounds["om4"].append(om4_pass(args.om4, store, starts, steps, args.threads))
                continue
            t0 = time.perf_counter()
            for s in starts:
                readers[name](s, buf)
            rounds[name].append(window_bytes * len(starts) / (time.perf_counter() - t0) / 1e9)
    cold = open_first_window(args, store, cmap, steps, list(buf.shape), starts[0], list(readers)) if args.open_rounds else {}
    use = usage(args, store, cmap, steps, list(buf.shape), starts, list(readers), window_bytes) if args.usage else {}
    try:  # the composed read + decode reference (direct-path, unsharded stores only)
        reference = om4_run(args.om4, store, starts, steps, args.threads, repeats=3, extra=["--reference"])["read_decode_reference"]
    except subprocess.CalledProcessError as e:
        reference = {"error": e.stderr.strip().splitlines()[-1] if e.stderr else str(e)}
    result = {"store": store, "codecs": info["codecs"], "open_plus_first_window_s": cold, "om4_read_decode_reference": reference, "channels": len(channels), "grid": [ny, nx], "steps": steps,
              "windows": len(starts), "rounds": args.rounds, "load_1min": {"min": min(loads), "max": max(loads)},
              "status": status, "readers": {}}
    for name, gbs in rounds.items():
        ratios = [o / g for o, g in zip(rounds["om4"], gbs)]
        result["readers"][name] = {"gb_per_s_best": max(gbs), "gb_per_s_median": statistics.median(gbs),
                                   "om4_ratio_per_round": ratios} | use.get(name, {})
    return result


# ------------------------------------------------------------------- Samudra batch workload
def samudra_cpu_batch(ds, prog, bound, stats, sample_starts, hist, steps):
    """A restatement of Samudra's CPU loader path for one batch: per sample and rollout step,
    per-plane xarray loads of the input, label and boundary times (no dedup), then numpy
    normalization (`nan_to_num((x - mean)/std)`), land masking and time-major stacking."""
    (mp, sp, kp), (mb, sb, kb) = stats
    states = hist + 1

    def load(times, chans):
        return np.stack([np.stack([ds[c].isel(time=t).values for c in chans]) for t in times])

    def prep(x, mean, std, wet):
        y = np.nan_to_num((x - mean) / std, nan=0.0)
        return np.where(wet, y, np.float32(0.0)).reshape(-1, *x.shape[2:])

    out = []
    for k in range(steps):
        inputs, labels = [], []
        for i in sample_starts:
            t_in = [i + k * states + j for j in range(states)]
            t_lab = [i + (k + 1) * states + j for j in range(states)]
            x_p = prep(load(t_in, prog), mp, sp, kp)
            x_b = prep(load(t_in, bound), mb, sb, kb)
            inputs.append(np.concatenate([x_p, x_b]))
            labels.append(prep(load(t_lab, prog), mp, sp, kp))
        out.append((np.stack(inputs), np.stack(labels)))
    return out


class TensorStoreDedupBatch:
    """The best Python we could write for the same batch: every unique (time, channel) plane read
    once with TensorStore straight into reused group buffers (consecutive times as one read),
    normalized and masked in place with numpy, then copied block by block into reused outputs."""

    def __init__(self, store, prog, bound, stats, hist, steps, kvstore=None, context=None):
        import tensorstore as ts

        self.ts = ts
        ctx = ts.Context(context or {"cache_pool": {"total_bytes_limit": 0}})
        kvstore = kvstore or (lambda c: {"driver": "file", "path": os.path.join(store, c)})
        driver = "zarr3" if zarr_format(store) == 3 else "zarr"
        open_ = lambda c: ts.open({"driver": driver, "kvstore": kvstore(c)}, read=True, context=ctx).result()
        self.sources = [([open_(c) for c in prog], stats[0]), ([open_(c) for c in bound], stats[1])]
        self.states, self.steps = hist + 1, steps
        self.buffers = {}

    def _buffer(self, key, shape):
        buf = self.buffers.get(key)
        if buf is None or buf.shape != shape:
            buf = self.buffers[key] = np.empty(shape, dtype=np.float32)
        return buf

    def _group(self, src, times):
        arrays, (mean, std, wet) = self.sources[src]
        ny, nx = arrays[0].shape[1:]
        buf = self._buffer(("group", src), (len(times), len(arrays), ny, nx))
        runs, i = [], 0
        while i < len(times):
            j = i
            while j + 1 < len(times) and times[j + 1] == times[j] + 1:
                j += 1
            runs.append((i, times[i], j - i + 1))
            i = j + 1
        futures = [self.ts.array(buf[i0:i0 + n, c], copy=False, write=True).write(arr[t0:t0 + n])
                   for c, arr in enumerate(arrays) for i0, t0, n in runs]
        for f in futures:
            f.result()
        buf -= mean
        buf /= std
        np.nan_to_num(buf, copy=False, nan=0.0)
        np.copyto(buf, np.float32(0.0), where=~wet)
        return buf, {t: r for r, t in enumerate(times)}

    def __call__(self, sample_starts):
        S = self.states
        t_in = lambda i, k: [i + k * S + j for j in range(S)]
        t_lab = lambda i, k: [i + (k + 1) * S + j for j in range(S)]
        prog_times = sorted({t for i in sample_starts for k in range(self.steps) for t in t_in(i, k) + t_lab(i, k)})
        bound_times = sorted({t for i in sample_starts for k in range(self.steps) for t in t_in(i, k)})
        (gp, rp), (gb, rb) = self._group(0, prog_times), self._group(1, bound_times)
        cp, cb, (ny, nx) = gp.shape[1], gb.shape[1], gp.shape[2:]
        out = []
        for k in range(self.steps):
            inp = self._buffer(("input", k), (len(sample_starts), S * (cp + cb), ny, nx))
            lab = self._buffer(("label", k), (len(sample_starts), S * cp, ny, nx))
            for b, i in enumerate(sample_starts):
                for j, t in enumerate(t_in(i, k)):
                    inp[b, j * cp:(j + 1) * cp] = gp[rp[t]]
                    inp[b, S * cp + j * cb:S * cp + (j + 1) * cb] = gb[rb[t]]
                for j, t in enumerate(t_lab(i, k)):
                    lab[b, j * cp:(j + 1) * cp] = gp[rp[t]]
            out.append((inp, lab))
        return out


def bench_batch(args, store, batch_size):
    import xarray as xr

    work = os.path.join(args.workdir, "om4_batch")
    levels, hist, steps = args.levels, 1, 4
    cmd = [args.om4, "bench", "batch", store, "--levels", str(levels), "--history", str(hist), "--steps", str(steps),
           "--batch-size", str(batch_size), "--batches", str(args.batches), "--repeats", "2", "--check-out", work, "--json"]
    om4 = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    batches = json.load(open(os.path.join(work, "samples.json")))["batches"]
    names = [f"{v}_{k}" for v in ("uo", "vo", "thetao", "so") for k in range(levels)] + ["zos"]
    bound = ["tauuo", "tauvo", "hfds"]
    root = os.path.dirname(store)
    open_ = lambda p: xr.open_zarr(p, consolidated=os.path.exists(os.path.join(p, ".zmetadata")), chunks=None,
                                   decode_times=False, mask_and_scale=False)
    ds, means, stds = open_(store), open_(os.path.join(root, "OM4_means.zarr")), open_(os.path.join(root, "OM4_stds.zarr"))

    def stats(chans):
        mean = np.array([means[c].values for c in chans], dtype=np.float32)[None, :, None, None]
        std = np.array([stds[c].values for c in chans], dtype=np.float32)[None, :, None, None]
        level = lambda c: int(c.rsplit("_", 1)[1]) if c.rsplit("_", 1)[-1].isdigit() else 0
        wet = np.stack([ds[f"mask_{level(c)}"].values.astype(bool) for c in chans])[None]
        return mean, std, wet

    st = (stats(names), stats(bound))

    def equal_to_om4(batch):
        return all(
            np.array_equal(inp, np.load(os.path.join(work, f"step{k}_input.npy")), equal_nan=True)
            and np.array_equal(lab, np.load(os.path.join(work, f"step{k}_label.npy")), equal_nan=True)
            for k, (inp, lab) in enumerate(batch)
        )

    def median_ms(f):
        times = []
        for b in batches:
            t0 = time.perf_counter()
            f(b)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    restated = lambda b: samudra_cpu_batch(ds, names, bound, st, b, hist, steps)
    dedup = TensorStoreDedupBatch(store, names, bound, st, hist, steps)
    equal = {"samudra_cpu_restatement": equal_to_om4(restated(batches[0])), "tensorstore_dedup": equal_to_om4(dedup(batches[0]))}
    for b in batches:  # warm-up, as om4 bench batch does one untimed pass
        dedup(b)
    py, ts_ms = median_ms(restated), median_ms(dedup)
    o = om4["ms_per_batch_median"]
    return {"store": store, "batch_size": batch_size, "batches": len(batches), "hist": hist, "steps": steps,
            "om4_ms_per_batch_median": o, "samudra_cpu_restatement_ms_per_batch_median": py,
            "tensorstore_dedup_ms_per_batch_median": ts_ms, "equal_to_om4": equal,
            "om4_speedup_vs_restatement": py / o, "om4_speedup_vs_tensorstore_dedup": ts_ms / o,
            "om4_open_plus_first_batch_s": om4.get("open_plus_first_batch_s"),
            "planes_requested": om4["planes_requested_last"], "planes_unique": om4["planes_unique_last"]}


def plot(results, batch_results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if batch_results else 1
    fig, axes = plt.subplots(1, panels, figsize=(9 + 4 * (panels - 1), 4.5), width_ratios=[9, 4][:panels], squeeze=False)
    ax = axes[0][0]
    names = sorted({n for r in results for n in r["readers"]}, key=lambda n: (n != "om4", n))
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        xs, ys = [], []
        for i, r in enumerate(results):
            if name in r["readers"]:
                xs.append(i + j * width)
                ys.append(r["readers"][name]["gb_per_s_median"])
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(results))])
    ax.set_xticklabels([f"{os.path.basename(os.path.dirname(r['store']))}\n{r['codecs'][0] if r['codecs'] else ''}" for r in results], fontsize=8)
    ax.set_ylabel("GB/s (median of rounds, decompressed)")
    ax.set_title("Raw windows (6 steps × all channels) into one reused buffer", fontsize=10)
    ax.legend(fontsize=8)
    if batch_results:
        ax = axes[0][1]
        series = [("om4", "om4_ms_per_batch_median"), ("TensorStore + dedup", "tensorstore_dedup_ms_per_batch_median"),
                  ("Samudra CPU restatement", "samudra_cpu_restatement_ms_per_batch_median")]
        width = 0.8 / len(series)
        for j, (label, key) in enumerate(series):
            ax.bar([i + j * width for i in range(len(batch_results))], [r[key] for r in batch_results], width, label=label)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(batch_results))])
        ax.set_xticklabels([f"{os.path.basename(os.path.dirname(r['store']))}\nbatch {r['batch_size']}" for r in batch_results], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms per batch (median, log scale)")
        ax.set_title("Samudra batch on the host (hist 1, steps 4)", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


READER_COLUMNS = [("numcodecs_threads", "file read + numcodecs, no Zarr"), ("tensorstore_into_buffer", "TensorStore into buffer"), ("zarr_python+zarrs", "zarr-python + zarrs"),
                  ("zarr_python", "zarr-python"), ("xarray_isel_values", "xarray `.isel().values`")]


def markdown(results, batch_results):
    """The result tables, as docs/benchmarks.md shows them between its `peers:begin/end` markers."""
    name = lambda r: os.path.basename(os.path.dirname(r["store"]))
    out = ["Median GB/s of decompressed planes over the rounds; in brackets om4's ratio to that reader per round.", "",
           "| store | om4 | " + " | ".join(t for _, t in READER_COLUMNS) + " |", "|---" * (2 + len(READER_COLUMNS)) + "|"]
    for r in results:
        row = [name(r), f"{r['readers']['om4']['gb_per_s_median']:.2f}"]
        for key, _ in READER_COLUMNS:
            v = r["readers"].get(key)
            row.append("—" if v is None else f"{v['gb_per_s_median']:.2f} ({', '.join(f'{x:.2f}' for x in v['om4_ratio_per_round'])}×)")
        out.append("| " + " | ".join(row) + " |")
    out += ["", "om4 against the composed read + decode reference (`om4 bench read --reference`: the same chunk files read whole,",
            "then decoded into the window, each phase on all cores and timed alone; best of 3):", "",
            "| store | reference GB/s | read s + decode s per pass over the windows | om4 best / reference |", "|---|---|---|---|"]
    for r in results:
        ref = r.get("om4_read_decode_reference") or {}
        if "gb_per_s" in ref:
            out.append(f"| {name(r)} | {ref['gb_per_s']:.2f} | {ref['read_s']:.3f} + {ref['decode_s']:.3f} | {ref['om4_best_over_reference']:.2f} |")
        else:
            out.append(f"| {name(r)} | — ({ref.get('error', 'not measured')}) | | |")
    out += ["", "CPU seconds per GB read (all threads) / peak RSS in MB, each reader alone in a new process:", "",
            "| store | om4 | " + " | ".join(t for _, t in READER_COLUMNS) + " |", "|---" * (2 + len(READER_COLUMNS)) + "|"]
    for r in results:
        cell = lambda v: "—" if v is None or "cpu_s_per_gb" not in v else f"{v['cpu_s_per_gb']:.2f} / {v['peak_rss_mb']:.0f}"
        out.append("| " + " | ".join([name(r), cell(r["readers"]["om4"])] + [cell(r["readers"].get(k)) for k, _ in READER_COLUMNS]) + " |")
    out += ["", "Open the store and read the first window, in a new process (median seconds):", "",
            "| store | om4 | " + " | ".join(t for _, t in READER_COLUMNS) + " |", "|---" * (2 + len(READER_COLUMNS)) + "|"]
    for r in results:
        o = r["open_plus_first_window_s"]
        out.append("| " + " | ".join([name(r), f"{o.get('om4', float('nan')):.3f}"] +
                                     [f"{o[k]:.3f}" if k in o else "—" for k, _ in READER_COLUMNS]) + " |")
    if batch_results:
        out += ["", "Samudra batch on the host (median ms per batch; first batch of each path equal to om4's bit for bit):", "",
                "| store | batch | planes requested / read | om4 | TensorStore + dedup | Samudra CPU path (restated) | om4 open + first batch |",
                "|---|---|---|---|---|---|---|"]
        for r in batch_results:
            ok = all(r["equal_to_om4"].values())
            out.append(f"| {name(r)} | {r['batch_size']} | {r['planes_requested']} / {r['planes_unique']} | "
                       f"{r['om4_ms_per_batch_median']:.0f} | {r['tensorstore_dedup_ms_per_batch_median']:.0f} "
                       f"({r['om4_speedup_vs_tensorstore_dedup']:.1f}×) | {r['samudra_cpu_restatement_ms_per_batch_median']:.0f} "
                       f"({r['om4_speedup_vs_restatement']:.1f}×) | {r['om4_open_plus_first_batch_s']:.2f} s |"
                       + ("" if ok else " NOT EQUAL"))
    loads = [x for r in results for x in (r["load_1min"]["min"], r["load_1min"]["max"])]
    out += ["", f"Load average (1 min) during the raw-window rounds: {min(loads):.2f}–{max(loads):.2f}."]
    return "\n".join(out) + "\n"


def write_tables(path, text):
    """Replaces the text between the `<!-- peers:begin -->` and `<!-- peers:end -->` markers."""
    doc = open(path).read()
    begin, end = "<!-- peers:begin -->\n", "<!-- peers:end -->"
    i, j = doc.index(begin) + len(begin), doc.index(end)
    with open(path, "w") as f:
        f.write(doc[:i] + text + doc[j:])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--om4")
    p.add_argument("--store", action="append", default=[])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--open-rounds", type=int, default=5, help="new processes per reader for open + first window (0: skip)")
    p.add_argument("--no-usage", dest="usage", action="store_false", help="skip the CPU s/GB and peak-RSS runs")
    p.add_argument("--batch-store", action="append", default=[], help="also run the Samudra-batch workload on this store")
    p.add_argument("--levels", type=int, default=19)
    p.add_argument("--batch-sizes", default="1,4")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--readers", default=",".join(READERS))
    p.add_argument("--workdir", default="/tmp")
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    p.add_argument("--tables", help="rewrite the tables between the peers markers of this markdown file")
    p.add_argument("--from-json", action="store_true", help="only redraw the plot and tables from --out")
    args = p.parse_args()
    args.readers = [r for r in args.readers.split(",") if r]
    if args.from_json:
        saved = json.load(open(args.out))
        results, batch_results = (saved["raw_windows"], saved["samudra_batch"]) if isinstance(saved, dict) else (saved, [])
        if args.plot:
            plot(results, batch_results, args.plot)
        if args.tables:
            write_tables(args.tables, markdown(results, batch_results))
        return
    results = []
    for s in args.store:
        r = bench_store(args, s)
        print(json.dumps(r), flush=True)
        results.append(r)
    batch_results = []
    for s in args.batch_store:
        for b in map(int, args.batch_sizes.split(",")):
            r = bench_batch(args, s, b)
            print(json.dumps(r), flush=True)
            batch_results.append(r)
    with open(args.out, "w") as f:
        json.dump({"raw_windows": results, "samudra_batch": batch_results} if batch_results else results, f, indent=1)
    if args.plot:
        plot(results, batch_results, args.plot)
    if args.tables:
        write_tables(args.tables, markdown(results, batch_results))


if __name__ == "__main__":
    sys.exit(main())
