#!/usr/bin/python3
"""The A/B of tools/lib/ab.py on the kernel's own mm/zsmalloc.c: does the kernel mail's attribute
change (obj_malloc, obj_free and obj_write __always_inline, alloc_zspage noinline), or any
patch, pay on the real code, with which compiler, at what code size? tools/run-kernel-ab.sh
installs what is missing and runs this; docs/ab.md, "The A/B on the kernel's own code", says
how to read the result.

Per compiler (gcc-12, clang-19, clang-22) it compiles the tree's file twice in userspace
(tools/lib/kernel_build.py: kernel/'s shims, the kernel's flags and config): `baseline` unchanged,
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

Usage: kernel_ab.py [TREE] [--patch FILE] [--config FILE] [--compilers gcc,clang,clang22]
                    [--sizes 384,...] [--quick] [--out DIR]
       TREE: a kernel tree (mm/zsmalloc.c); default Debian's linux-source-6.1
"""
import argparse
import concurrent.futures
import json
import os
import platform
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402
import ab_analysis  # noqa: E402
import ab_report  # noqa: E402
import cli_args  # noqa: E402
import count_pairs  # noqa: E402
import kernel_build  # noqa: E402

ROOT = kernel_build.ROOT
KINDS = ("combined", "patched", "baseline")
CXXFLAGS = ["-std=c++20", "-O2", "-g", "-fno-pie"]


def variants_of(kind, patched_change):
    both = [("patched", patched_change), ("baseline", "none")]
    return both if kind == "combined" else [v for v in both if v[0] == kind]


def link_drivers(built, out, compiler):
    """kernel_pair_count and kernel_pair_bench of one build; their paths."""
    cxx = kernel_build.COMPILERS[compiler][1]
    dwarf = ["-gdwarf-4"] if compiler.startswith("clang") else []
    log = os.path.join(out, "build.log")
    objects = [*built["objects"].values(), *built["services"]]
    paths = {}
    for name, extra in (("kernel_pair_count", []), ("kernel_pair_bench", ["-lbenchmark",
                                                                          "-lpthread"])):
        src = os.path.join(ROOT, "kernel", name.replace("kernel_", "") + ".cpp")
        binary = os.path.join(out, name)
        cmd = [cxx, *CXXFLAGS, *dwarf, "-I", out, "-I", os.path.join(ROOT, "kernel"), src,
               *objects, "-no-pie", "-o", binary, *extra]
        if not kernel_build.run(cmd, log):
            raise kernel_build.BuildError(f"linking {name} failed: "
                                          f"{kernel_build.log_tail(log)[-800:]}")
        paths[name] = binary
    return paths


def build_compiler(compiler, args, progress):
    """The three builds of one compiler: {kind: (build.json, drivers)}."""
    builds = {}
    for kind in KINDS:
        out = os.path.join(args.out, compiler, kind)
        progress(f"{compiler}: build {kind}")
        built = kernel_build.build(out, args.tree, args.config, compiler,
                                   variants_of(kind, args.patch or "mail"))
        builds[kind] = (built, link_drivers(built, out, compiler))
    return builds


def count_instructions(binary, families, sizes, pairs, out_json):
    runs = [(v, f, s) for v in ab_analysis.VARIANTS for f in families for s in sizes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=ab.JOBS) as pool:
        results = list(pool.map(lambda r: count_pairs.run_one(binary, *r, pairs), runs))
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


def measure(compiler, builds, args, progress):
    built, drivers = builds["combined"]
    form = built["form"]
    cid = "GNU" if compiler == "gcc" else "Clang"
    version = subprocess.run([built["cc"], "-dumpversion"], capture_output=True,
                             text=True).stdout.strip()
    label = f"{'gcc' if compiler == 'gcc' else 'clang'} {version} kernel flags"
    results = os.path.join(args.out, compiler, "results")
    os.makedirs(results, exist_ok=True)
    progress(f"{label}: callgrind, {2 * len(form['families']) * len(args.sizes)} runs")
    instructions = count_instructions(drivers["kernel_pair_count"], form["families"],
                                      args.sizes, args.pairs,
                                      os.path.join(results, "instructions.json"))
    functions = functions_of(form)
    symbols, callees = ab.code(drivers["kernel_pair_bench"], functions)
    progress(f"{label}: one binary, {args.repetitions} repetitions")
    one = ab.run_bench(drivers["kernel_pair_bench"], ab_analysis.VARIANTS, args,
                       args.repetitions, os.path.join(results, "one_binary.json"))
    separate = time_separate(builds, args, results, progress, label)
    raw = {"instructions": instructions, "symbols": symbols, "callees": callees,
           "time": {"one_binary": one, "separate": separate}}
    return {"label": label, "compiler": compiler, "compiler_id": cid, "version": version,
            "pgo": False, "flags": " ".join(built["flags"]), "raw": raw,
            "families": form["families"], "functions": functions,
            "pair_titles": pair_titles(form),
            "summary": ab_analysis.summarize(raw, args.sizes, functions, args.helpers,
                                             form["families"])}


def header(built, args):
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        m = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
        cpu = m.group(1) if m else cpu
    form = built["form"]
    change = (f"patch {args.patch}" if args.patch else
              "the mail's change: " + ", ".join(built["changes"]["patched"]))
    return [f"A/B on the kernel's own mm/zsmalloc.c, {platform.machine()}, {cpu}, "
            f"{ab.JOBS} CPUs: patched ({change}) vs baseline (the file unchanged)",
            f"tree: {built['tree']} (version {built['version'] or 'unknown'}), form "
            f"{form['name']}, pairs: {', '.join(ab_analysis.FAMILIES[f] for f in form['families'])}",
            f"config: {built['config']}; options zsmalloc.c and the shims test: "
            f"{', '.join(built['config_options']) or 'none'}",
            "compiled as C in userspace against kernel/kshim.h with the kernel's flags "
            "(tools/lib/kernel_build.py; -mcmodel=small for -mcmodel=kernel); instruction counts "
            "include the shims' out-of-line services (locks, slab, pages)",
            f"time: CPU time per pair, {args.repetitions} repetitions in one binary (random "
            f"interleaving) and {args.runs} runs of each separate binary, min time "
            f"{args.min_time} s; instructions: callgrind, {args.pairs} pairs"] + \
        (["QUICK RUN: too few repetitions for any conclusion about time"] if args.quick else [])


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
    ap.add_argument("--helpers", default="obj_malloc,obj_free,obj_write,alloc_zspage")
    ab.add_run_arguments(ap)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "kernel-ab"))
    args = ap.parse_args(argv)
    ab.fill_run_defaults(args)
    args.compilers = ab.name_list(ap, "--compilers", args.compilers,
                                  list(kernel_build.COMPILERS))
    args.helpers = args.helpers.split(",")
    args.out = ab.output_dir(ap, args.out)
    try:
        # The tree is resolved once (Debian's unpacked under --out), so that every input is
        # checked before the first build and every compiler builds the same files.
        args.tree = os.path.abspath(args.tree) if args.tree else \
            kernel_build.unpack_debian(os.path.join(args.out, "tree"))
        kernel_build.check_inputs(args.tree, args.config, args.patch)
    except cli_args.InputError as e:
        ap.error(str(e))
    return args


def main():
    args = parse_args()
    progress = ab.Progress()
    try:
        all_builds = {c: build_compiler(c, args, progress) for c in args.compilers}
    except cli_args.InputError as e:
        sys.exit(f"kernel_ab: {e}")
    configs = [measure(c, all_builds[c], args, progress) for c in args.compilers]
    head = header(all_builds[args.compilers[0]]["combined"][0], args)
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
