#!/usr/bin/env python3
"""The README's main job: the paired store/free benchmark, instruction counts and memory
efficiency, summarised in one table.

Runs, from a build directory (tools/run-main.sh makes one, -O2 -g):
  1. bench/zsm_pair_bench (Google Benchmark; repetitions, random interleaving, JSON),
  2. count_pairs.count() on bench/zsm_pair_count (callgrind: exact instructions per pair),
  3. bench/zsm_memory_bench (live bytes / held bytes on real compressed pages),
then prints per size: ns per pair for zsm as users get it (cached: the default pool, per-thread
caches on), zsm on the kernel path (no cache, one shard) under both inline policies (patched,
baseline), the kernel's own 6.1 mm/zsmalloc.c (kernel: gcc-12, the kernel's flags, Debian's
config; its pair is zs_malloc + zs_map_object/memcpy/zs_unmap_object + zs_free, in the same
binaries, where linux-source-6.1 is installed), and mimalloc, glibc, jemalloc and tcmalloc (medians of the real time over the
repetitions), with cached zsm over each of mimalloc, jemalloc and tcmalloc; instructions per
pair for all seven; and the memory and thread-scaling figures. Every raw result is kept under
--out.

Usage: main_job.py --build DIR [--full] [--out DIR]
  default: a short run (about 2 minutes on 2 cores); --full: 9 repetitions, longer runs,
  100000 pairs under callgrind and 100000 pages for the memory benchmark.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_pairs  # noqa: E402
import gbench  # noqa: E402

SIZES = count_pairs.SIZES
MALLOCS = count_pairs.MALLOCS
# zsm as users get it, and on the kernel path under both inline policies (bench/variants.h).
ZSM = ("cached", "patched", "baseline")
# The kernel's own 6.1 zsmalloc (gcc-12, kernel flags, Debian's config), built into the same
# binaries where linux-source-6.1 is installed: its pair is zs_malloc + zs_map_object, memcpy,
# zs_unmap_object + zs_free (6.1 has no zs_store()).
KERNEL = "kernel"
KERNEL_PAIR = "zs_malloc+zs_obj_write+zs_free"


def has_kernel(count_binary):
    """Whether the build has the kernel variant (bench/CMakeLists.txt)."""
    return subprocess.run([count_binary, KERNEL, "write", "784", "10"],
                          capture_output=True).returncode == 0


def step(msg, start):
    print(f"[main] {time.time() - start:5.0f} s  {msg}", file=sys.stderr, flush=True)


def run_pair_bench(binary, out, full):
    """{run name: median real time (ns), median items per second, median CPUs used
    (cpu_time / real_time), the medians of the lock counters where the run has them,
    repetitions}."""
    reps, min_time = (9, 0.5) if full else (3, 0.05)
    data = gbench.run(binary, [f"--benchmark_repetitions={reps}",
                               f"--benchmark_min_time={min_time}",
                               "--benchmark_enable_random_interleaving=true"], out)

    def summary(rs):
        row = {"ns": statistics.median(gbench.ns(r, "real") for r in rs),
               "items_per_second": statistics.median(r["items_per_second"] for r in rs),
               "cpus": statistics.median(gbench.ns(r, "cpu") / gbench.ns(r, "real") for r in rs),
               "repetitions": len(rs)}
        for counter in ("lock_waits", "shard_moves"):
            if counter in rs[0]:
                row[counter] = statistics.median(r[counter] for r in rs)
        return row

    return {name: summary(rs) for name, rs in gbench.iterations(data).items()}


def run_memory_bench(binary, out, full):
    pages = 100000 if full else 20000
    text = subprocess.run([binary, f"--pages={pages}", "--json"], check=True,
                          capture_output=True, text=True).stdout
    with open(out, "w") as fh:
        fh.write(text)
    return json.loads(text)


def print_summary(bench, counts, memory, kernel=False):
    def ns(name):
        return bench[name]["ns"] if name in bench else float("nan")

    def instr(alloc, family, size, key):
        r = count_pairs.find(counts, alloc, family, size)
        return r[key] if r else float("nan")

    zsm = (*ZSM, KERNEL) if kernel else ZSM
    ratios = (("mi", "mimalloc"), ("je", "jemalloc"), ("tc", "tcmalloc"))

    def pair_name(alloc, suffix):
        family = (KERNEL_PAIR if alloc == KERNEL else
                  "zs_store+zs_free" if alloc in zsm else "malloc+memcpy+free")
        return f"{family}/{alloc}/{suffix}"

    def family_of(alloc):
        return "write" if alloc == KERNEL else "store"

    print()
    print("Paired store/free, steady state (live set of 1024 objects per size); "
          "ns per pair = median over repetitions; cached = default pool (per-thread caches), "
          "patched/baseline = kernel path (no cache, one shard); zsm/xx = cached over xx"
          + ("; kernel = the kernel's own 6.1 mm/zsmalloc.c (gcc-12, kernel flags), "
             "zs_malloc + zs_map_object/memcpy/zs_unmap_object + zs_free" if kernel else ""))
    hdr = (f"{'size':>5} | " + " ".join(f"{a:>8}" for a in zsm) + " | "
           + " ".join(f"{a:>8}" for a in MALLOCS) + " | "
           + " ".join(f"{'zsm/' + short:>6}" for short, _ in ratios))
    print(hdr)
    print("-" * len(hdr))
    for s in [*SIZES, "mixed"]:
        t = {a: ns(pair_name(a, s)) for a in (*zsm, *MALLOCS)}
        print(f"{s:>5} | " + " ".join(f"{t[a]:8.1f}" for a in zsm) + " | "
              + " ".join(f"{t[a]:8.1f}" for a in MALLOCS) + " | "
              + " ".join(f"{t['cached'] / t[a]:6.2f}" for _, a in ratios))

    print()
    print("Instructions per pair (callgrind): allocator only, without memcpy and the benchmark "
          "loop; in brackets: with memcpy and loop")
    hdr = f"{'size':>5} | " + " ".join(f"{a:>13}" for a in (*zsm, *MALLOCS))
    print(hdr)
    print("-" * len(hdr))
    for s in SIZES:
        cells = [f"{instr(a, family_of(a), s, 'allocator_only'):6.1f} "
                 f"[{instr(a, family_of(a), s, 'total'):4.0f}]" for a in (*zsm, *MALLOCS)]
        print(f"{s:>5} | " + " ".join(f"{c:>13}" for c in cells))

    print()
    print("zs_malloc + zs_obj_write + zs_free, instructions per pair (allocator only): "
          + ", ".join(f"{s}: " + "/".join(f"{instr(a, 'write', s, 'allocator_only'):.0f}"
                                         for a in zsm) for s in SIZES)
          + "  (" + "/".join(zsm) + ")")
    print("zs_obj_read + copy out, ns per read (cached): "
          + ", ".join(f"{s}: {ns(f'zs_obj_read+copy/cached/{s}'):.1f}" for s in SIZES))

    print()
    print("Threads on one pool (pairs per second, each thread its own live set; 2T/1T = scaling;"
          " CPUs = cpu_time / real_time of the 2-thread run, the CPUs the process actually had;"
          " per CPU = scaling / CPUs had; zsm: lock waits and shard moves per pair)")
    for alloc in (*ZSM, *MALLOCS):
        cells = []
        for s in (784, 2352):
            one = bench.get(pair_name(alloc, f"shared/{s}/real_time/threads:1"))
            two = bench.get(pair_name(alloc, f"shared/{s}/real_time/threads:2"))
            if one and two:
                scaling = two["items_per_second"] / one["items_per_second"]
                cpus = two["cpus"]
                cell = (f"{s} B: {one['items_per_second'] / 1e6:5.1f} M/s -> "
                        f"{two['items_per_second'] / 1e6:5.1f} M/s ({scaling:.2f}x, "
                        f"{cpus:.2f} CPUs, {scaling / cpus:.2f} per CPU")
                if "shard_moves" in two:
                    cell += f", waits {two['lock_waits']:.4f} moves {two['shard_moves']:.5f}"
                cells.append(cell + ")")
        print(f"  {alloc:9} " + "   ".join(cells))

    print()
    print(f"Memory efficiency: live payload bytes / bytes held, {memory['pages_read']} real "
          "4 KiB pages compressed (zsm: the default pool, caches on; held = pool pages + handle "
          "cells + metadata)")
    for r in memory["results"]:
        print(f"  {r['allocator']:9} {r['phase']:26} {100 * r['efficiency']:5.1f} %")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or os.path.join(args.build, "results")
    os.makedirs(out, exist_ok=True)
    start = time.time()

    step("1/3 Google Benchmark: pairs, reads, threads, baselines", start)
    bench = run_pair_bench(os.path.join(args.build, "bench", "zsm_pair_bench"),
                           os.path.join(out, "pair_bench.json"), args.full)
    step("2/3 callgrind: instructions per pair", start)
    pairs = 100000 if args.full else 20000
    count_binary = os.path.join(args.build, "bench", "zsm_pair_count")
    kernel = has_kernel(count_binary)
    allocators = list(count_pairs.FAMILIES) + ([KERNEL] if kernel else [])
    counts = count_pairs.count(count_binary, allocators, SIZES, pairs,
                               use_perf=count_pairs.perf_works(), progress=True)
    count_pairs.save(os.path.join(out, "instructions.json"), pairs, counts)
    step("3/3 memory efficiency on real compressed pages", start)
    memory = run_memory_bench(os.path.join(args.build, "bench", "zsm_memory_bench"),
                              os.path.join(out, "memory.json"), args.full)
    step(f"done; raw results in {out}", start)
    print_summary(bench, counts, memory, kernel)


if __name__ == "__main__":
    main()
