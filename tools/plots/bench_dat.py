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
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import gbench  # noqa: E402

COLUMNS = ["zs_store+zs_free/patched", "zs_store+zs_free/baseline",
           "malloc+memcpy+free/mimalloc", "malloc+memcpy+free/glibc",
           "zs_malloc+zs_obj_write+zs_free/patched", "zs_malloc+zs_obj_write+zs_free/baseline",
           "zs_obj_read+copy/patched", "zs_obj_read+copy/baseline"]
SIZED = re.compile(r"^(?P<series>[^/]+/[^/]+)/(?P<size>\d+)$")


def medians(data):
    """{(series, size): median real time in ns} of the single-threaded runs at a fixed size."""
    table = {}
    for name, ns in gbench.medians(data, "real").items():
        m = SIZED.match(name)
        if m:
            table[(m["series"], int(m["size"]))] = ns
    return table


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as fh:
        table = medians(json.load(fh))
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
