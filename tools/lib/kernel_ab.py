#!/usr/bin/python3
"""The A/B of tools/lib/ab.py on the kernel's own mm/zsmalloc.c: does the kernel mail's attribute
change (obj_malloc, obj_free and obj_write __always_inline, alloc_zspage noinline), or any
patch, pay on the real code, with which compiler, at what code size? tools/run-kernel-ab.sh
installs what is missing and runs this; docs/ab.md, "The A/B on the kernel's own code", says
how to read the result.

Per compiler (gcc-12, clang-19, clang-22) it compiles the tree's file twice in userspace
(kernel/kernel_build.py: kernel/'s shims, the kernel's flags and config): `baseline` unchanged,
`patched` with the mail's change on a copy (or --patch FILE, applied with patch -p1 to a copy),
links the drivers of kernel/ (kernel_pair_count for callgrind, kernel_pair_bench for Google
Benchmark) with both variants in one binary and with each alone, and measures, per pair the
tree has (zs_malloc + the write + zs_free; zs_store + zs_free where it has zs_store()) and
size:
  instructions  callgrind, exact (tools/lib/count_pairs.py's split: total, without the copy,
                allocator only = without the copy and the driver's loop)
  time          CPU time per pair, repetitions in one binary and alternating runs of the two
                separate binaries; medians and Mann-Whitney U (tools/lib/ab_analysis.py)
  code size     nm -S of each function of each variant, any out-of-line helper, and what each
                API body still calls (objdump -d)
and prints tools/lib/ab_report.py's report: the mail's paragraph per compiler, the mail's rows
beside ours, the markdown tables. The instruction counts include the shims' out-of-line
services (locks, slab, pages), which are shorter than the kernel's; the deltas are the
kernel's code.

With --arch arm64 the file is cross-compiled (aarch64-linux-gnu-gcc-12, clang --target=
aarch64-linux-gnu) under the arm64 kernel's flags against kernel/kshim_arm64.h, linked static,
and counted under qemu-aarch64 (tools/lib/qemu_count.py: the method is checked on a loop of
known length first and the check is printed in the header); no time is taken, code sizes and
calls are read with the aarch64 binutils. --preset names a configuration (kernel_build.PRESETS:
debian-amd64, debian-arm64, gki-arm64). --pgo (clang) rebuilds each variant with a profile
trained on the pair driver (train_profiles()).

Usage: kernel_ab.py [TREE] [--arch x86_64|arm64] [--preset NAME | --config FILE] [--patch FILE]
                    [--compilers gcc,clang,clang22] [--pgo] [--sizes 384,...] [--quick]
                    [--out DIR]
       TREE: a kernel tree (mm/zsmalloc.c); default Debian's linux-source-6.1
"""
import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The kernel builder lives beside the shims it builds with.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "kernel"))
import ab  # noqa: E402
import ab_analysis  # noqa: E402
import ab_report  # noqa: E402
import cli_args  # noqa: E402
import count_pairs  # noqa: E402
import kernel_build  # noqa: E402
import qemu_count  # noqa: E402

ROOT = kernel_build.ROOT
KINDS = ("combined", "patched", "baseline")
KSHIM_ARCH = {"x86_64": "kernel/kshim_x86_64.h: -mcmodel=small for -mcmodel=kernel",
              "arm64": "kernel/kshim_arm64.h: the per-task canary through tpidr_el0 for sp_el0"}
PROFDATA = {"clang": "llvm-profdata-19", "clang22": "llvm-profdata-22"}
CXXFLAGS = ["-std=c++20", "-O2", "-g", "-fno-pie"]


def variants_of(kind, patched_change):
    both = [("patched", patched_change), ("baseline", "none")]
    return both if kind == "combined" else [v for v in both if v[0] == kind]


