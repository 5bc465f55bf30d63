"""om4 against TensorStore's S3 driver and zarr-python (obstore) on the same S3 bucket, with
per-request latency added: raw windows and Samudra batches.

The stores are synthesized locally (`om4 synth`) and served on 127.0.0.1 either by
benches/peers/s3-server (`--server-binary`: the stores' folder served as it is, each request
answered 0, 10 or 50 ms after it arrived; one server per latency) or by another S3 server
(`--endpoint`, e.g. scripts/s3-server.sh's moto: the stores uploaded, and one
benches/peers/latency_proxy.rs per latency in front). Every reader fills reused
(steps, channels, y, x) float32 buffers with the channels in om4's order, one window at a time or
`--in-flight` windows at once (each into its own buffer, as a loader's prefetch overlaps batches);
each reader's first window is compared with om4's (`om4 bench read --check-out`) before any
timing, and a reader that differs is reported and not timed. Rounds interleave the readers. om4
reports its requests per open and per window. Before any server starts, om4 reads the same
windows from the local copy: each row's ceiling (`ceiling`). Run through s3.sh.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import collections
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the local-file harness: channel maps, the TensorStore batch reader)

BUCKET = "om4-bench"


# ------------------------------------------------------------------------------ server, proxy
def make_bucket(endpoint):
    """A public bucket (anonymous GET and LIST), as Samudra's data is published."""
    if KEY is not None:  # a signed server's bucket is made by whoever started it
        return
    req = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT")
    try:
        urllib.request.urlopen(req)
    except urllib.error.HTTPError as e:
        if e.code != 409:  # already there
            raise
    # a server without bucket policies serves anonymous reads without one
    policy = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*",
                         "Action": ["s3:GetObject", "s3:ListBucket"],
                         "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]}).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}?policy", data=policy, method="PUT",
                                                      headers={"Content-Type": "application/json"}))
    except urllib.error.HTTPError as e:
        print(f"bucket policy not set ({e.code}); reads must be allowed without it", file=sys.stderr)


def upload(endpoint, local_dir, prefix):
    """Every file under local_dir to s3://BUCKET/prefix/, 16 at a time; returns the object count."""
    import obstore
    from obstore.store import S3Store

    key = KEY or ("x", "x")
    store = S3Store(BUCKET, endpoint=endpoint, region="us-east-1", access_key_id=key[0], secret_access_key=key[1],
                    client_options={"allow_http": True})
    files = [os.path.join(d, f) for d, _, fs in os.walk(local_dir) for f in fs if not f.startswith(".done")]

    def put(path):
        with open(path, "rb") as f:
            obstore.put(store, f"{prefix}/{os.path.relpath(path, local_dir)}", f.read())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, files))
    return len(files)


class Endpoint:
    """A process that prints `port PORT` once it listens: benches/peers/latency_proxy.rs in front
    of a server (every request `latency_ms` later), or benches/peers/s3-server itself."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("port "), line
        self.url = f"http://127.0.0.1:{line.split()[1]}"

    @classmethod
    def latency(cls, binary, upstream, latency_ms):
        return cls([binary, str(urllib.parse.urlparse(upstream).port), str(latency_ms)])

    @classmethod
    def server(cls, binary, root, latency_ms):
        key = [] if KEY is None else ["--key", ":".join(KEY)]
        return cls([binary, root, "--delay-ms", str(latency_ms), *key])

    def stop(self):
        self.proc.kill()
        self.proc.wait()


# ------------------------------------------------------------------------------------ readers
# Credentials: None (anonymous, a public bucket) or (key id, secret), from --key.
KEY = None


def kv_tensorstore(endpoint, key):
    creds = {"type": "anonymous"} if KEY is None else {"type": "environment"}
    return {"driver": "s3", "bucket": BUCKET, "path": key + "/", "endpoint": endpoint, "aws_region": "us-east-1",
            "aws_credentials": creds}


def obstore_s3(endpoint, prefix=None):
    from obstore.store import S3Store

    auth = dict(skip_signature=True) if KEY is None else dict(access_key_id=KEY[0], secret_access_key=KEY[1])
    return S3Store(BUCKET, prefix=prefix, endpoint=endpoint, region="us-east-1", client_options={"allow_http": True}, **auth)


def om4_remote(endpoint):
    """om4's flags and environment for the bucket."""
    env = dict(os.environ)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        env.pop(k, None)
    if KEY is None:
        return ["--endpoint-url", endpoint, "--anon"], env
    return ["--endpoint-url", endpoint], env | {"AWS_ACCESS_KEY_ID": KEY[0], "AWS_SECRET_ACCESS_KEY": KEY[1]}


