#!/usr/bin/python3
"""The A/B of the inline policies, one command: does always-inline obj_malloc/obj_free/
obj_write with noinline alloc_zspage (`patched`) pay against letting the compiler decide
(`baseline`), with which compiler, at what code size? The userspace form of the table in
the mail "Re: [PATCH] mm/zsmalloc: inline obj_malloc() and obj_free()" (LKML,
2026-11-05). tools/run-ab.sh installs what is missing and
runs this; docs/ab.md, says how to read the result.

Per compiler (g++ 12, Debian's default, clang++-19 and clang++-22, the mail's Clang; Debian 12
packages no GCC 15), everything else identical, it builds
under --out (build/ab/<compiler>/<O2|pgo>-<kind>/):
  combined          both variants in one binary (zsm_pair_bench, zsm_pair_count)
  patched/baseline  one variant each (zsm_pair_bench), to rule out code-layout effects
with -O2 -g -DNDEBUG (CMake's RelWithDebInfo, as the test build; clang adds -gdwarf-4 for
valgrind) plus --cxxflags; with --pgo the same three again, each trained on a short
zsm_pair_bench run of its own variants (gcc -fprofile-generate/-fprofile-use; clang
-fprofile-instr-generate, llvm-profdata-19/-22, -fprofile-instr-use): the userspace stand-in for
the mail's AutoFDO rows. Then, per configuration (compiler x PGO), for both pairs
(zs_store+zs_free, zs_malloc+zs_obj_write+zs_free) and every size:
  instructions  callgrind, exact (tools/lib/count_pairs.py on the combined zsm_pair_count)
  time          Google Benchmark CPU time per pair in the combined binary (repetitions,
                random interleaving), and across the two separate binaries (run alternately,
                ABBA order, one repetition per run); medians and a Mann-Whitney U test per size
  code size     `nm -S -C` on the combined binary: each API function of each variant
                namespace, and any out-of-line copy of the named helpers (GCC clones too);
                `objdump -d` says which functions each API body still calls
The variants differ only by the role macros of zsm/src/base/compiler.h; --patched-defs and
--baseline-defs override any of them per variant, so any other attribute change can be A/B'd
(--functions and --helpers name what to size).

Output in --out: ab.txt (what is printed: the mail's lines per configuration and the markdown
table), results.md, results.json (every raw figure), ab.png (gnuplot), and the raw Google
Benchmark and callgrind JSON under <compiler>/<O2|pgo>-results/.

--write-golden instead builds only the combined binaries and writes the golden fast-path
counts (tools/lib/golden.py) for each compiler.

--arch arm64 cross-compiles the same A/B for arm64 (Debian's aarch64-linux-gnu-g++-12, and
clang++-19/-22 --target=aarch64-linux-gnu linked by their own lld) and counts it under
qemu-aarch64 (tools/lib/qemu_count.py, whose method is checked on a loop of known length first
and named in the header): only the pool library and zsm_pair_count, linked static
(ZSM_POOL_ONLY: no compressor, Google Benchmark or valgrind for arm64), one binary per
compiler, instructions and code sizes (aarch64 binutils); no time, since emulated time means
nothing. Output in build/ab-arm64/ unless --out says otherwise.

The pool is the locked path (POOL below); the same instruction counts are also taken on the
default pool, per-thread caches on (cached, cached_baseline), and reported apart: they show
how much of the inlining question the caches leave.

Usage: ab.py [--arch x86_64|arm64] [--compilers gcc,clang,clang22] [--pgo] [--cxxflags FLAGS]
             [--patched-defs DEF]... [--baseline-defs DEF]... [--sizes 384,...] [--quick]
             [--out DIR]
       ab.py --write-golden [--compilers gcc,clang,clang22] [--golden FILE]
"""
import argparse
import concurrent.futures
import dataclasses
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_analysis  # noqa: E402
import ab_report  # noqa: E402
import cli_args  # noqa: E402
import count_pairs  # noqa: E402
import gbench  # noqa: E402
import golden  # noqa: E402
import progress as progress_lines  # noqa: E402
import qemu_count  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_FLAGS = "-O2 -g -DNDEBUG"
@dataclasses.dataclass(frozen=True)
class Compiler:
    cc: str
    cxx: str
    debug_flag: str  # valgrind 3.19 cannot read clang's default DWARF 5 ("possibly corrupted
                     # debuginfo"); -gdwarf-4 changes no instruction of the code
    profdata: str = ""  # clang's profile merger, for --pgo