def link_drivers(built, out, compiler, extra_link=()):
    """The drivers of one build, their paths: kernel_pair_count (for the counter), and on
    x86-64 kernel_pair_bench (Google Benchmark; arm64 has no time to take). arm64's are static,
    so that qemu-user needs no arm64 root and names every function in its trace."""
    arch = built["arch"]
    cxx = built["cxx"]
    dwarf = ["-gdwarf-4"] if compiler.startswith("clang") else []
    log = os.path.join(out, "build.log")
    # kservices.o first: on arm64 its task must be the executable's first thread-local object.
    objects = [built["services"][0], *built["objects"].values(), *built["services"][1:]]
    drivers = [("kernel_pair_count", [])]
    if arch == "x86_64":
        drivers.append(("kernel_pair_bench", ["-lbenchmark", "-lpthread"]))
    paths = {}
    for name, extra in drivers:
        src = os.path.join(ROOT, "bench", name + ".cpp")
        binary = os.path.join(out, name)
        link = ["-no-pie"] if arch == "x86_64" else ["-static"]
        cmd = [*cxx, *CXXFLAGS, *dwarf, "-I", out, "-I", os.path.join(ROOT, "kernel"), src,
               *objects, *link, *extra_link, "-o", binary, *extra]
        if not kernel_build.run(cmd, log):
            raise kernel_build.BuildError(f"linking {name} failed: "
                                          f"{kernel_build.log_tail(log)[-800:]}")
        paths[name] = binary
    return paths


def kinds_of(arch):
    """The builds per compiler: both variants in one binary, and on x86-64 each alone (the
    separate binaries of the time comparison)."""
    return KINDS if arch == "x86_64" else ("combined",)


def build_compiler(compiler, args, progress):
    """The builds of one compiler: {kind: (build.json, drivers)}; with --pgo, each variant's
    code compiled with the profile its own instrumented build trained (train_profiles())."""
    variant_flags = train_profiles(compiler, args, progress) if args.pgo else None
    builds = {}
    for kind in kinds_of(args.arch):
        out = os.path.join(args.out, compiler, ("pgo-" if args.pgo else "") + kind)
        progress(f"{compiler}: build {kind}{' +PGO' if args.pgo else ''}")
        built = kernel_build.build(out, args.tree, args.config, compiler,
                                   variants_of(kind, args.patch or "mail"), arch=args.arch,
                                   preset=args.preset, variant_flags=variant_flags)
        builds[kind] = (built, link_drivers(built, out, compiler))
    return builds


def training_config(args):
    """(config file, preset, overrides) of the instrumented build. The profile is clang's
    front-end one: counts of source regions, keyed by function name and a hash of each
    function's control flow, which the target does not change. Debian 12 packages clang's
    profile runtime for x86-64 only, so an arm64 run trains an x86-64 build of the same
    source, set with the arm64 config's values of every option zsmalloc.c and the shims test
    (the flag-only options do not change the source); its counts are those of the same
    driver's same pairs, and clang says so if a function's hash does not match
    (-Wprofile-instr-out-of-date, in the build log)."""
    if args.arch == "x86_64":
        return args.config, args.preset, ()
    cfg, _ = kernel_build.choose_config(args.tree, args.config, args.preset, args.arch)
    keys = sorted(kernel_build.MODELLED - {"CONFIG_ARM64", "CONFIG_X86_64"})
    return None, "debian-amd64", [(k, cfg.get(k, "n")) for k in keys]


def profile_mismatches(built, variant, args):
    """The functions of one variant's zsmalloc.c whose control-flow hash in this build differs
    from the trained profile's (clang then ignores their counts, and warns of "mismatched
    data"): its instrumented object compiled for this build's target, every __llvm_prf_data
    record (the MD5 of the function's profile name, its hash) set against llvm-profdata's
    listing. On x86-64 none should differ; on arm64 only shim primitives whose arm64 form has
    other control flow (kshim_arm64.h's LSE branch)."""
    profdata = next(f.split("=", 1)[1] for f in built["variant_flags"][variant]
                    if f.startswith("-fprofile-instr-use="))
    obj = os.path.join(built["include"], f"{variant}.instrumented.o")
    src = os.path.join(built["include"], f"src-{variant}", "mm")
    if not kernel_build.compile_c(built["cc"], [*built["flags"], "-include", "kconfig.h", "-I",
                                                os.path.join(built["include"], "include"), "-I",
                                                os.path.join(ROOT, "kernel"),
                                                "-fprofile-instr-generate", "-I", src],
                                  os.path.join(src, "zsmalloc.c"), obj,
                                  os.path.join(built["include"], "build.log")):
        raise kernel_build.BuildError(f"the instrumented {variant} object does not build "
                                      f"(log {built['include']}/build.log)")
    listing = subprocess.run([PROFDATA[built["compiler"]], "show", "--all-functions", profdata],
                             capture_output=True, text=True, check=True).stdout
    trained, name = {}, None
    for line in listing.splitlines():
        if m := re.match(r"^  (\S.*):$", line):
            name = m.group(1)
        elif (m := re.match(r"^\s+Hash: (0x[0-9a-f]+)", line)) and name:
            trained[name] = int(m.group(1), 16)
    by_ref = {struct.unpack("<Q", hashlib.md5(n.encode()).digest()[:8])[0]: n for n in trained}
    sections = subprocess.run([kernel_build.binutil("readelf", built["arch"]), "-SW", obj],
                              capture_output=True, text=True, check=True).stdout
    with open(obj, "rb") as fh:
        blob = fh.read()
    differ = []
    for m in re.finditer(r"\]\s+__llvm_prf_data\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)", sections):
        ref, fn_hash = struct.unpack_from("<QQ", blob, int(m.group(1), 16))
        if ref in by_ref and trained[by_ref[ref]] != fn_hash:
            differ.append(by_ref[ref].split(":")[-1])
    return sorted(differ)


