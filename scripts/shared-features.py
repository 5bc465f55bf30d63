#!/usr/bin/env python3
"""Do CI's test build and its software-GPU/S3 build resolve the crates they share alike?

    scripts/shared-features.py          # exit 1, listing the crates to pin, if they do not

Burn's GPU backends and om4's `s3` feature turn on features in crates the whole tree shares
(serde's `rc`, rustix's `net`, proc-macro2's `span-locations`, ...). Where a shared crate resolves
differently, cargo compiles it again, and everything built on it: without om4-testkit's pins CI's
software-GPU build compiled nearly every crate a second time. This script asks cargo for both
builds' unit graphs (`--unit-graph`, an unstable flag: RUSTC_BOOTSTRAP=1 lets a stable cargo
print it; nothing is compiled, about 2 s) and lists, for every crate both builds have on the same
side (target, or host: proc macros, build scripts and their dependencies), the features that
differ. Burn's, cubecl's and om4's own crates are meant to differ and are not listed. Each line
names what to add to crates/om4-testkit/Cargo.toml: `[dependencies]` for the target side,
`[build-dependencies]` for the host side.

If cargo cannot print a unit graph (another toolchain), the script says so and exits 0: the pins
only save build time.
"""
import collections
import json
import os
import subprocess
import sys

TEST = ["test", "--locked", "--workspace", "--no-run"]
GPU = ["build", "--locked", "--config", "scripts/software-gpu.toml", "--workspace", "--features", "om4-train/wgpu,om4/s3",
       "--bin", "om4-train", "--example", "train_samudra"]   # scripts/software-gpu.sh in CI
MEANT_TO_DIFFER = ("burn", "cubecl", "cubek")


def unit_graph(args):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(["cargo", *args, "-Z", "unstable-options", "--unit-graph"],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"shared-features: cargo gave no unit graph, nothing checked:\n{out.stderr.strip()}")
        sys.exit(0)
    return json.loads(out.stdout)["units"]


def features_by_side(units):
    """(package id, 'host' | 'target') -> the features its library is built with."""
    host = set()
    stack = [i for i, u in enumerate(units)
             if "proc-macro" in u["target"]["kind"]
             or ("custom-build" in u["target"]["kind"] and u["mode"] == "build")]
    while stack:
        i = stack.pop()
        if i not in host:
            host.add(i)
            stack.extend(d["index"] for d in units[i]["dependencies"])
    out = collections.defaultdict(set)
    for i, u in enumerate(units):
        if u["mode"] == "build" and {"lib", "rlib", "proc-macro"} & set(u["target"]["kind"]):
            out[(u["pkg_id"], "host" if i in host else "target")] |= set(u["features"])
    return out


def main():
    test, gpu = features_by_side(unit_graph(TEST)), features_by_side(unit_graph(GPU))
    off = []
    for key in sorted(set(test) & set(gpu)):
        pkg_id, side = key
        name = pkg_id.split("#")[-1]
        if test[key] == gpu[key] or pkg_id.startswith("path+") or name.startswith(MEANT_TO_DIFFER):
            continue
        section = "[build-dependencies]" if side == "host" else "[dependencies]"
        off.append(f"  {name} ({side} side, {section}): the GPU/S3 build adds {sorted(gpu[key] - test[key])}"
                   f"{', the test build adds ' + str(sorted(test[key] - gpu[key])) if test[key] - gpu[key] else ''}")
    if off:
        print("CI's test build and software-GPU/S3 build resolve shared crates differently, so the second"
              " rebuilds them and everything on them; pin these in crates/om4-testkit/Cargo.toml:")
        print("\n".join(off))
        sys.exit(1)
    print(f"shared-features: the two builds resolve all {len(set(test) & set(gpu))} shared crates alike"
          " (Burn's, cubecl's and om4's aside)")


if __name__ == "__main__":
    main()
