#!/usr/bin/python3
"""The arm64 A/B in the normal test run (ctest kernel_ab_arm64, where linux-source-6.1 is
installed): the counting method on its known loop (tools/lib/qemu_count.py --check); a quick
tools/lib/kernel_ab.py --arch arm64 with clang 22 on Debian's 6.1 tree, whose report must carry
qemu counts of both variants (the driver read every object back and got every page back, or
its run would have failed), code sizes and calls; the same count taken again must be
identical (the deltas are exact); and the Android GKI-like preset (kCFI, PAC, x18 reserved,
UBSAN bounds traps) must build, run and count.

Usage: kernel_ab_arm64_test.py [OUT_DIR]  (default: a temporary directory, removed afterwards)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
KERNEL = os.path.join(os.path.dirname(os.path.dirname(LIB)), "kernel")
sys.path[:0] = [LIB, KERNEL]
import kernel_build  # noqa: E402
import qemu_count  # noqa: E402

PAIRS = 300


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def quick_arm64(out, tree, extra):
    proc = subprocess.run(["/usr/bin/python3", os.path.join(LIB, "kernel_ab.py"), "--arch",
                           "arm64", "--quick", "--compilers", "clang22", "--pairs", str(PAIRS),
                           "--out", out, *extra, tree], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"kernel_ab.py --arch arm64 {' '.join(extra)} failed:\n{proc.stderr[-3000:]}")
    return json.load(open(os.path.join(out, "results.json")))


def check_counts(data, what):
    (config,) = data["configs"]
    if config["arch"] != "arm64" or config["raw"]["time"] is not None:
        fail(f"{what}: not an arm64 run without time: {config['arch']}, {config['raw']['time']}")
    rows = config["raw"]["instructions"]
    for variant in ("patched", "baseline"):
        mine = [r for r in rows if r["allocator"] == variant]
        if not mine or any(r["allocator_only"] <= 0 or r["memcpy"] <= 0 or
                           not r["counter"].startswith("qemu") for r in mine):
            fail(f"{what}, {variant}: no qemu count, or one without the copy: {mine}")
    sizes = config["summary"]["code_size"]["zs_malloc"]
    if not all(sizes[v]["bytes"] > 0 for v in ("patched", "baseline")):
        fail(f"{what}: no size for zs_malloc: {sizes}")
    if not any(config["raw"]["callees"]["baseline"].values()):
        fail(f"{what}: the baseline's API bodies call nothing out of line")
    if "counting checked on a loop of 6 instructions" not in " ".join(data["header"]):
        fail(f"{what}: the header does not report the known-loop check")
    return config


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kernel-ab-arm64-")
    try:
        print(qemu_count.check_method(os.path.join(out, "qemu")))
        tree = kernel_build.unpack_debian(os.path.join(out, "tree"))
        debian = check_counts(quick_arm64(os.path.join(out, "debian"), tree,
                                          ["--preset", "debian-arm64"]), "Debian arm64")
        print(f"Debian arm64, clang 22: {debian['summary']['families']['write']['instr_delta']:+.1f}"
              " instructions a pair")
        first = next(r for r in debian["raw"]["instructions"] if r["allocator"] == "baseline")
        driver = os.path.join(out, "debian", "clang22", "combined", "kernel_pair_count")
        again = qemu_count.pair_counts(qemu_count.trace_counter(os.path.join(out, "qemu")),
                                       driver, "baseline", first["family"], first["size"], PAIRS)
        if again["total"] != first["total"] or again["allocator_only"] != first["allocator_only"]:
            fail(f"a second count differs: {first} then {again}")
        print(f"a second count is identical: {again['total'] * PAIRS:.0f} instructions")
        gki = check_counts(quick_arm64(os.path.join(out, "gki"), tree, ["--preset", "gki-arm64"]),
                           "GKI-like arm64")
        for flag in ("-fsanitize=kcfi", "-mbranch-protection=pac-ret", "-ffixed-x18",
                     "-fsanitize=array-bounds"):
            if flag not in gki["flags"].split():
                fail(f"GKI-like arm64: {flag} is not among the flags: {gki['flags']}")
        print(f"GKI-like arm64, clang 22: {gki['summary']['families']['write']['instr_delta']:+.1f}"
              " instructions a pair")
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(out, ignore_errors=True)
    print("kernel arm64 A/B test passed")


if __name__ == "__main__":
    main()