def train_profiles(compiler, args, progress):
    """--pgo: per variant, its zsmalloc.c instrumented (clang -fprofile-instr-generate), trained
    on kernel_pair_count at every size and pair family, the profile merged (llvm-profdata);
    returns {variant: [-fprofile-instr-use=...]}."""
    if not compiler.startswith("clang"):
        raise kernel_build.BuildError(f"--pgo builds with clang only (--compilers without "
                                      f"{compiler})")
    profdata_tool = PROFDATA[compiler]
    config, preset, overrides = training_config(args)
    flags = {}
    for variant, change in variants_of("combined", args.patch or "mail"):
        out = os.path.join(args.out, compiler, f"pgo-train-{variant}")
        progress(f"{compiler}: PGO, instrumented {variant} (x86-64)")
        built = kernel_build.build(out, args.tree, config, compiler, [(variant, change)],
                                   overrides=overrides, preset=preset,
                                   variant_flags={variant: ["-fprofile-instr-generate"]})
        driver = link_drivers(built, out, compiler, ["-fprofile-instr-generate"])
        for old in glob.glob(os.path.join(out, "*.profraw")):
            os.remove(old)
        env = dict(os.environ, LLVM_PROFILE_FILE=os.path.join(out, "train-%p.profraw"))
        for family in built["form"]["families"]:
            for size in args.sizes:
                proc = subprocess.run([driver["kernel_pair_count"], variant, family, str(size),
                                       str(args.train_pairs)], env=env, capture_output=True,
                                      text=True)
                if proc.returncode != 0:
                    raise kernel_build.BuildError(f"PGO training of {variant} ({family}, "
                                                  f"{size} B) failed: {proc.stderr[-400:]}")
        profdata = os.path.join(out, f"{variant}.profdata")
        if not kernel_build.run([profdata_tool, "merge", "-o", profdata,
                                 *glob.glob(os.path.join(out, "*.profraw"))],
                                os.path.join(out, "build.log")):
            raise kernel_build.BuildError(f"{profdata_tool} merge failed (log {out}/build.log)")
        flags[variant] = [f"-fprofile-instr-use={profdata}", "-Wno-profile-instr-unprofiled"]
    return flags


def count_instructions(binary, families, sizes, pairs, out_json, arch, counter=None):
    """Every variant x family x size: callgrind on x86-64, qemu_count on arm64."""
    runs = [(v, f, s) for v in ab_analysis.VARIANTS for f in families for s in sizes]
    if arch == "x86_64":
        one = lambda r: count_pairs.run_one(binary, *r, pairs)  # noqa: E731
    else:
        one = lambda r: qemu_count.pair_counts(counter, binary, *r, pairs)  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(max_workers=ab.JOBS) as pool:
        results = list(pool.map(one, runs))
    count_pairs.save(out_json, pairs, results)
    return results


def time_separate(builds, args, results_dir, progress, label):
    """The two single-variant kernel_pair_bench binaries, run alternately, one repetition each."""
    runs = []
    order = ["patched", "baseline"]
    for i in range(args.runs):
        for kind in (order if i % 2 == 0 else order[::-1]):
            progress(f"{label}: separate binaries, run {len(runs) + 1}/{2 * args.runs}")
            runs.append(ab.run_bench(builds[kind][1]["kernel_pair_bench"], [kind], args, 1,
                                     os.path.join(results_dir, f"separate-{kind}-{i}.json")))
    return ab_analysis.merge_samples(runs)


def functions_of(form):
    api = ["zs_malloc", "zs_free"]
    api += ["zs_map_object", "zs_unmap_object"] if form["write_api"] == "map" else ["zs_obj_write"]
    return api + (["zs_store"] if "store" in form["families"] else [])