def ts_context(concurrency):
    return {"cache_pool": {"total_bytes_limit": 0}, "s3_request_concurrency": {"limit": concurrency}}


def reader_tensorstore(endpoint, prefix, local, cmap, steps, concurrency):
    import tensorstore as ts

    driver = "zarr3" if bench.zarr_format(local) == 3 else "zarr"
    ctx = ts.Context(ts_context(concurrency))
    arrays = {a: ts.open({"driver": driver, "kvstore": kv_tensorstore(endpoint, f"{prefix}/{a}")}, read=True, context=ctx).result()
              for a, _ in cmap}
    views = {}

    def start(t0, out):
        key = out.ctypes.data
        if key not in views:
            views[key] = [ts.array(out[:, i], copy=False, write=True) for i in range(len(cmap))]
        futures = []
        for view, (a, k) in zip(views[key], cmap):
            src = arrays[a][t0:t0 + steps] if k is None else arrays[a][t0:t0 + steps, k]
            futures.append(view.write(src))
        return lambda: [f.result() for f in futures]

    return start


def reader_zarr_obstore(endpoint, prefix, local, cmap, steps, concurrency):
    """zarr-python 3 over obstore's S3 client, the channels read one after another (each read's
    chunks fetched concurrently by zarr-python, `async.concurrency` at a time)."""
    import zarr
    from zarr.storage import ObjectStore

    zarr.config.set({"async.concurrency": concurrency,
                     "codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"})
    g = zarr.open_group(ObjectStore(obstore_s3(endpoint, prefix), read_only=True), mode="r")
    arrays = {a: g[a] for a, _ in cmap}

    def read(t0, out):
        for i, (a, k) in enumerate(cmap):
            arr = arrays[a]
            out[:, i] = arr[t0:t0 + steps] if k is None else arr[t0:t0 + steps, k]

    return lambda t0, out: WINDOW_THREADS.submit(read, t0, out).result


# zarr-python's windows in flight run on threads of their own (its reads are synchronous).
WINDOW_THREADS = ThreadPoolExecutor(8)

READERS = {"tensorstore_s3": reader_tensorstore, "zarr_python_obstore": reader_zarr_obstore}


def read_windows(start, starts, bufs):
    """Window i into bufs[i % k], at most k = len(bufs) windows in flight: a reader's `start(t0,
    out)` begins one window and returns the call that waits for it."""
    pending = collections.deque()
    for i, s in enumerate(starts):
        if len(pending) == len(bufs):
            pending.popleft()()
        pending.append(start(s, bufs[i % len(bufs)]))
    while pending:
        pending.popleft()()


def om4_concurrency(args):
    """om4's --concurrency flag: none for "auto" (om4 follows the round trips)."""
    return [] if args.om4_concurrency == "auto" else ["--concurrency", str(args.om4_concurrency)]


def window_starts(args, info):
    """The first time steps of the measured windows (the same for every reader and the ceiling)."""
    rng = random.Random(args.seed)
    return [rng.randrange(0, info["time"]["steps"] - args.steps + 1) for _ in range(args.windows)]


def om4_read(args, url, endpoint, starts, steps, repeats, check_out=None, in_flight=1):
    """`om4 bench read` of `url`: over S3 at `endpoint`, or (`endpoint` None) a local store."""
    if endpoint:
        remote, env = om4_remote(endpoint)
        remote += om4_concurrency(args)
    else:
        remote, env = [], None
    cmd = [args.om4, "bench", "read", url, *remote, "--in-flight", str(in_flight),
           "--steps", str(steps), "--starts", ",".join(map(str, starts)), "--repeats", str(repeats), "--json"]
    if check_out:
        cmd += ["--check-out", check_out]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)