# g++ 12 (Debian's default), clang 19 and clang 22 (the mail's Clang; Debian 12 has no GCC 15).
COMPILERS = {"gcc": Compiler("gcc", "g++", ""),
             "clang": Compiler("clang-19", "clang++-19", "-gdwarf-4", "llvm-profdata-19"),
             "clang22": Compiler("clang-22", "clang++-22", "-gdwarf-4", "llvm-profdata-22")}
# The pool the policies are compared on: the locked path (bench/variants.h).
POOL = ("the locked path: pools with ZS_POOL_NO_THREAD_CACHE and nr_shards = 1 (one lock and "
        "one set of fullness lists per class, as the kernel), 4 KiB pages, chain 8; the "
        "locked path's functions (locked_path::store/malloc/free, zsm's zs_malloc/zs_free) "
        "called directly")
KINDS = ("combined", "patched", "baseline")
JOBS = os.cpu_count() or 1
ARCHES = ("x86_64", "arm64")
# arm64: (C, C++ compiler) per key of COMPILERS, and the target the clangs are given; the clangs
# link with their own lld (lld-19, lld-22), the cross gcc with its binutils' ld.
ARM64_TARGET = "aarch64-linux-gnu"
ARM64_COMPILERS = {"gcc": ("aarch64-linux-gnu-gcc-12", "aarch64-linux-gnu-g++-12"),
                   "clang": ("clang-19", "clang++-19"), "clang22": ("clang-22", "clang++-22")}
ARM64_BINUTILS = "aarch64-linux-gnu-"
# What an arm64 run needs, per compiler key (None: every run), as (program, Debian package).
ARM64_TOOLS = {None: [("qemu-aarch64", "qemu-user"),
                      ("aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu"),
                      ("/usr/aarch64-linux-gnu/lib/libc.a", "libc6-dev-arm64-cross"),
                      ("clang-22", "clang-22")],  # qemu_count builds its known loop with it
               "gcc": [("aarch64-linux-gnu-g++-12", "g++-aarch64-linux-gnu")],
               "clang": [("clang++-19", "clang-19"), ("/usr/lib/llvm-19/bin/ld.lld", "lld-19")],
               "clang22": [("clang++-22", "clang-22"),
                           ("/usr/lib/llvm-22/bin/ld.lld", "lld-22")]}


class Progress:
    """'[ab] <what>, <elapsed> s' lines on stderr."""

    def __init__(self):
        self.start = time.time()

    def __call__(self, msg):
        print(f"[ab] {msg}, {time.time() - self.start:.0f} s", file=sys.stderr, flush=True)

    def elapsed(self):
        return time.time() - self.start


@dataclasses.dataclass(frozen=True)
class Build:
    compiler: str  # a key of COMPILERS
    pgo: bool
    kind: str  # a member of KINDS
    arch: str = "x86_64"  # a member of ARCHES

    def dir(self, out):
        return os.path.join(out, self.compiler, f"{'pgo' if self.pgo else 'O2'}-{self.kind}")

    def variants(self):
        return list(ab_analysis.VARIANTS) if self.kind == "combined" else [self.kind]

    def targets(self):
        if self.arch == "arm64":
            return ["zsm_pair_count"]
        return ["zsm_pair_bench", "zsm_pair_count"] if self.kind == "combined" \
            else ["zsm_pair_bench"]

    def name(self):
        kind = "combined" if self.kind == "combined" else f"separate:{self.kind}"
        if self.arch == "arm64":
            return f"{ARM64_COMPILERS[self.compiler][1]} arm64 {kind}"
        return f"{COMPILERS[self.compiler].cxx}{' +PGO' if self.pgo else ''} {kind}"


# --- building ---------------------------------------------------------------------------------

def run_logged(cmd, log, env=None):
    """Runs cmd with its output appended to log; on failure, stops with the log's tail."""
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        with open(log) as fh:
            tail = fh.read()[-3000:]
        sys.exit(f"[ab] failed: {' '.join(cmd)}\n{tail}\n(full log: {log})")


