#!/usr/bin/python3
"""Smoke test of the A/B driver (run by ctest): a quick run of tools/lib/ab.py with g++, two
sizes and PGO, whose outputs must parse and agree with each other, then --write-golden into
a scratch file and tools/lib/golden.py check against it: passes as written, fails when a figure
is moved past the tolerance, skips when no entry matches.

Usage: ab_smoke_test.py [OUT_DIR]
The default OUT_DIR is a temporary directory outside the source tree, removed afterwards:
other tests read files of the source tree as their corpus while this one builds. It prints how
long each part took and the load average: CPU-bound (two builds, PGO, valgrind), it
took 371 s on 2 cores beside a compile and 577 s at a load average near 4 (ctest's TIMEOUT is
1800 s for it).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
sys.path.insert(0, LIB)
import ab_analysis  # noqa: E402
import golden  # noqa: E402

SIZES = [784, 2352]
REPS = 3  # --quick


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run(*args, ok=(0,)):
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode not in ok:
        fail(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
             f"{proc.stderr[-3000:]}")
    return proc


def check_config(c):
    """One configuration's raw figures and summary agree."""
    for fam, s in c["summary"]["families"].items():
        if [r["size"] for r in s["sizes"]] != SIZES:
            fail(f"{c['label']} {fam}: sizes {[r['size'] for r in s['sizes']]}")
        for r in s["sizes"]:
            for v in ab_analysis.VARIANTS:
                got = ab_analysis.instructions(c["raw"]["instructions"], fam, v, r["size"])
                if got["allocator_only"] != r["instr"][v] or not 0 < got["allocator_only"] \
                        < got["total"]:
                    fail(f"{c['label']} {fam} {v} {r['size']}: counts disagree: {got}, {r}")
                name = ab_analysis.bench_name(fam, v, r["size"])
                if len(c["raw"]["time"]["one_binary"][name]["cpu_ns"]) != REPS or \
                        len(c["raw"]["time"]["separate"][name]["cpu_ns"]) != REPS:
                    fail(f"{c['label']} {name}: expected {REPS} samples in each timing")
            # Three samples against three cannot reach p < 0.05.
            if r["one_binary"]["significant"] or r["separate"]["significant"]:
                fail(f"{c['label']} {fam} {r['size']}: 3 vs 3 samples called significant")
        mean = sum(r["instr_delta"] for r in s["sizes"]) / len(SIZES)
        if abs(mean - s["instr_delta"]) > 1e-9:
            fail(f"{c['label']} {fam}: delta {s['instr_delta']} is not the mean {mean}")
    for fn, sizes in c["summary"]["code_size"].items():
        if any(sizes[v]["bytes"] <= 0 for v in ab_analysis.VARIANTS):
            fail(f"{c['label']}: {fn} has no code: {sizes}")


def check_outputs(out):
    with open(os.path.join(out, "results.json")) as fh:
        configs = json.load(fh)["configs"]
    if [(c["compiler"], c["pgo"]) for c in configs] != [("gcc", False), ("gcc", True)]:
        fail(f"configurations: {[(c['compiler'], c['pgo']) for c in configs]}")
    for c in configs:
        check_config(c)
    with open(os.path.join(out, "results.md")) as fh:
        md = fh.read()
    with open(os.path.join(out, "ab.txt")) as fh:
        text = fh.read()
    for c in configs:
        for fam, s in c["summary"]["families"].items():
            for r in s["sizes"]:
                row = (f"| {c['label']} | {ab_analysis.FAMILIES[fam]} | {r['size']} "
                       f"| {r['instr']['baseline']:.1f} | {r['instr']['patched']:.1f} |")
                if row not in md or row not in text:
                    fail(f"no markdown row {row}")
        if f"{c['label']}: patched vs baseline, 2 sizes 784..2352 B" not in text:
            fail(f"no mail paragraph for {c['label']}")
    if "within noise" not in text or "QUICK RUN" not in text:
        fail("the quick run's report does not say its timings are within noise")
    with open(os.path.join(out, "ab.png"), "rb") as fh:
        if fh.read(8) != b"\x89PNG\r\n\x1a\n":
            fail("ab.png is not a PNG")
    print(f"{len(configs)} configurations; JSON, markdown, report and plot agree")


def check_golden(out):
    path = os.path.join(out, "golden.json")
    if os.path.exists(path):
        os.remove(path)
    run(os.path.join(LIB, "ab.py"), "--write-golden", "--compilers", "gcc", "--out", out,
        "--golden", path)
    with open(path) as fh:
        entry = json.load(fh)["builds"][0]
    binary = os.path.join(out, "gcc", "O2-combined", "bench", "zsm_pair_count")
    cmd = [os.path.join(LIB, "golden.py"), "check", "--golden", path, "--binary", binary,
           "--compiler-id", entry["compiler"].split()[0], "--compiler-version",
           entry["version"], f"--flags={entry['flags']}"]
    run(*cmd)
    entry["allocator_only"]["patched"]["store"]["784"] *= 1.0 + 2 * golden.TOLERANCE_PCT / 100
    with open(path, "w") as fh:
        json.dump({"pairs": golden.PAIRS, "builds": [entry]}, fh)
    moved = run(*cmd, ok=(1,)).stdout
    if "patched store 784 B" not in moved or golden.REGENERATE not in moved:
        fail(f"a moved figure is not reported with the regenerating command:\n{moved}")
    skipped = run(*cmd[:-1], "--flags=-O3", ok=(golden.SKIP,)).stdout
    if "SKIP" not in skipped:
        fail(f"an unmatched build is not skipped plainly:\n{skipped}")
    print("golden: written, checked, a moved figure fails, an unmatched build skips")


def smoke(out):
    start = time.monotonic()
    run(os.path.join(LIB, "ab.py"), "--quick", "--pgo", "--compilers", "gcc",
        "--sizes", ",".join(map(str, SIZES)), "--out", out)
    print(f"the quick A/B run: {time.monotonic() - start:.0f} s (load average {os.getloadavg()[0]:.1f})")
    check_outputs(out)
    start = time.monotonic()
    check_golden(out)
    print(f"the golden checks: {time.monotonic() - start:.0f} s (load average {os.getloadavg()[0]:.1f})")


def main():
    if len(sys.argv) > 1:
        smoke(os.path.abspath(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory(prefix="zsm-ab-smoke-") as out:
        smoke(out)


if __name__ == "__main__":
    main()
