#!/usr/bin/env python3
"""Exact retired instructions per steady-state pair, from callgrind.

Runs bench/zsm_pair_count under `valgrind --tool=callgrind --instr-atstart=no` (collection
only around the measured loop) for every allocator, family and size, and splits each run's
instruction count into:
  total       everything in the measured loop, divided by the number of pairs
  no_memcpy   total less the copy itself: the bodies of memcpy/memmove and of zsm's own copy
              (zsm/src/base/copy.cpp: every function named copy_payload*)
  allocator   no_memcpy less the benchmark's own loop (victim choice, array update)
Prints a table and, with --json FILE, writes every figure. Where the machine has hardware
counters (`perf stat -e instructions true` prints a count), each run is also measured with
perf as a second opinion: instructions of a run with 2N pairs less a run with N pairs, over N
(so set-up cancels out); that figure includes memcpy and the benchmark loop, like `total`.

--allocators also takes the overhead variants (hardened, prof_inline_off, prof_outline_off,
prof_inline_on, prof_outline_on; see bench/variants.h) and cached_baseline, which are not run
by default.

Every script that needs instruction counts (ab.py, golden.py, main_job.py, overhead.py) calls
count() here: the one way the matrix of runs (allocators x their families x sizes) is made,
run in parallel and ordered. SIZES, the sizes of the paired benchmarks, is read from their
one definition, kSizes in bench/live_set.h.

Usage: count_pairs.py --binary build/rel/bench/zsm_pair_count [--pairs N] [--jobs N]
                      [--sizes 384,784,...] [--allocators patched,baseline,...] [--json FILE]
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import progress as progress_lines  # noqa: E402

# The general-purpose allocators zsm is compared with (bench/variants.h), and every
# allocator's families: zsm's two variants store and malloc+write, the others store.
MALLOCS = ("mimalloc", "glibc", "jemalloc", "tcmalloc")
FAMILIES = {"cached": ["store", "write"], "patched": ["store", "write"],
            "baseline": ["store", "write"],
            **{m: ["store"] for m in MALLOCS}}
# Variants of patched with something switched on (bench/variants.h); measured on request.
OVERHEAD = {v: ["store"] for v in ("hardened", "prof_inline_off", "prof_outline_off",
                                    "prof_inline_on", "prof_outline_on")}
# The default pool on the baseline build: the A/B of the inline policies with the caches on
# (tools/lib/ab.py); measured on request.
CACHED_AB = {"cached_baseline": ["store", "write"]}
# The kernel's own 6.1 zsmalloc (bench/CMakeLists.txt, where linux-source-6.1 is installed):
# zs_malloc + zs_map_object/memcpy/zs_unmap_object + zs_free, the write family; measured on
# request (the main job does).
KERNEL = {"kernel": ["write"]}
ALL = {**FAMILIES, **OVERHEAD, **CACHED_AB, **KERNEL}
# The copy, left out of the allocator's count: the C library's memcpy/memmove and zsm's
# copy_payload() with its helpers (zsm/src/base/copy.cpp), which zsm calls where it called memcpy.
COPY = re.compile(r"mem(cpy|move)|::copy_payload")
LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIVE_SET_H = os.path.join(ROOT, "bench", "live_set.h")


def bench_sizes():
    """The object sizes of the paired benchmarks: kSizes in bench/live_set.h."""
    with open(LIVE_SET_H) as fh:
        m = re.search(r"kSizes\[\]\s*=\s*\{([^}]*)\}", fh.read())
    if m is None:
        raise RuntimeError(f"no kSizes[] = {{...}} in {LIVE_SET_H}")
    return [int(s) for s in re.findall(r"\d+", m.group(1))]


SIZES = bench_sizes()


def parse_annotate(text):
    """(total, memcpy, harness) instruction counts from callgrind_annotate output."""
    total = memcpy = harness = 0
    in_table = False
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        if line.startswith("Ir") and "file:function" in line:
            in_table = True
            continue
        if not in_table:
            continue
        m = LINE.match(line)
        if not m:
            if line.startswith("---") or not line.strip():
                if line.startswith("---") and harness + memcpy > 0:
                    break
                continue
            continue
        count = int(m.group(1).replace(",", ""))
        name = m.group(2)
        if COPY.search(name):
            memcpy += count
        elif re.search(r"(store|write)_pairs", name):
            harness += count
    return total, memcpy, harness


def perf_works():
    try:
        out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                             capture_output=True, text=True)
    except FileNotFoundError:
        return False
    return out.returncode == 0 and "not supported" not in out.stderr and \
        re.search(r"^\d+,", out.stderr, re.M) is not None


def perf_instructions(binary, allocator, family, size, pairs):
    def count(n):
        out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", binary, allocator,
                              family, str(size), str(n)], capture_output=True, text=True)
        m = re.search(r"^(\d+),", out.stderr, re.M)
        return int(m.group(1)) if m else None
    one, two = count(pairs), count(2 * pairs)
    return None if one is None or two is None else (two - one) / pairs


def run_one(binary, allocator, family, size, pairs, use_perf=False):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}", binary, allocator, family, str(size), str(pairs)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        text = subprocess.run(["callgrind_annotate", "--threshold=100", out],
                              capture_output=True, text=True, check=True).stdout
    total, memcpy, harness = parse_annotate(text)
    result = {"allocator": allocator, "family": family, "size": size, "pairs": pairs,
              "total": total / pairs, "no_memcpy": (total - memcpy) / pairs,
              "allocator_only": (total - memcpy - harness) / pairs,
              "memcpy": memcpy / pairs, "harness": harness / pairs}
    if use_perf:
        result["perf_total"] = perf_instructions(binary, allocator, family, size, pairs)
    return result


def count(binary, allocators, sizes, pairs, jobs=os.cpu_count() or 1, use_perf=False,
          progress=False):
    """run_one() for every allocator, each of its families and every size, `jobs` at a time;
    the results ordered by allocator (as ALL lists them), family and size. With progress, a
    line on stderr counts the runs done (progress.Counter: rewritten in place on a terminal,
    one line per tenth of the runs into a log)."""
    runs = [(a, f, s) for a in allocators for f in ALL[a] for s in sizes]
    counter = progress_lines.Counter("[count_pairs]", len(runs), "callgrind runs")
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_one, binary, a, f, s, pairs, use_perf) for a, f, s in runs]
        for fut in concurrent.futures.as_completed(futures):
            results.append(fut.result())
            if progress:
                counter.step()
    if progress:
        counter.close()
    return sorted(results, key=lambda r: (list(ALL).index(r["allocator"]), r["family"], r["size"]))


def find(results, allocator, family, size):
    """The result of one run, or None."""
    return next((r for r in results
                 if (r["allocator"], r["family"], r["size"]) == (allocator, family, size)), None)


def save(path, pairs, results):
    """What --json writes, and what every caller keeps as its raw counts."""
    with open(path, "w") as fh:
        json.dump({"pairs": pairs, "results": results}, fh, indent=1)


def print_table(results, allocators, sizes, pairs):
    print(f"Retired instructions per pair (callgrind, {pairs} pairs each; "
          "allocator = without memcpy and without the benchmark loop)")
    print(f"{'allocator':10} {'family':6} " + " ".join(f"{s:>14}" for s in sizes))
    for a in allocators:
        for f in ALL[a]:
            cells = [f"{r['total']:6.0f}/{r['allocator_only']:<6.1f}"
                     for r in (find(results, a, f, s) for s in sizes)]
            print(f"{a:10} {f:6} " + " ".join(f"{c:>14}" for c in cells))
    print("(each cell: total incl. memcpy / allocator only)")
    with_perf = [r for r in results if r.get("perf_total") is not None]
    if with_perf:
        print("perf, instructions per pair incl. memcpy and loop: " + ", ".join(
            f"{r['allocator']}/{r['family']}/{r['size']}: {r['perf_total']:.0f}"
            for r in with_perf))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--allocators", default=",".join(FAMILIES))
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    allocators = args.allocators.split(",")

    use_perf = perf_works()
    print(f"[count_pairs] hardware counters: {'yes, perf used too' if use_perf else 'no'}",
          file=sys.stderr, flush=True)
    results = count(args.binary, allocators, sizes, args.pairs, args.jobs, use_perf,
                    progress=True)
    print_table(results, allocators, sizes, args.pairs)
    if args.json:
        sys.stdout.flush()  # the table first, even when --json names this same stdout
        save(args.json, args.pairs, results)


if __name__ == "__main__":
    main()