def build_flags(compiler, args):
    """Every build's flags, before any PGO flag: what the golden entries are keyed by."""
    return " ".join(f for f in (BASE_FLAGS, COMPILERS[compiler].debug_flag, args.cxxflags) if f)


def compiler_args(build):
    """The CMake arguments that choose the compilers: the host's, or for arm64 the cross build
    of the pool library and zsm_pair_count alone (ZSM_POOL_ONLY), linked static."""
    if build.arch == "x86_64":
        return [f"-DCMAKE_C_COMPILER={COMPILERS[build.compiler].cc}",
                f"-DCMAKE_CXX_COMPILER={COMPILERS[build.compiler].cxx}"]
    cc, cxx = ARM64_COMPILERS[build.compiler]
    cross = ["-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
             f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}", "-DZSM_POOL_ONLY=ON",
             "-DZSM_BUILD_SHARED=OFF"]
    if build.compiler != "gcc":
        cross += [f"-DCMAKE_C_COMPILER_TARGET={ARM64_TARGET}",
                  f"-DCMAKE_CXX_COMPILER_TARGET={ARM64_TARGET}",
                  "-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld"]
    return cross


def cmake_build(build, args, extra_flags, targets):
    d = build.dir(args.out)
    flags = " ".join([build_flags(build.compiler, args), extra_flags]).strip()
    log = d + ".log"
    run_logged(["cmake", "-S", ROOT, "-B", d, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=None",
                *compiler_args(build),
                f"-DCMAKE_CXX_FLAGS={flags}",
                "-DZSM_BUILD_TESTS=OFF", "-DZSM_BUILD_TOOLS=OFF", "-DZSM_BENCH_OVERHEAD=OFF",
                f"-DZSM_BENCH_VARIANTS={';'.join(build.variants())}",
                f"-DZSM_BENCH_PATCHED_DEFS={';'.join(args.patched_defs)}",
                f"-DZSM_BENCH_BASELINE_DEFS={';'.join(args.baseline_defs)}"], log)
    run_logged(["cmake", "--build", d, "--target", *targets], log)


def pgo_flags(build, d):
    """(instrument, use) flags of a PGO build whose profile lives in d."""
    if build.compiler == "gcc":  # .gcda files land next to the objects in d
        return "-fprofile-generate", "-fprofile-use -Wno-missing-profile"
    return "-fprofile-instr-generate", f"-fprofile-instr-use={d}/pgo.profdata"


def bench_filter(variants, sizes):
    fams = "|".join(re.escape(f) for f in ab_analysis.FAMILIES.values())
    return f"^({fams})/({'|'.join(variants)})/({'|'.join(map(str, sizes))})$"


def train(build, args):
    """The PGO training run: the measured benchmarks of this build, briefly."""
    d = build.dir(args.out)
    env = dict(os.environ, LLVM_PROFILE_FILE=os.path.join(d, "pgo-%p.profraw"))
    run_logged([os.path.join(d, "bench", "zsm_pair_bench"),
                f"--benchmark_filter={bench_filter(build.variants(), args.sizes)}",
                f"--benchmark_min_time={args.train_time}"], d + ".log", env)
    if COMPILERS[build.compiler].profdata:
        run_logged([COMPILERS[build.compiler].profdata, "merge", "-o", os.path.join(d, "pgo.profdata"),
                    *glob.glob(os.path.join(d, "pgo-*.profraw"))], d + ".log")


def build_one(build, args):
    d = build.dir(args.out)
    os.makedirs(os.path.dirname(d), exist_ok=True)
    if os.path.exists(d + ".log"):
        os.remove(d + ".log")
    if not build.pgo:
        cmake_build(build, args, "", build.targets())
        return
    shutil.rmtree(d, ignore_errors=True)  # no profile of an earlier run may leak in
    instrument, use = pgo_flags(build, d)
    cmake_build(build, args, instrument, ["zsm_pair_bench"])
    train(build, args)
    cmake_build(build, args, use, build.targets())


