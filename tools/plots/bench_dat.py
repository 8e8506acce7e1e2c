#!/usr/bin/python3
"""Turns zsm_pair_bench's Google Benchmark JSON (--benchmark_out) into bench.gp's table: per
object size, the median real time in ns per pair (or per read) over the repetitions of

  zs_store+zs_free/patched, zs_store+zs_free/baseline, malloc+memcpy+free/mimalloc,
  malloc+memcpy+free/glibc, zs_malloc+zs_obj_write+zs_free/patched and /baseline,
  zs_obj_read+copy/patched and /baseline

one row a size, NaN where the file has no such benchmark (a filtered run).
Usage: bench_dat.py PAIR_BENCH_JSON OUT_DAT
"""
import json
import re
import statistics
import sys

COLUMNS = ["zs_store+zs_free/patched", "zs_store+zs_free/baseline",
           "malloc+memcpy+free/mimalloc", "malloc+memcpy+free/glibc",
           "zs_malloc+zs_obj_write+zs_free/patched", "zs_malloc+zs_obj_write+zs_free/baseline",
           "zs_obj_read+copy/patched", "zs_obj_read+copy/baseline"]
NS_PER = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
SIZED = re.compile(r"^(?P<series>[^/]+/[^/]+)/(?P<size>\d+)$")


def medians(benchmarks):
    """{(series, size): median ns} over the single-threaded runs at a fixed size."""
    runs = {}
    for b in benchmarks:
        m = SIZED.match(b["run_name"])
        if b.get("run_type", "iteration") != "iteration" or not m:
            continue
        ns = b["real_time"] * NS_PER[b.get("time_unit", "ns")]
        runs.setdefault((m["series"], int(m["size"])), []).append(ns)
    return {key: statistics.median(v) for key, v in runs.items()}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as fh:
        table = medians(json.load(fh)["benchmarks"])
    sizes = sorted({size for _, size in table})
    if not sizes:
        sys.exit(f"bench_dat.py: no sized benchmark in {src}")
    with open(dst, "w") as out:
        out.write("# ns per pair (per read for zs_obj_read), median over repetitions, from "
                  f"{src}\n# size " + " ".join(COLUMNS) + "\n")
        for size in sizes:
            cells = [f"{table[(c, size)]:.2f}" if (c, size) in table else "NaN" for c in COLUMNS]
            out.write(f"{size} " + " ".join(cells) + "\n")


if __name__ == "__main__":
    main()