# ---------------------------------------------------------------------------------- workloads
def raw_windows(args, name, local, endpoint, latency, in_flight):
    info = bench.store_layout(args.om4, local)
    channels = info["channels"]
    cmap = bench.channel_map(local, channels)
    ny, nx = info["grid"]["y"], info["grid"]["x"]
    steps, starts = args.steps, window_starts(args, info)
    window_bytes = steps * len(channels) * ny * nx * 4
    url = f"s3://{BUCKET}/{name}/OM4.zarr"
    ref_path = os.path.join(args.workdir, "om4_first_window.npy")
    first = om4_read(args, url, endpoint, starts[:1], steps, 1, check_out=ref_path)
    reference = np.load(ref_path)
    bufs = [np.empty((steps, len(channels), ny, nx), dtype=np.float32) for _ in range(min(in_flight, len(starts)))]
    readers, status, opens = {}, {}, {"om4": first["open_plus_first_window_s"]}
    for rname in args.readers:
        try:
            t0 = time.perf_counter()
            start = READERS[rname](endpoint, f"{name}/OM4.zarr", local, cmap, steps, args.concurrency)
            bufs[0].fill(-1.0)
            start(starts[0], bufs[0])()
            opens[rname] = time.perf_counter() - t0
            if np.array_equal(bufs[0], reference, equal_nan=True):
                readers[rname], status[rname] = start, "equal to om4"
            else:
                status[rname] = "DIFFERS from om4: not timed"
        except Exception as e:  # reported, not fatal
            status[rname] = f"failed: {type(e).__name__}: {e}"
    rounds = {"om4": []} | {n: [] for n in readers}
    om4_requests = None
    for r in range(args.rounds):
        order = ["om4"] + list(readers)
        order = order[r % len(order):] + order[:r % len(order)]
        for rname in order:
            if rname == "om4":
                res = om4_read(args, url, endpoint, starts, steps, 1, in_flight=in_flight)
                rounds["om4"].append(res["gb_per_s_best"])
                om4_requests = res["requests"]
                continue
            t0 = time.perf_counter()
            read_windows(readers[rname], starts, bufs)
            rounds[rname].append(window_bytes * len(starts) / (time.perf_counter() - t0) / 1e9)
    out = {"store": name, "latency_ms": latency, "in_flight": len(bufs), "codecs": info["codecs"], "channels": len(channels), "grid": [ny, nx],
           "steps": steps, "windows": len(starts), "window_mb": window_bytes / 1e6, "rounds": args.rounds,
           "status": status, "open_plus_first_window_s": opens, "om4_requests": om4_requests, "readers": {}}
    for rname, gbs in rounds.items():
        out["readers"][rname] = {"gb_per_s_median": statistics.median(gbs), "gb_per_s_best": max(gbs),
                                 "om4_ratio_per_round": [o / g for o, g in zip(rounds["om4"], gbs)]}
    return out


def local_ceiling(args, local):
    """om4 reading the same windows from the local copy (page cache, no server on the cores): how
    fast its decoding alone goes. No S3 reader with that decoding can beat it, nor a window in less
    than the round trip plus its local time (see `ceiling`)."""
    starts = window_starts(args, bench.store_layout(args.om4, local))
    res = om4_read(args, local, None, starts, args.steps, 3)
    window_mb = res["bytes_per_repeat"] / len(starts) / 1e6
    return {"gb_per_s_best": res["gb_per_s_best"], "ms_per_window": window_mb / res["gb_per_s_best"]}


def ceiling(local, latency_ms, in_flight, window_mb):
    """GB/s at most over S3 for a reader that decodes as om4 does locally: every window waits one
    round trip for its first answer and then takes at least its local time, at most `in_flight`
    windows are open at once, and all of them share the decoding's rate."""
    return min(local["gb_per_s_best"], in_flight * window_mb / (latency_ms + local["ms_per_window"]))