def compiler_of(d):
    """(CMake compiler id, version) of a configured build directory."""
    for path in glob.glob(os.path.join(d, "CMakeFiles", "*", "CMakeCXXCompiler.cmake")):
        with open(path) as fh:
            text = fh.read()
        cid = re.search(r'set\(CMAKE_CXX_COMPILER_ID "([^"]*)"\)', text)
        ver = re.search(r'set\(CMAKE_CXX_COMPILER_VERSION "([^"]*)"\)', text)
        if cid and ver:
            return cid.group(1), ver.group(1)
    raise RuntimeError(f"no compiler identification in {d}")


# --- measuring --------------------------------------------------------------------------------

def count_instructions(binary, sizes, pairs, out_json):
    """Both policies on the locked path, and on the default pool (per-thread caches on)."""
    variants = (*ab_analysis.VARIANTS, *ab_analysis.CACHED_VARIANTS.values())
    results = count_pairs.count(binary, variants, sizes, pairs)
    count_pairs.save(out_json, pairs, results)
    return results


def count_instructions_arm64(binary, sizes, pairs, out_json, counter):
    """count_instructions() under qemu-aarch64 (qemu_count.pair_counts(), the same split as
    callgrind's), `JOBS` runs at a time, in count_pairs.count()'s order."""
    variants = (*ab_analysis.VARIANTS, *ab_analysis.CACHED_VARIANTS.values())
    runs = [(a, f, s) for a in variants for f in count_pairs.ALL[a] for s in sizes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = list(pool.map(lambda r: qemu_count.pair_counts(counter, binary, *r, pairs),
                                runs))
    count_pairs.save(out_json, pairs, results)
    return results


def run_bench(binary, variants, args, repetitions, out_json):
    """One zsm_pair_bench run of the measured benchmarks; their samples."""
    flags = [f"--benchmark_filter={bench_filter(variants, args.sizes)}",
             f"--benchmark_repetitions={repetitions}", f"--benchmark_min_time={args.min_time}",
             "--benchmark_enable_random_interleaving=true"]
    try:
        return ab_analysis.bench_samples(gbench.run(binary, flags, out_json))
    except RuntimeError as e:
        sys.exit(f"[ab] failed: {e}")


def time_separate(builds, args, results, progress, label):
    """The two single-variant binaries, run alternately (ABBA...), one repetition each."""
    runs = []
    for i in range(args.runs):
        order = builds if i % 2 == 0 else builds[::-1]
        for n, b in enumerate(order):
            progress(f"{label}: separate binaries, run {2 * i + n + 1}/{2 * args.runs} "
                     f"({b.kind})")
            runs.append(run_bench(os.path.join(b.dir(args.out), "bench", "zsm_pair_bench"),
                                  [b.kind], args, 1,
                                  os.path.join(results, f"separate-{b.kind}-{i}.json")))
    return ab_analysis.merge_samples(runs)


def code(binary, functions, binutils_prefix=""):
    """Symbols of both variants, and what each API body calls out of line (binutils_prefix:
    the cross binutils of another architecture's binary, e.g. aarch64-linux-gnu-)."""
    nm = subprocess.run([binutils_prefix + "nm", "-S", "-C", binary], check=True,
                        capture_output=True, text=True).stdout
    dis = subprocess.run([binutils_prefix + "objdump", "-d", "-C", "--no-show-raw-insn", binary],
                         check=True, capture_output=True, text=True).stdout
    return ab_analysis.parse_nm(nm), ab_analysis.callees(ab_analysis.parse_calls(dis),
                                                         functions)


def config_label(compiler_id, version, pgo, args):
    name = {"GNU": "g++", "Clang": "clang"}.get(compiler_id, compiler_id)
    extra = f" {args.cxxflags}" if args.cxxflags else ""
    arch = ", arm64" if args.arch == "arm64" else ""
    return f"{name} {version} -O2{extra}{' +PGO' if pgo else ''}{arch}"


def measure_config(compiler, pgo, args, progress):
    """Every raw figure of one configuration (compiler x PGO)."""
    combined = Build(compiler, pgo, "combined")
    d = combined.dir(args.out)
    cid, version = compiler_of(d)
    label = config_label(cid, version, pgo, args)
    results = os.path.join(args.out, compiler, f"{'pgo' if pgo else 'O2'}-results")
    os.makedirs(results, exist_ok=True)
    progress(f"{label}: callgrind, {8 * len(args.sizes)} runs")
    instructions = count_instructions(os.path.join(d, "bench", "zsm_pair_count"), args.sizes,
                                      args.pairs, os.path.join(results, "instructions.json"))
    symbols, callees = code(os.path.join(d, "bench", "zsm_pair_bench"), args.functions)
    progress(f"{label}: one binary, {args.repetitions} repetitions")
    one = run_bench(os.path.join(d, "bench", "zsm_pair_bench"), ab_analysis.VARIANTS, args,
                    args.repetitions, os.path.join(results, "one_binary.json"))
    separate = time_separate([Build(compiler, pgo, "patched"), Build(compiler, pgo, "baseline")],
                             args, results, progress, label)
    raw = {"instructions": instructions, "symbols": symbols, "callees": callees,
           "time": {"one_binary": one, "separate": separate}}
    return {"label": label, "compiler": compiler, "compiler_id": cid, "version": version,
            "pgo": pgo, "flags": build_flags(compiler, args), "raw": raw,
            "summary": ab_analysis.summarize(raw, args.sizes, args.functions, args.helpers)}


def measure_config_arm64(compiler, args, progress, counter):
    """measure_config() for arm64: instructions under qemu and code sizes, no time."""
    d = Build(compiler, False, "combined", "arm64").dir(args.out)
    cid, version = compiler_of(d)
    label = config_label(cid, version, False, args)
    results = os.path.join(args.out, compiler, "O2-results")
    os.makedirs(results, exist_ok=True)
    binary = os.path.join(d, "bench", "zsm_pair_count")
    progress(f"{label}: qemu-aarch64, {8 * len(args.sizes)} runs")
    try:
        instructions = count_instructions_arm64(binary, args.sizes, args.pairs,
                                                os.path.join(results, "instructions.json"),
                                                counter)
    except qemu_count.CountError as e:
        sys.exit(f"[ab] failed: {e}")
    symbols, callees = code(binary, args.functions, ARM64_BINUTILS)
    raw = {"instructions": instructions, "symbols": symbols, "callees": callees, "time": None}
    return {"label": label, "compiler": compiler, "compiler_id": cid, "version": version,
            "pgo": False, "arch": "arm64", "flags": build_flags(compiler, args), "raw": raw,
            "summary": ab_analysis.summarize(raw, args.sizes, args.functions, args.helpers)}


# --- the two commands -------------------------------------------------------------------------

def build_all(builds, args, progress):
    start = time.time()
    for n, b in enumerate(builds, 1):
        progress(f"build {n}/{len(builds)} {b.name()}"
                 f"{progress_lines.eta(start, n - 1, len(builds))}")
        build_one(b, args)


def measure_all(pairs, measure, progress):
    """[measure(config) for config in pairs], each announced with how long the rest takes."""
    start, results = time.time(), []
    for n, config in enumerate(pairs, 1):
        progress(f"configuration {n}/{len(pairs)}{progress_lines.eta(start, n - 1, len(pairs))}")
        results.append(measure(config))
    return results


def header(args):
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            m = re.search(r"^model name\s*:\s*(.*)$", fh.read(), re.M)
            cpu = m.group(1) if m else cpu
    lines = [f"A/B of the inline policies on {platform.machine()}, {cpu}, {JOBS} CPUs: "
             "patched (zsm/src/base/compiler.h: ZSM_OBJ_HELPER, ZSM_WRITE_HELPER always-inline, "
             "ZSM_ZSPAGE_HELPER noinline) vs baseline (plain static: the compiler decides)",
             f"pool: {POOL}",
             f"time: CPU time per pair, {args.repetitions} repetitions in one binary "
             f"(random interleaving) and {args.runs} runs of each separate binary, "
             f"min time {args.min_time} s; instructions: callgrind, {args.pairs} pairs"]
    if args.patched_defs or args.baseline_defs:
        lines.append(f"role macro overrides: patched {', '.join(args.patched_defs) or 'none'}; "
                     f"baseline {', '.join(args.baseline_defs) or 'none'}")
    if args.quick:
        lines.append("QUICK RUN: too few repetitions for any conclusion about time")
    return lines


def header_arm64(args, method):
    """header() for arm64: where it ran, the counting method and its check, no time."""
    lines = header(args)
    lines[0] = lines[0].replace(f"on {platform.machine()}, ",
                                f"on arm64, cross-compiled and run under qemu-aarch64 on "
                                f"{platform.machine()}, ", 1)
    lines[2] = (f"instructions: qemu-aarch64 -singlestep -d nochain,exec, {args.pairs} pairs "
                f"({method}); time: not reported, emulated time means nothing")
    return [line for line in lines if not line.startswith("QUICK RUN")]


def missing_arm64_tool(compilers):
    """'PROGRAM (Debian package PACKAGE)' for the first tool an arm64 run of these compilers
    lacks, or None."""
    for key in (None, *compilers):
        for tool, package in ARM64_TOOLS[key]:
            if not (os.path.exists(tool) if tool.startswith("/") else shutil.which(tool)):
                return f"{tool} (Debian package {package})"
    return None


def ab_arm64(args, progress):
    """The A/B cross-compiled for arm64 and counted under qemu (no time, no plot)."""
    missing = missing_arm64_tool(args.compilers)
    if missing:
        sys.exit(f"[ab] --arch arm64 needs {missing}: tools/run-ab.sh installs it")
    try:
        tools = os.path.join(args.out, "qemu")
        method = qemu_count.check_method(tools)
        counter = qemu_count.trace_counter(tools)
    except qemu_count.CountError as e:
        sys.exit(f"[ab] failed: {e}")
    progress(method)
    build_all([Build(c, False, "combined", "arm64") for c in args.compilers], args, progress)
    configs = measure_all(args.compilers,
                          lambda c: measure_config_arm64(c, args, progress, counter), progress)
    progress("report")
    head = header_arm64(args, method)
    settings = {k: v for k, v in vars(args).items() if k != "write_golden"}
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump({"header": head, "settings": settings, "configs": configs}, fh, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write(ab_report.mail_comparison(configs) + "\n" + ab_report.markdown(configs))
    text = "\n".join(head) + "\n\n" + ab_report.report(configs) + \
        f"\nraw figures: {args.out}/results.json; table: results.md; " \
        f"{progress.elapsed():.0f} s in all\n"
    with open(os.path.join(args.out, "ab.txt"), "w") as fh:
        fh.write(text)
    print(text)


def ab(args, progress):
    modes = [False, True] if args.pgo else [False]
    build_all([Build(c, pgo, k) for c in args.compilers for pgo in modes for k in KINDS],
              args, progress)
    configs = measure_all([(c, pgo) for c in args.compilers for pgo in modes],
                          lambda cp: measure_config(cp[0], cp[1], args, progress), progress)
    progress("report")
    settings = {k: v for k, v in vars(args).items() if k != "write_golden"}
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump({"header": header(args), "settings": settings, "configs": configs}, fh,
                  indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write(ab_report.mail_comparison(configs) + "\n" + ab_report.markdown(configs))
    png = ab_report.plot(configs, args.out)
    text = "\n".join(header(args)) + "\n\n" + ab_report.report(configs) + \
        f"\nraw figures: {args.out}/results.json; table: results.md; plot: {png}; " \
        f"{progress.elapsed():.0f} s in all\n"
    with open(os.path.join(args.out, "ab.txt"), "w") as fh:
        fh.write(text)
    print(text)


def write_golden(args, progress):
    if args.patched_defs or args.baseline_defs:
        sys.exit("--write-golden records the policies as they are: no role macro overrides")
    build_all([Build(c, False, "combined") for c in args.compilers], args, progress)
    for c in args.compilers:
        d = Build(c, False, "combined").dir(args.out)
        cid, version = compiler_of(d)
        progress(f"golden counts, {cid} {version}")
        counts = golden.measure(os.path.join(d, "bench", "zsm_pair_count"),
                                count_pairs.SIZES)
        golden.write_entry(args.golden, cid, version,
                           build_flags(c, args), counts)
    print(f"wrote {args.golden}")


def fill_run_defaults(args):
    """The run settings left unset on the command line, quick or full (shared with
    kernel_ab.py), and --sizes as a list."""
    quick = args.quick
    defaults = {"sizes": [784] if quick else list(count_pairs.SIZES),
                "repetitions": 3 if quick else 9, "runs": 3 if quick else 9,
                "min_time": 0.01 if quick else 0.25, "pairs": 2000 if quick else 20000}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)


def add_run_arguments(ap):
    """The run settings ab.py and kernel_ab.py share, each checked as it is parsed."""
    ap.add_argument("--sizes", type=cli_args.size_list(count_pairs.SIZES),
                    help="object sizes (default: the mail's 8, 384..3136)")
    ap.add_argument("--repetitions", type=cli_args.positive_int,
                    help="Google Benchmark repetitions (9)")
    ap.add_argument("--runs", type=cli_args.positive_int, help="runs of each separate binary (9)")
    ap.add_argument("--min-time", type=cli_args.positive_float,
                    help="seconds per benchmark run (0.25)")
    ap.add_argument("--pairs", type=cli_args.positive_int, help="pairs per callgrind run (20000)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: size 784, 3 repetitions and runs, short runs")


def name_list(ap, flag, text, known):
    """A comma-separated list of names from `known`, or a one-line error naming the rest."""
    names = text.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"{flag} {text}: unknown {', '.join(map(repr, unknown))}; "
                 f"expected any of {', '.join(known)}")
    return names


def output_dir(ap, path):
    """--out created (with its parents), or a one-line error saying why it cannot be."""
    try:
        return cli_args.output_dir(path)
    except cli_args.InputError as e:
        ap.error(str(e))


def parse_args(argv=None):
    ap = cli_args.OneLineParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="x86_64", choices=ARCHES,
                    help="x86_64 (native: callgrind and time) or arm64 (cross-compiled, counted "
                         "under qemu-aarch64, no time)")
    ap.add_argument("--compilers", default=",".join(COMPILERS),
                    help=f"any of {', '.join(COMPILERS)} (default: all)")
    ap.add_argument("--pgo", action="store_true", help="add a PGO build per compiler")
    ap.add_argument("--cxxflags", default="", help="added to every build's flags")
    ap.add_argument("--patched-defs", action="append", default=[], metavar="NAME=VALUE",
                    help="a definition for the patched variant only, e.g. ZSM_WRITE_HELPER=")
    ap.add_argument("--baseline-defs", action="append", default=[], metavar="NAME=VALUE",
                    help="a definition for the baseline variant only")
    ap.add_argument("--functions",
                    default="locked_path::store,locked_path::malloc,locked_path::free,zs_obj_write",
                    help="functions whose code size is compared (zsm's locked path; zs_store "
                         "and the other public names are the cached entry points)")
    ap.add_argument("--helpers", default="obj_malloc,obj_free,obj_write,alloc_zspage",
                    help="helpers reported when they have an out-of-line copy")
    add_run_arguments(ap)
    ap.add_argument("--out", help="results and builds (default build/ab, with --arch arm64 "
                                  "build/ab-arm64)")
    ap.add_argument("--write-golden", action="store_true",
                    help="write the golden fast-path counts instead of the A/B")
    ap.add_argument("--golden", default=os.path.join(ROOT, "bench", "golden", "fast_path.json"))
    args = ap.parse_args(argv)
    fill_run_defaults(args)
    args.train_time = 0.01 if args.quick else 0.05
    args.compilers = name_list(ap, "--compilers", args.compilers, list(COMPILERS))
    args.functions = args.functions.split(",")
    args.helpers = args.helpers.split(",")
    if args.arch == "arm64" and args.pgo:
        ap.error("--pgo with --arch arm64 is not supported: Debian 12 packages clang's profile "
                 "runtime for x86-64 only (tools/run-kernel-ab.sh --arch arm64 --pgo trains "
                 "on x86-64)")
    if args.arch == "arm64" and args.write_golden:
        ap.error("--write-golden records x86-64 callgrind counts: not with --arch arm64")
    args.out = output_dir(ap, args.out or os.path.join(
        ROOT, "build", "ab" if args.arch == "x86_64" else "ab-arm64"))
    if args.write_golden and os.path.isdir(args.golden):
        ap.error(f"--golden {args.golden}: is a folder, not a file")
    return args


def main():
    args = parse_args()
    progress = Progress()
    if args.write_golden:
        write_golden(args, progress)
    elif args.arch == "arm64":
        ab_arm64(args, progress)
    else:
        ab(args, progress)


if __name__ == "__main__":
    main()
