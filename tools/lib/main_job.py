#!/usr/bin/env python3
"""The README's main job: the paired store/free benchmark, the copy alone, instruction counts
and memory efficiency, summarised in one table.

Runs, from a build directory (tools/run-main.sh makes one, -O2 -g):
  1. bench/zsm_pair_bench (Google Benchmark; repetitions, random interleaving, JSON),
  2. bench/zsm_copy_bench (the copy alone: memcpy against zsm's copy_payload()),
  3. count_pairs.count() on bench/zsm_pair_count (callgrind: exact instructions per pair),
  4. bench/zsm_memory_bench (live bytes / held bytes on real compressed pages),
then prints the machine (CPU model, the flags the copy depends on, glibc and the size from
which its memcpy uses rep movsb, the load average), whether the timings were quiet enough
to trust (the spread of each benchmark's repetitions, see NOISY, and the CPU share the runs
had), and per size: ns per pair for zsm as users get it (cached: the default pool,
per-thread caches on), zsm on the locked path (no cache, one shard) under both inline
policies (patched, baseline), the kernel's own 6.1 mm/zsmalloc.c (kernel: gcc-12, the
kernel's flags, Debian's config; its pair is zs_malloc + zs_map_object/memcpy/zs_unmap_object
+ zs_free, in the same binaries, where linux-source-6.1 is installed), and mimalloc, glibc,
jemalloc and tcmalloc (medians of the real time over the repetitions), each of those four
again with zsm's copy in place of memcpy (the copy held equal), with cached zsm over each of
mimalloc, jemalloc and tcmalloc, plain and with the copy held equal; instructions per pair
for all of them (the baselines' memcpy as callgrind runs it: AVX2, never AVX-512); the copy
alone per size and place; and the memory and thread-scaling figures. Every raw result is kept
under --out.

Usage: main_job.py --build DIR [--full] [--out DIR]
  default: a short run, 3 repetitions. With tools/run-main.sh's build, measured on an AMD
  EPYC with 2 cores: 1 min 27 s at a load average near 0 (before the copy benchmark was
  added; its step took 26 s under load), 4 min 45 s at a load average of 5-9 (build 2 min,
  this job 2 min 39 s): Google Benchmark's runs last real time, which stretches with the
  share of the CPUs other work leaves, and the 80 callgrind runs go 2 at a time.
  --full: 9 repetitions, longer runs, 100000 pairs under callgrind and 100000 pages for the
  memory benchmark; the benchmarks' minimum run times alone add up to 12.4 minutes (139 pair
  benchmarks x 9 x 0.5 s, 128 copy benchmarks x 9 x 0.1 s), so count on 15 minutes or more.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_pairs  # noqa: E402
import gbench  # noqa: E402

SIZES = count_pairs.SIZES
MALLOCS = count_pairs.MALLOCS
# zsm as users get it, and on the locked path under both inline policies (bench/variants.h).
ZSM = ("cached", "patched", "baseline")
# The kernel's own 6.1 zsmalloc (gcc-12, kernel flags, Debian's config), built into the same
# binaries where linux-source-6.1 is installed: its pair is zs_malloc + zs_map_object, memcpy,
# zs_unmap_object + zs_free (6.1 has no zs_store()).
KERNEL = "kernel"
KERNEL_PAIR = "zs_malloc+zs_obj_write+zs_free"
# The baselines with zsm's copy in place of memcpy (bench/variants.h, *_zcopy): the copy held
# equal, so that a ratio compares the allocators alone.
HELD_PAIR = "malloc+zs_memcpy+free"


def has_kernel(count_binary):
    """Whether the build has the kernel variant (bench/CMakeLists.txt)."""
    return subprocess.run([count_binary, KERNEL, "write", "784", "10"],
                          capture_output=True).returncode == 0


# A benchmark is noisy when its repetitions spread, (max - min) / median, by more than this.
# Why 10 %: the figures this job is read for are ratios (zsm over mimalloc, zsm's copy over
# memcpy) judged against limits 5-10 % apart (1.0x and 1.1x; "no more than 5 % slower"); a
# median whose repetitions spread by more than 10 % cannot tell those apart. Cells of such
# benchmarks are marked '~', and a run where more than a quarter of them are is reported as
# too noisy to trust.
NOISY = 0.10
NOISY_SHARE = 0.25
COPY_FLAGS = ("erms", "fsrm", "avx2", "avx512f")


def machine():
    """What the timings depend on: CPU model, the copy-relevant flags, glibc and the size from
    which its memcpy uses rep movsb (ld.so --list-tunables), the cores and the load."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or "unknown"
    except (ValueError, OSError):
        libc = "unknown"
    movsb = "unknown"
    for ld in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        if os.path.exists(ld):
            out = subprocess.run([ld, "--list-tunables"], capture_output=True, text=True).stdout
            m = re.search(r"x86_rep_movsb_threshold: (0x[0-9a-f]+)", out)
            movsb = f"{int(m.group(1), 16)} B" if m else "not used (no x86 tunable)"
            break
    return {"cpu": model, "flags": {f: f in flags for f in COPY_FLAGS}, "glibc": libc,
            "rep_movsb_threshold": movsb, "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "cpus": os.cpu_count(), "load": os.getloadavg()}


def print_machine(m, load_after):
    flags = " ".join(f"{f}={'yes' if on else 'no'}" for f, on in m["flags"].items())
    print(f"Machine: {m['cpu']}, {m['cpus']} CPUs; {flags}; {m['glibc']}, memcpy uses rep movsb "
          f"from {m['rep_movsb_threshold']}"
          + (f" (GLIBC_TUNABLES={m['glibc_tunables']})" if m["glibc_tunables"] else ""))
    print(f"Load average (1 min) before the run {m['load'][0]:.2f}, after {load_after:.2f}")


def spread(values):
    """(max - min) / median of a benchmark's repetitions."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


def print_noise(benches):
    """The verdict on the timings: how many benchmarks spread by more than NOISY."""
    rows = [(name, r["spread"]) for b in benches for name, r in b.items() if r["repetitions"] > 1]
    noisy = [r for r in rows if r[1] > NOISY]
    worst = max(rows, key=lambda r: r[1]) if rows else ("-", 0.0)
    share = len(noisy) / len(rows) if rows else 0.0
    verdict = ("TOO NOISY TO TRUST: rerun on a quieter machine (or with --full)"
               if share > NOISY_SHARE else "quiet enough")
    # A one-thread benchmark that had its CPU all the time has cpu_time / real_time near 1.
    had = [r["cpus"] for b in benches for name, r in b.items() if "threads:2" not in name]
    print(f"Timing noise: {len(noisy)} of {len(rows)} benchmarks spread by more than "
          f"{100 * NOISY:.0f} % across repetitions (marked ~; worst {100 * worst[1]:.0f} %, "
          f"{worst[0]}); one-thread benchmarks had their CPU "
          f"{100 * statistics.median(had) if had else float('nan'):.0f} % of the time "
          f"(median cpu_time / real_time): {verdict}")


def step(msg, start):
    print(f"[main] {time.time() - start:5.0f} s  {msg}", file=sys.stderr, flush=True)


def run_pair_bench(binary, out, full):
    """{run name: median real time (ns), the spread of the real times (see spread()), median
    items per second, median CPUs used (cpu_time / real_time), the medians of the lock
    counters where the run has them, repetitions}."""
    reps, min_time = (9, 0.5) if full else (3, 0.05)
    return summarise(gbench.run(binary, [f"--benchmark_repetitions={reps}",
                                         f"--benchmark_min_time={min_time}",
                                         "--benchmark_enable_random_interleaving=true"], out))


def summarise(data):
    """{run name: summary of its repetitions}, for any Google Benchmark JSON."""
    def summary(rs):
        row = {"ns": statistics.median(gbench.ns(r, "real") for r in rs),
               "spread": spread([gbench.ns(r, "real") for r in rs]),
               "items_per_second": statistics.median(r["items_per_second"] for r in rs),
               "cpus": statistics.median(gbench.ns(r, "cpu") / gbench.ns(r, "real") for r in rs),
               "repetitions": len(rs)}
        for counter in ("lock_waits", "shard_moves"):
            if counter in rs[0]:
                row[counter] = statistics.median(r[counter] for r in rs)
        return row

    return {name: summary(rs) for name, rs in gbench.iterations(data).items()}


def run_copy_bench(binary, out, full):
    """{run name: summary} of zsm_copy_bench, as run_pair_bench()."""
    reps, min_time = (9, 0.1) if full else (3, 0.02)
    return summarise(gbench.run(binary, [f"--benchmark_repetitions={reps}",
                                         f"--benchmark_min_time={min_time}",
                                         "--benchmark_filter=/(memcpy|zsm)/",
                                         "--benchmark_enable_random_interleaving=true"], out))


def print_copy(copy):
    """The copy alone: memcpy and zsm's copy per size, place and direction, zsm over memcpy."""
    places = [(d, p) for p in ("inpage", "split") for d in ("into", "out")]
    print()
    print("The copy alone (bench/zsm_copy_bench): ns per object copied, memcpy / zsm's "
          "copy_payload() (zsm/memcpy), into a page (a store) and out of it (a read), at the "
          "payload offsets of a zspage of the size's class (8 mod 16), whole in a page or "
          "split at its end; '-': no slot of that kind in the class")
    hdr = f"{'size':>5} | " + " | ".join(f"{d + ' ' + p:^22}" for d, p in places)
    print(hdr)
    print("-" * len(hdr))
    for s in SIZES:
        cells = []
        for d, p in places:
            m = copy.get(f"copy/{d}/{p}/memcpy/{s}")
            z = copy.get(f"copy/{d}/{p}/zsm/{s}")
            if m and z:
                mark = "~" if max(m["spread"], z["spread"]) > NOISY else " "
                cells.append(f"{m['ns']:6.1f} {z['ns']:6.1f} ({z['ns'] / m['ns']:4.2f}){mark}")
            else:
                cells.append(f"{'-':^22}")
        print(f"{s:>5} | " + " | ".join(cells))


def run_memory_bench(binary, out, full):
    pages = 100000 if full else 20000
    text = subprocess.run([binary, f"--pages={pages}", "--json"], check=True,
                          capture_output=True, text=True).stdout
    with open(out, "w") as fh:
        fh.write(text)
    return json.loads(text)


def memcpy_note(flags):
    """What the baselines' bracketed counts run: valgrind has no AVX-512, so under callgrind
    glibc's memcpy takes its AVX2 form even where the CPU would run the AVX-512 one."""
    native = ("an AVX-512 form (this CPU has avx512f; __memcpy_avx512_unaligned_erms on the "
              "Intel Xeon and AMD EPYC VMs where that was checked with gdb)"
              if flags.get("avx512f")
              else "the same AVX2 form (this CPU has no avx512f)" if flags.get("avx2")
              else "its SSE2 form")
    return ("Note: valgrind has no AVX-512, so callgrind runs the baselines' memcpy in glibc's "
            "AVX2 form (__memcpy_avx_unaligned_erms); natively they run " + native + ", "
            "with fewer instructions: their bracketed counts overstate them. zsm's own copy "
            "is the same code natively and under callgrind.")


def print_summary(bench, copy, counts, memory, kernel=False, flags=None):
    def ns(name):
        return bench[name]["ns"] if name in bench else float("nan")

    def mark(name):
        return "~" if name in bench and bench[name]["spread"] > NOISY else " "

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
          "patched/baseline = locked path (no cache, one shard); zsm/xx = cached over xx; "
          "xx= = the baseline with zsm's copy in place of memcpy (the copy held equal: "
          "malloc+zs_memcpy+free), zsm/xx= = cached over it; "
          f"~ = repetitions spread by more than {100 * NOISY:.0f} %"
          + ("; kernel = the kernel's own 6.1 mm/zsmalloc.c (gcc-12, kernel flags), "
             "zs_malloc + zs_map_object/memcpy/zs_unmap_object + zs_free" if kernel else ""))
    held = [f"{a}=" for a in MALLOCS]
    hdr = (f"{'size':>5} | " + " ".join(f"{a:>9}" for a in zsm) + " | "
           + " ".join(f"{a:>9}" for a in MALLOCS) + " | "
           + " ".join(f"{a:>9}" for a in held) + " | "
           + " ".join(f"{'zsm/' + short:>6}" for short, _ in ratios) + " "
           + " ".join(f"{'zsm/' + short + '=':>7}" for short, _ in ratios))
    print(hdr)
    print("-" * len(hdr))
    for s in [*SIZES, "mixed"]:
        names = {**{a: pair_name(a, s) for a in (*zsm, *MALLOCS)},
                 **{f"{a}=": f"{HELD_PAIR}/{a}/{s}" for a in MALLOCS}}
        t = {a: ns(n) for a, n in names.items()}
        m = {a: mark(n) for a, n in names.items()}
        print(f"{s:>5} | " + " ".join(f"{t[a]:8.1f}{m[a]}" for a in zsm) + " | "
              + " ".join(f"{t[a]:8.1f}{m[a]}" for a in MALLOCS) + " | "
              + " ".join(f"{t[a]:8.1f}{m[a]}" if names[a] in bench else f"{'-':>8} "
                         for a in held) + " | "
              + " ".join(f"{t['cached'] / t[a]:6.2f}" for _, a in ratios) + " "
              + " ".join(f"{t['cached'] / t[a + '=']:7.2f}" if names[a + "="] in bench
                         else f"{'-':>7}" for _, a in ratios))

    print()
    print("Instructions per pair (callgrind): allocator only, without the copy (memcpy, zsm's "
          "copy_payload) and the benchmark loop; in brackets: with the copy and loop")
    print(memcpy_note(flags or {}))
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
          + ", ".join(f"{s}: {ns(f'zs_obj_read+copy/cached/{s}'):.1f}"
                      f"{mark(f'zs_obj_read+copy/cached/{s}').strip()}" for s in SIZES))

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

    print_copy(copy)

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
    host = machine()

    step("1/4 Google Benchmark: pairs, reads, threads, baselines", start)
    bench = run_pair_bench(os.path.join(args.build, "bench", "zsm_pair_bench"),
                           os.path.join(out, "pair_bench.json"), args.full)
    step("2/4 Google Benchmark: the copy alone", start)
    copy = run_copy_bench(os.path.join(args.build, "bench", "zsm_copy_bench"),
                          os.path.join(out, "copy_bench.json"), args.full)
    load_after = os.getloadavg()[0]
    step("3/4 callgrind: instructions per pair", start)
    pairs = 100000 if args.full else 20000
    count_binary = os.path.join(args.build, "bench", "zsm_pair_count")
    kernel = has_kernel(count_binary)
    allocators = list(count_pairs.FAMILIES) + ([KERNEL] if kernel else [])
    counts = count_pairs.count(count_binary, allocators, SIZES, pairs,
                               use_perf=count_pairs.perf_works(), progress=True)
    count_pairs.save(os.path.join(out, "instructions.json"), pairs, counts)
    step("4/4 memory efficiency on real compressed pages", start)
    memory = run_memory_bench(os.path.join(args.build, "bench", "zsm_memory_bench"),
                              os.path.join(out, "memory.json"), args.full)
    step(f"done; raw results in {out}", start)
    with open(os.path.join(out, "machine.json"), "w") as fh:
        json.dump({**host, "load_after": load_after}, fh, indent=1)
    print()
    print_machine(host, load_after)
    print_noise([bench, copy])
    print_summary(bench, copy, counts, memory, kernel, host["flags"])


if __name__ == "__main__":
    main()