def samudra_batches(args, name, local, endpoint, latency, batch_size):
    """om4's Samudra batch (`om4 bench batch`) against TensorStore + dedup over S3, the statistics
    and masks read once from the local copy for the Python side."""
    import zarr

    work = os.path.join(args.workdir, "om4_batch")
    url = f"s3://{BUCKET}/{name}/OM4.zarr"
    levels, hist, steps = args.levels, 1, 4
    remote, env = om4_remote(endpoint)
    cmd = [args.om4, "bench", "batch", url, *remote, *om4_concurrency(args),
           "--levels", str(levels), "--history", str(hist), "--steps", str(steps), "--batch-size", str(batch_size),
           "--batches", str(args.batches), "--repeats", "2", "--check-out", work, "--json"]
    om4 = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    batches = json.load(open(os.path.join(work, "samples.json")))["batches"]
    # om4's loader as training uses it: 2 batches read ahead, its default batch reads in flight
    # (2 on object storage); the interval between batches once the first reads have come.
    loader_cmd = [a for a in cmd if a not in ("--check-out", work)]
    loader_cmd[loader_cmd.index("--batches") + 1] = "12"
    loader = json.loads(subprocess.run(loader_cmd + ["--prefetch", "2"], check=True, capture_output=True, text=True,
                                       env=env).stdout)
    names = [f"{v}_{k}" for v in ("uo", "vo", "thetao", "so") for k in range(levels)] + ["zos"]
    bound = ["tauuo", "tauvo", "hfds"]
    ds = zarr.open_group(local, mode="r")
    root = os.path.dirname(local)
    means, stds = zarr.open_group(os.path.join(root, "OM4_means.zarr"), mode="r"), zarr.open_group(os.path.join(root, "OM4_stds.zarr"), mode="r")

    def stats(chans):
        mean = np.array([np.asarray(means[c][...]) for c in chans], dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.array([np.asarray(stds[c][...]) for c in chans], dtype=np.float32).reshape(1, -1, 1, 1)
        level = lambda c: int(c.rsplit("_", 1)[1]) if c.rsplit("_", 1)[-1].isdigit() else 0
        wet = np.stack([np.asarray(ds[f"mask_{level(c)}"][...]).astype(bool) for c in chans])[None]
        return mean, std, wet

    ctx_spec = ts_context(args.concurrency)
    kv = lambda c: kv_tensorstore(endpoint, f"{name}/OM4.zarr/{c}")
    dedup = bench.TensorStoreDedupBatch(local, names, bound, (stats(names), stats(bound)), hist, steps, kvstore=kv, context=ctx_spec)
    first = dedup(batches[0])
    equal = all(np.array_equal(inp, np.load(os.path.join(work, f"step{k}_input.npy")), equal_nan=True)
                and np.array_equal(lab, np.load(os.path.join(work, f"step{k}_label.npy")), equal_nan=True)
                for k, (inp, lab) in enumerate(first))
    for b in batches:  # one untimed pass, as om4 bench batch does
        dedup(b)
    times = []
    for b in batches:
        t0 = time.perf_counter()
        dedup(b)
        times.append((time.perf_counter() - t0) * 1e3)
    ts_ms, o = statistics.median(times), om4["ms_per_batch_median"]
    return {"store": name, "latency_ms": latency, "batch_size": batch_size, "batches": len(batches),
            "om4_ms_per_batch_median": o, "tensorstore_dedup_ms_per_batch_median": ts_ms,
            "om4_speedup_vs_tensorstore_dedup": ts_ms / o, "tensorstore_equal_to_om4": equal,
            "planes_unique": om4["planes_unique_last"], "om4_open_plus_first_batch_s": om4.get("open_plus_first_batch_s"),
            "om4_requests": om4.get("requests"), "om4_loader_ms_per_batch_steady": loader["ms_per_batch_steady"],
            "om4_loader_reads_in_flight": loader["reads_in_flight"]}


# ------------------------------------------------------------------------------ plot, tables
def plot(raw, path, server, local=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = sorted({r["store"] for r in raw})
    flights = sorted({r.get("in_flight", 1) for r in raw})
    fig, axes = plt.subplots(len(flights), len(stores), figsize=(5 * len(stores), 4.2 * len(flights)), squeeze=False)
    for ax, (store, k) in zip(axes.flat, [(s, k) for k in flights for s in stores]):
        rows = sorted((r for r in raw if r["store"] == store and r.get("in_flight", 1) == k), key=lambda r: r["latency_ms"])
        names = ["om4"] + [n for n in READERS if any(n in r["readers"] for r in rows)]
        width = 0.8 / len(names)
        for j, n in enumerate(names):
            ys = [r["readers"].get(n, {}).get("gb_per_s_median", 0.0) for r in rows]
            ax.bar([i + j * width for i in range(len(rows))], ys, width, label=n)
        if local and store in local:  # the row's ceiling (see `ceiling`), across its bars
            cs = [ceiling(local[store], r["latency_ms"], r.get("in_flight", 1), r["window_mb"]) for r in rows]
            ax.hlines(cs, [i - width / 2 for i in range(len(rows))], [i + 0.8 - width / 2 for i in range(len(rows))],
                      colors="k", linestyles="dashed", label="ceiling (om4's local decoding + round trip)")
            ax.set_ylim(0, max(cs) * 1.45)  # room above the lines for the legend
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
        ax.set_xticklabels([f"{r['latency_ms']:g} ms" for r in rows])
        ax.set_xlabel("latency added per request")
        ax.set_ylabel("GB/s (median of rounds, decompressed)")
        ax.set_title(f"{store}: raw windows, {k} in flight ({server})", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(raw, batches, args, local=None):
    local = local or {}
    out = [f"Median GB/s of decompressed planes over {args.rounds} interleaved rounds (in brackets om4's ratio to that "
           "reader per round), with 1 or more windows in flight for every reader; the ceiling of a reader that "
           "decodes as om4 does from the local copy (GB/s; in brackets its ratio to TensorStore's median, then om4's "
           "share of it; `ceiling` in s3_bench.py); om4's throughput over its own best "
           "at 0 ms (either number in flight); om4's requests per window (GETs, fetch rounds) and per open.", "",
           "| store | latency | in flight | om4 | TensorStore S3 | zarr-python + obstore | ceiling (vs TensorStore, om4's share) | om4 vs own best 0 ms | om4 GETs / rounds per window | om4 requests in flight | om4 open GETs | open + first window s (om4 / TensorStore / zarr-python) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    zero = {}
    for r in raw:
        if r["latency_ms"] == 0:
            zero[r["store"]] = max(zero.get(r["store"], 0.0), r["readers"]["om4"]["gb_per_s_median"])
    for r in sorted(raw, key=lambda r: (r["store"], r["latency_ms"], r.get("in_flight", 1))):
        cell = lambda n: ("—" if n not in r["readers"] else
                          f"{r['readers'][n]['gb_per_s_median']:.3f} ({', '.join(f'{x:.2f}' for x in r['readers'][n]['om4_ratio_per_round'])}×)")
        o = r["readers"]["om4"]["gb_per_s_median"]
        q = r["om4_requests"] or {}
        pw, op = q.get("per_window", {}), q.get("open", {})
        opens = " / ".join(f"{r['open_plus_first_window_s'][n]:.2f}" if n in r["open_plus_first_window_s"] else "—"
                           for n in ["om4", "tensorstore_s3", "zarr_python_obstore"])
        out.append(f"| {r['store']} | {r['latency_ms']:g} ms | {r.get('in_flight', 1)} | {o:.3f} | {cell('tensorstore_s3')} | {cell('zarr_python_obstore')} | "
                   f"{ceiling_cell(r, local.get(r['store']))} | {own(o, zero.get(r['store']))} | {pw.get('gets', 0):.0f} / {pw.get('rounds', 0):.1f} | {q.get('in_flight_at_end') or '—'} | {op.get('gets', 0)} | {opens} |")
    bad = [f"{r['store']} {r['latency_ms']:g} ms {n}: {s}" for r in raw for n, s in r["status"].items() if s != "equal to om4"]
    if bad:
        out += ["", "Not timed: " + "; ".join(bad)]
    if batches:
        out += ["", "Samudra batches from S3 (hist 1, steps 4; median ms per batch, each read on demand, one at a time; "
                "TensorStore + dedup's first batch equal to om4's bit for bit; om4's loader: 12 batches, 2 read ahead, "
                "its default reads in flight (2 on object storage), ms between batches once the first reads have come):", "",
                "| store | latency | batch | unique planes | om4 | TensorStore + dedup | om4 loader (reads in flight) | om4 GETs / rounds per batch | om4 requests in flight | om4 open + first batch |", "|---|---|---|---|---|---|---|---|---|---|"]
        for b in sorted(batches, key=lambda b: (b["store"], b["batch_size"], b["latency_ms"])):
            out.append(f"| {b['store']} | {b['latency_ms']:g} ms | {b['batch_size']} | {b['planes_unique']} | {b['om4_ms_per_batch_median']:.0f} | "
                       f"{b['tensorstore_dedup_ms_per_batch_median']:.0f} ({b['om4_speedup_vs_tensorstore_dedup']:.1f}×)"
                       f"{'' if b['tensorstore_equal_to_om4'] else ' NOT EQUAL'} | {loader_cell(b)} | {per_batch(b)} | {(b.get('om4_requests') or {}).get('in_flight_at_end') or '—'} | {b['om4_open_plus_first_batch_s']:.2f} s |")
    return "\n".join(out) + "\n"


def ceiling_cell(r, local):
    if local is None:
        return "—"
    c = ceiling(local, r["latency_ms"], r.get("in_flight", 1), r["window_mb"])
    ts = r["readers"].get("tensorstore_s3", {}).get("gb_per_s_median")
    vs = f"{c / ts:.2f}×, " if ts else ""
    return f"{c:.2f} ({vs}{r['readers']['om4']['gb_per_s_median'] / c:.2f})"


def own(rate, zero):
    return "—" if zero is None else f"{rate / zero:.2f}"


def loader_cell(b):
    ms = b.get("om4_loader_ms_per_batch_steady")
    return "—" if ms is None else f"{ms:.0f} ({b['om4_loader_reads_in_flight']})"


def per_batch(b):
    q = (b.get("om4_requests") or {}).get("per_batch")
    return "—" if q is None else f"{q['gets']:.0f} / {q['rounds']:.1f}"


def sweep(args, server):
    """om4 alone at each concurrency and at its own choice ("auto"): the table its limits come from."""
    rows = []
    for latency in map(float, args.latencies.split(",")):
        endpoint = server(latency)
        try:
            for local in args.store:
                name = os.path.basename(local.rstrip("/"))
                starts = window_starts(args, bench.store_layout(args.om4, os.path.join(local, "OM4.zarr")))
                for k in map(int, args.in_flight.split(",")):
                    cells = []
                    for c in args.sweep.split(","):
                        args.om4_concurrency = c
                        res = om4_read(args, f"s3://{BUCKET}/{name}/OM4.zarr", endpoint.url, starts, args.steps, 3, in_flight=k)
                        cells.append(f"{res['gb_per_s_median']:.2f}")
                        print(name, latency, k, c, cells[-1], file=sys.stderr, flush=True)
                    rows.append(f"| {name} | {latency:g} ms | {k} | " + " | ".join(cells) + " |")
        finally:
            endpoint.stop()
    head = " | ".join(args.sweep.split(","))
    return (f"om4 alone, median GB/s of {args.windows} windows of {args.steps} steps × 3 repeats, by requests in flight:\n\n"
            f"| store | latency | windows in flight | {head} |\n|---|---|---|{'---|' * len(args.sweep.split(','))}\n"
            + "\n".join(rows) + "\n")


def write_tables(path, text, marker="peers-s3"):
    doc = open(path).read()
    begin, end = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    i, j = doc.index(begin) + len(begin), doc.index(end)
    with open(path, "w") as f:
        f.write(doc[:i] + text + doc[j:])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--om4", required=True)
    p.add_argument("--server-binary", help="benches/peers/s3-server's binary: serves --bucket-root, one server per latency")
    p.add_argument("--bucket-root", help="folder of buckets for --server-binary (s3.sh links the stores into om4-bench/)")
    p.add_argument("--endpoint", help="another S3 server (scripts/s3-server.sh's OM4_S3_ENDPOINT): stores uploaded, a proxy per latency")
    p.add_argument("--proxy", default="target/release/examples/latency_proxy")
    p.add_argument("--in-flight", default="1,3", help="windows in flight, every reader alike (one row each)")
    p.add_argument("--store", action="append", default=[], help="a local store directory holding OM4.zarr (repeatable)")
    p.add_argument("--batch-store", action="append", default=[], help="also time Samudra batches on this store (a --store)")
    p.add_argument("--latencies", default="0,10,50")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=512,
                   help="requests in flight for TensorStore and zarr-python (512: om4's best fixed number at low latency)")
    p.add_argument("--om4-concurrency", default="auto",
                   help="om4's --concurrency; auto (default): none given, om4 follows the measured round trips")
    p.add_argument("--levels", type=int, default=19)
    p.add_argument("--batch-sizes", default="1,4")
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--readers", default=",".join(READERS))
    p.add_argument("--server", default="om4-bench-s3", help="the server's name, for the plot")
    p.add_argument("--key", help="ID:SECRET to sign requests with (a server that needs signatures); default anonymous")
    p.add_argument("--workdir", default="/tmp")
    p.add_argument("--out", required=True)
    p.add_argument("--plot")
    p.add_argument("--tables")
    p.add_argument("--from-json", action="store_true")
    p.add_argument("--sweep", help="only om4, at these requests in flight (comma-separated, auto for om4's own choice)")
    args = p.parse_args()
    args.readers = [r for r in args.readers.split(",") if r]
    global KEY
    if args.key:
        KEY = tuple(args.key.split(":", 1))
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = KEY  # TensorStore's "environment"
    def server(latency):
        if args.server_binary:
            return Endpoint.server(args.server_binary, args.bucket_root, latency)
        return Endpoint.latency(args.proxy, args.endpoint, latency)

    if args.sweep:
        table = sweep(args, server)
        print(table)
        if args.tables:
            write_tables(args.tables, table, "peers-s3-sweep")
        return
    if args.from_json:
        saved = json.load(open(args.out))
    else:
        if (args.server_binary is None) == (args.endpoint is None):
            p.error("give --server-binary (with --bucket-root) or --endpoint")
        if args.endpoint:
            make_bucket(args.endpoint)
            for local in args.store:
                n = upload(args.endpoint, local, os.path.basename(local.rstrip("/")))
                print(f"uploaded {local}: {n} objects", file=sys.stderr, flush=True)
        saved = {"raw_windows": [], "samudra_batch": [], "concurrency": args.concurrency,
                 "om4_concurrency": args.om4_concurrency, "server": args.server, "local_ceiling": {}}
        for local in args.store:  # before any server runs: the cores are the decoding's alone
            name = os.path.basename(local.rstrip("/"))
            saved["local_ceiling"][name] = local_ceiling(args, os.path.join(local, "OM4.zarr"))
            print(json.dumps({"local_ceiling": name} | saved["local_ceiling"][name]), flush=True)
        for latency in map(float, args.latencies.split(",")):
            endpoint = server(latency)
            try:
                for local in args.store:
                    name = os.path.basename(local.rstrip("/"))
                    for k in map(int, args.in_flight.split(",")):
                        r = raw_windows(args, name, os.path.join(local, "OM4.zarr"), endpoint.url, latency, k)
                        print(json.dumps(r), flush=True)
                        saved["raw_windows"].append(r)
                for local in args.batch_store:
                    name = os.path.basename(local.rstrip("/"))
                    for b in map(int, args.batch_sizes.split(",")):
                        r = samudra_batches(args, name, os.path.join(local, "OM4.zarr"), endpoint.url, latency, b)
                        print(json.dumps(r), flush=True)
                        saved["samudra_batch"].append(r)
            finally:
                endpoint.stop()
        with open(args.out, "w") as f:
            json.dump(saved, f, indent=1)
    if args.plot:
        plot(saved["raw_windows"], args.plot, saved.get("server", args.server), saved.get("local_ceiling"))
    if args.tables:
        write_tables(args.tables, markdown(saved["raw_windows"], saved["samudra_batch"], args, saved.get("local_ceiling")))


if __name__ == "__main__":
    sys.exit(main())
