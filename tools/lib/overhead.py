#!/usr/bin/env python3
"""What switchable features cost per zs_store+zs_free pair, printed as the kernel's
"alloc_tag: uninline code gated by mem_alloc_profiling_key" patch prints it.

Variants (bench/variants.h), all the patched inline policy:
  patched             profiling not compiled in: the reference
  prof_inline_off     profiling compiled in, switch off, hooks inline     ("baseline")
  prof_outline_off    profiling compiled in, switch off, hooks out of line ("modified")
  prof_inline_on / prof_outline_on   the same with the switch on
  hardened            ZS_POOL_HARDENED pools
Instructions: exact retired instructions per pair from callgrind (tools/lib/count_pairs.py), the
allocator's own (memcpy and benchmark loop left out) and in total. Time: median real time per pair of
bench/zsm_overhead_bench (Google Benchmark, repetitions randomly interleaved), all variants in
one run, so that the ratios compare like with like.

It builds what it runs in the build directory (tools/run-main.sh makes build/bench).

Usage: overhead.py [--build build/bench] [--sizes 384,...] [--reps 5] [--min-time 0.2]
                   [--pairs 20000] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import count_pairs
import gbench

VARIANTS = ["patched", "prof_inline_off", "prof_outline_off", "prof_inline_on",
            "prof_outline_on", "hardened"]


def instructions(binary, sizes, pairs):
    """{(variant, size): allocator-only instructions per pair} from callgrind."""
    return {(r["allocator"], r["size"]): r["allocator_only"]
            for r in count_pairs.count(binary, VARIANTS, sizes, pairs, progress=True)
            if r["family"] == "store"}


def nanoseconds(binary, sizes, reps, min_time):
    """{(variant, size): median real time in ns per pair}."""
    size_re = "|".join(map(str, sizes))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        data = gbench.run(binary, [f"--benchmark_filter=/({size_re})$",
                                   f"--benchmark_repetitions={reps}",
                                   f"--benchmark_min_time={min_time}",
                                   "--benchmark_enable_random_interleaving=true"], out.name)
    medians = {}
    for name, ns in gbench.medians(data, "real").items():
        _, variant, size = name.split("/")
        medians[(variant, int(size))] = ns
    return medians


def pct(new, old):
    return 100.0 * (new - old) / old


def table(title, columns, rows):
    print(title)
    print(f"{'':10}" + "".join(f"{c:>26}" for c in columns))
    for label, cells in rows:
        print(f"{label:10}" + "".join(f"{c:>26}" for c in cells))
    print()


def rows(metric, sizes, pairs):
    """Per size, for each (new, old) pair: the difference and percentage; then the mean %."""
    out = [(f"{size} B", [f"{metric[(new, size)] - metric[(old, size)]:+.1f} "
                          f"({pct(metric[(new, size)], metric[(old, size)]):+.2f}%)"
                          for new, old in pairs]) for size in sizes]
    out.append(("mean", [f"{statistics.mean(pct(metric[(new, s)], metric[(old, s)]) for s in sizes):+.2f}%"
                         for new, old in pairs]))
    return out


def report(sizes, instr, ns):
    inline_outline = ["baseline (inline hooks)", "modified (out of line)"]
    disabled = [("prof_inline_off", "patched"), ("prof_outline_off", "patched")]
    enabled = [("prof_inline_on", "patched"), ("prof_outline_on", "patched")]
    extra_call = [("prof_outline_on", "prof_inline_on")]
    hardened = [("hardened", "patched")]
    for name, metric in (("instructions per pair (callgrind, allocator only)", instr),
                         ("ns per pair (median)", ns)):
        print(f"== {name}")
        table("Profiling compiled in and disabled, over not compiled in:", inline_outline,
              rows(metric, sizes, disabled))
        table("Profiling enabled, over not compiled in:", inline_outline,
              rows(metric, sizes, enabled))
        table("Profiling enabled: the cost of the extra call (out of line over inline):",
              ["extra call"], rows(metric, sizes, extra_call))
        table("Hardened pools, over default pools:", ["hardened"], rows(metric, sizes, hardened))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/bench")
    ap.add_argument("--sizes", default="384,784,1568,2352,3136")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not os.path.exists(os.path.join(args.build, "CMakeCache.txt")):
        sys.exit(f"overhead.py: {args.build} is not a build directory; run tools/run-main.sh "
                 "first, or pass --build")
    subprocess.run(["cmake", "--build", args.build, "--target", "zsm_overhead_bench",
                    "zsm_pair_count"], check=True, stdout=subprocess.DEVNULL)
    bench = os.path.join(args.build, "bench")
    instr = instructions(os.path.join(bench, "zsm_pair_count"), sizes, args.pairs)
    ns = nanoseconds(os.path.join(bench, "zsm_overhead_bench"), sizes, args.reps, args.min_time)
    report(sizes, instr, ns)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"instructions": {f"{v}/{s}": instr[(v, s)] for v, s in instr},
                       "ns": {f"{v}/{s}": ns[(v, s)] for v, s in ns}}, fh, indent=2)


if __name__ == "__main__":
    main()
