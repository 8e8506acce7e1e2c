#!/usr/bin/env python3
"""Smoke tests for the benchmarks (run by ctest): each family runs a handful of iterations,
its output parses, and its counts are consistent.

Usage: smoke_test.py pair_bench BINARY | pair_count BINARY | memory_bench BINARY DIR
                     | count_pairs SCRIPT BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools", "lib"))
from count_pairs import FAMILIES, MALLOCS, SIZES  # noqa: E402  (kSizes of bench/live_set.h)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


# zsm as users get it (per-thread caches) and on the locked path, both inline policies.
ZSM_VARIANTS = ("cached", "patched", "baseline")


def pair_bench(binary):
    out = subprocess.run([binary, "--benchmark_min_time=0.001", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    runs = {b["name"]: b for b in json.loads(out)["benchmarks"]}
    expected = []
    for v in ZSM_VARIANTS:
        for fam in ("zs_store+zs_free", "zs_malloc+zs_obj_write+zs_free", "zs_obj_read+copy"):
            expected += [f"{fam}/{v}/{s}" for s in SIZES]
        expected.append(f"zs_store+zs_free/{v}/mixed")
    for v in ("cached", "uncached"):
        expected += [f"zs_store+zs_free/{v}/many/pools:{n}" for n in (1, 16, 256, 1024)]
    for a in MALLOCS:
        expected += [f"malloc+memcpy+free/{a}/{s}" for s in SIZES]
        expected.append(f"malloc+memcpy+free/{a}/mixed")
    for name in expected:
        b = runs.get(name)
        if b is None:
            fail(f"{name} missing from the output")
        if b.get("error_occurred"):
            fail(f"{name}: {b.get('error_message')}")
        if b["iterations"] <= 0 or b["items_per_second"] <= 0:
            fail(f"{name}: no iterations or items")
        size = name.rsplit("/", 1)[1]
        if size.isdigit():
            ratio = b["bytes_per_second"] / b["items_per_second"]
            if abs(ratio - int(size)) > 1e-6 * int(size):
                fail(f"{name}: {ratio} bytes per item, expected {size}")
    threaded = [n for n in runs if "/shared/" in n and n.endswith("threads:2")]
    if len(threaded) != 2 * (len(ZSM_VARIANTS) + len(MALLOCS)):
        fail(f"expected {2 * (2 + len(MALLOCS))} two-thread runs, found {threaded}")
    print(f"{len(runs)} benchmarks ran; names, items and bytes consistent")


def pair_count(binary):
    for alloc, families in FAMILIES.items():
        for fam in families:
            subprocess.run([binary, alloc, fam, "784", "1000"], check=True)
    if subprocess.run([binary, "nosuch", "store", "784", "10"]).returncode != 2:
        fail("an unknown allocator must exit 2")
    if subprocess.run([binary, "mimalloc", "write", "784", "10"]).returncode != 2:
        fail("the write family is zsm-only and must exit 2 for mimalloc")
    print("every allocator and family ran")


def memory_bench(binary, directory):
    out = subprocess.run([binary, "--pages=300", "--json", directory], check=True,
                         capture_output=True, text=True).stdout
    data = json.loads(out)
    if data["pages_read"] <= 0:
        fail("no pages read")
    by_phase = {}
    for r in data["results"]:
        if not 0 < r["efficiency"] <= 1.0 + 1e-9:
            fail(f"efficiency out of range: {r}")
        by_phase.setdefault(r["phase"].replace(" + compact", ""), set()).add(r["payload_bytes"])
        if r["allocator"] == "zsm":
            parts = r["payload_bytes"] + r["slot_rounding"] + r["free_slots"] + \
                r["tail_waste"] + r["bookkeeping"]
            if parts != r["held_bytes"]:
                fail(f"zsm breakdown {parts} != held {r['held_bytes']} in {r['phase']}")
    for phase, payloads in by_phase.items():
        if len(payloads) != 1:
            fail(f"allocators disagree on the payload of '{phase}': {payloads}")
    allocators = {r["allocator"] for r in data["results"]}
    if allocators != {"zsm", *MALLOCS}:
        fail(f"allocators measured: {allocators}")
    print(f"{len(data['results'])} results; payloads agree, zsm breakdown adds up")


def count_pairs(script, binary):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "counts.json")
        subprocess.run([sys.executable, script, "--binary", binary, "--pairs", "500",
                        "--sizes", "784", "--json", path], check=True, capture_output=True)
        with open(path) as fh:
            data = json.load(fh)
    for r in data["results"]:
        if not 0 < r["allocator_only"] < r["no_memcpy"] <= r["total"]:
            fail(f"inconsistent counts: {r}")
        if r["memcpy"] < 784 / 16:
            fail(f"memcpy of 784 bytes cannot take {r['memcpy']} instructions: {r}")
    print(f"{len(data['results'])} callgrind runs; counts consistent")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        fail(__doc__)
    {"pair_bench": pair_bench, "pair_count": pair_count, "memory_bench": memory_bench,
     "count_pairs": count_pairs}[sys.argv[1]](*sys.argv[2:])
