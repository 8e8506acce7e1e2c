#!/usr/bin/python3
"""zsm's own A/B on arm64 in the normal test run (ctest ab_arm64): the pool library and
zsm_pair_count cross-compiled for arm64 with aarch64-linux-gnu-g++-12 and with clang++-22
--target=aarch64-linux-gnu -fuse-ld=lld (tools/lib/ab.py --arch arm64 --quick, one size, few
pairs), counted under qemu-aarch64 after the method's check on its known loop. The report
must carry qemu counts of both policies on both pairs and of the cached pool, code sizes of
the locked-path functions, the known-loop check in its header, and no time; the same count
taken again must be identical (the counts are exact). Skipped (exit 77) with the missing tool
named where the cross tools are not installed.

Usage: ab_arm64_test.py [OUT_DIR]  (default: a temporary directory, removed afterwards)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
sys.path.insert(0, LIB)
import ab  # noqa: E402
import qemu_count  # noqa: E402

COMPILERS = ["gcc", "clang22"]
PAIRS = 300
SIZE = 784
SKIP = 77


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def quick_arm64(out):
    proc = subprocess.run(["/usr/bin/python3", os.path.join(LIB, "ab.py"), "--arch", "arm64",
                           "--quick", "--compilers", ",".join(COMPILERS), "--sizes", str(SIZE),
                           "--pairs", str(PAIRS), "--out", out], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"ab.py --arch arm64 failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "results.json")) as fh:
        return json.load(fh)


def check_config(config):
    label = config["label"]
    if config["arch"] != "arm64" or config["raw"]["time"] is not None:
        fail(f"{label}: not an arm64 run without time")
    rows = config["raw"]["instructions"]
    for variant in ("patched", "baseline", "cached", "cached_baseline"):
        for family in ("store", "write"):
            mine = [r for r in rows if (r["allocator"], r["family"]) == (variant, family)]
            if len(mine) != 1 or not mine[0]["counter"].startswith("qemu") or \
                    not 0 < mine[0]["allocator_only"] < mine[0]["total"] or \
                    mine[0]["memcpy"] <= 0:
                fail(f"{label}, {variant} {family}: no qemu count with the copy apart: {mine}")
    for fn, sizes in config["summary"]["code_size"].items():
        if not all(sizes[v]["bytes"] > 0 for v in ("patched", "baseline")):
            fail(f"{label}: no code size for {fn}: {sizes}")
    if "locked_path::store" not in config["summary"]["code_size"]:
        fail(f"{label}: locked_path::store was not sized")


def main():
    missing = ab.missing_arm64_tool(COMPILERS)
    if missing:
        print(f"SKIPPED: the arm64 cross tools are not installed: {missing} is missing "
              "(tools/setup.sh installs them)")
        sys.exit(SKIP)
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ab-arm64-")
    try:
        data = quick_arm64(out)
        if "counting checked on a loop of 6 instructions" not in " ".join(data["header"]) or \
                "time: not reported" not in " ".join(data["header"]):
            fail(f"the header does not report the known-loop check and no time: {data['header']}")
        if [c["compiler"] for c in data["configs"]] != COMPILERS:
            fail(f"configurations {[c['compiler'] for c in data['configs']]}, not {COMPILERS}")
        for config in data["configs"]:
            check_config(config)
            for family, fam in config["summary"]["families"].items():
                print(f"{config['label']}, {family}: {fam['instr_baseline']:.1f} -> "
                      f"{fam['instr_baseline'] + fam['instr_delta']:.1f} instructions a pair")
        first = next(r for r in data["configs"][-1]["raw"]["instructions"]
                     if r["allocator"] == "baseline")
        driver = os.path.join(out, COMPILERS[-1], "O2-combined", "bench", "zsm_pair_count")
        again = qemu_count.pair_counts(qemu_count.trace_counter(os.path.join(out, "qemu")),
                                       driver, "baseline", first["family"], SIZE, PAIRS)
        if again["total"] != first["total"] or again["allocator_only"] != first["allocator_only"]:
            fail(f"a second count differs: {first} then {again}")
        print(f"a second count is identical: {again['total'] * PAIRS:.0f} instructions")
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(out, ignore_errors=True)
    print("zsm arm64 A/B test passed")


if __name__ == "__main__":
    main()