def pair_titles(form):
    write = ("zs_malloc() + zs_map_object(ZS_MM_WO) + memcpy + zs_unmap_object() + zs_free()"
             if form["write_api"] == "map" else ab_report.PAIR_TITLES["write"])
    return {"write": write, "store": ab_report.PAIR_TITLES["store"]}


def measure(compiler, builds, args, progress, counter=None):
    built, drivers = builds["combined"]
    form = built["form"]
    arch = built["arch"]
    cid = "GNU" if compiler == "gcc" else "Clang"
    version = subprocess.run([*built["cc"], "-dumpversion"], capture_output=True,
                             text=True).stdout.strip()
    label = (f"{'gcc' if compiler == 'gcc' else 'clang'} {version} kernel flags"
             f"{', arm64' if arch == 'arm64' else ''}{' +PGO' if args.pgo else ''}")
    results = os.path.join(args.out, compiler, "pgo-results" if args.pgo else "results")
    os.makedirs(results, exist_ok=True)
    counter_name = "callgrind" if arch == "x86_64" else "qemu-aarch64"
    progress(f"{label}: {counter_name}, {2 * len(form['families']) * len(args.sizes)} runs")
    instructions = count_instructions(drivers["kernel_pair_count"], form["families"],
                                      args.sizes, args.pairs,
                                      os.path.join(results, "instructions.json"), arch, counter)
    functions = functions_of(form)
    symbols, callees = ab.code(drivers["kernel_pair_count"], functions,
                               kernel_build.BINUTILS_PREFIX[arch])
    time = None
    if arch == "x86_64":
        progress(f"{label}: one binary, {args.repetitions} repetitions")
        one = ab.run_bench(drivers["kernel_pair_bench"], ab_analysis.VARIANTS, args,
                           args.repetitions, os.path.join(results, "one_binary.json"))
        time = {"one_binary": one,
                "separate": time_separate(builds, args, results, progress, label)}
    raw = {"instructions": instructions, "symbols": symbols, "callees": callees, "time": time}
    mismatched = {v: profile_mismatches(built, v, args) for v in ab_analysis.VARIANTS} \
        if args.pgo else None
    return {"label": label, "profile_mismatched": mismatched, "compiler": compiler, "compiler_id": cid, "version": version,
            "pgo": args.pgo, "arch": arch, "flags": " ".join(built["flags"]), "raw": raw,
            "families": form["families"], "functions": functions,
            "pair_titles": pair_titles(form),
            "summary": ab_analysis.summarize(raw, args.sizes, functions, args.helpers,
                                             form["families"])}


def header(built, args, method_check=None):
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        m = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
        cpu = m.group(1) if m else cpu
    form = built["form"]
    arch = built["arch"]
    change = (f"patch {args.patch}" if args.patch else
              "the mail's change: " + ", ".join(built["changes"]["patched"]))
    where = (f"{platform.machine()}, {cpu}" if arch == "x86_64" else
             f"arm64, cross-compiled and run under qemu-aarch64 on {platform.machine()}, {cpu}")
    lines = [f"A/B on the kernel's own mm/zsmalloc.c, {where}, {ab.JOBS} CPUs: patched "
             f"({change}) vs baseline (the file unchanged)",
             f"tree: {built['tree']} (version {built['version'] or 'unknown'}), form "
             f"{form['name']}, pairs: "
             f"{', '.join(ab_analysis.FAMILIES[f] for f in form['families'])}",
             f"config: {built['config']}; options zsmalloc.c, the shims and the flags test: "
             f"{', '.join(built['config_options']) or 'none'}",
             f"compiled as C in userspace against kernel/kshim.h ({KSHIM_ARCH[arch]}) with "
             "the kernel's flags (kernel/kernel_build.py); instruction counts include the "
             "shims' out-of-line services (locks, slab, pages)"]
    if args.pgo:
        lines.append("PGO: each variant's zsmalloc.c instrumented (-fprofile-instr-generate), "
                     f"trained on kernel_pair_count at {len(args.sizes)} sizes and every pair "
                     f"family ({args.train_pairs} pairs each), rebuilt with its profile: an "
                     "instrumented profile of this driver, where the mail's AutoFDO samples "
                     "branch records of a real workload"
                     + ("; the profile is the x86-64 build's (front-end counts of source "
                        "regions, which the target does not change: Debian 12 has clang's "
                        "profile runtime for x86-64 only)" if args.arch == "arm64" else ""))
    if arch == "x86_64":
        lines.append(f"time: CPU time per pair, {args.repetitions} repetitions in one binary "
                     f"(random interleaving) and {args.runs} runs of each separate binary, min "
                     f"time {args.min_time} s; instructions: callgrind, {args.pairs} pairs")
        if args.quick:
            lines.append("QUICK RUN: too few repetitions for any conclusion about time")
    else:
        lines.append(f"instructions: qemu-aarch64 -singlestep -d nochain,exec, {args.pairs} "
                     f"pairs ({method_check}); time: not reported, emulated time means nothing")
    return lines


def report_text(head, configs, elapsed, out):
    return ("\n".join(head) + "\n\n" + ab_report.report(configs) +
            f"\nraw figures: {out}/results.json; table: results.md; {elapsed:.0f} s in all\n")


def parse_args(argv=None):
    ap = cli_args.OneLineParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", nargs="?", help="kernel tree (default: Debian's linux-source-6.1)")
    ap.add_argument("--patch", help="a patch (-p1) for the patched variant instead of the "
                                    "mail's attribute change")
    ap.add_argument("--config", help="kernel .config (default: the tree's, else Debian's)")
    ap.add_argument("--compilers", default=",".join(kernel_build.COMPILERS))
    ap.add_argument("--arch", default="x86_64", choices=kernel_build.ARCHES,
                    help="x86_64 (native: callgrind and time) or arm64 (cross-compiled, counted "
                         "under qemu-aarch64)")
    ap.add_argument("--preset", choices=sorted(kernel_build.PRESETS),
                    help="a named configuration (" + "; ".join(
                        f"{k}: {v[1]}" for k, v in kernel_build.PRESETS.items()) + ")")
    ap.add_argument("--pgo", action="store_true",
                    help="clang: each variant rebuilt with a profile trained on the pair driver")
    ap.add_argument("--helpers", default="obj_malloc,obj_free,obj_write,alloc_zspage")
    ab.add_run_arguments(ap)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "kernel-ab"))
    args = ap.parse_args(argv)
    ab.fill_run_defaults(args)
    args.train_pairs = 2000 if args.quick else 20000
    args.compilers = ab.name_list(ap, "--compilers", args.compilers,
                                  list(kernel_build.COMPILERS))
    if args.pgo and "gcc" in args.compilers:
        ap.error("--pgo builds with clang only: give --compilers clang,clang22")
    if args.config and args.preset:
        ap.error("--config and --preset both name the configuration: give one")
    args.helpers = args.helpers.split(",")
    args.out = ab.output_dir(ap, args.out)
    try:
        # The tree is resolved once (Debian's unpacked under --out), so that every input is
        # checked before the first build and every compiler builds the same files.
        args.tree = os.path.abspath(args.tree) if args.tree else \
            kernel_build.unpack_debian(os.path.join(args.out, "tree"))
        kernel_build.check_inputs(args.tree, args.config, args.patch, args.arch, args.preset)
    except cli_args.InputError as e:
        ap.error(str(e))
    return args


def main():
    args = parse_args()
    progress = ab.Progress()
    try:
        counter = method = None
        if args.arch == "arm64":
            tools = os.path.join(args.out, "qemu")
            method = qemu_count.check_method(tools)
            counter = qemu_count.trace_counter(tools)
            progress(method)
        all_builds = {c: build_compiler(c, args, progress) for c in args.compilers}
        configs = ab.measure_all(args.compilers,
                                 lambda c: measure(c, all_builds[c], args, progress, counter),
                                 progress)
    except (cli_args.InputError, qemu_count.CountError) as e:
        sys.exit(f"kernel_ab: {e}")
    head = header(all_builds[args.compilers[0]]["combined"][0], args, method)
    head += [f"{c['label']}: functions whose control-flow hash differs from the trained "
             "profile's (clang ignores their counts): " + "; ".join(
                 f"{v} {', '.join(fns) or 'none'}" for v, fns in c["profile_mismatched"].items())
             for c in configs if c["profile_mismatched"] is not None]
    settings = {k: v for k, v in vars(args).items()}
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump({"header": head, "settings": settings, "configs": configs}, fh, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as fh:
        fh.write(ab_report.mail_comparison(configs) + "\n" + ab_report.markdown(configs))
    text = report_text(head, configs, progress.elapsed(), args.out)
    with open(os.path.join(args.out, "ab.txt"), "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
