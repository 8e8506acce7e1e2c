#!/usr/bin/python3
"""Smoke test of the kernel A/B (run by ctest where linux-source-6.1 is installed): a quick run
of tools/lib/kernel_ab.py with gcc-12 on Debian's 6.1 tree, whose report must parse and carry both
variants' counts, sizes and calls; then the one-line failures of kernel/kernel_build.py: a tree
whose zsmalloc.c uses an interface the shims lack, and a config with an option they do not
model, each fail with exactly one line that names it.

Usage: kernel_ab_smoke_test.py [OUT_DIR]  (default: a temporary directory, removed afterwards)
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


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def quick_ab(out):
    proc = subprocess.run(["/usr/bin/python3", os.path.join(LIB, "kernel_ab.py"), "--quick",
                           "--compilers", "gcc", "--out", out], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"kernel_ab.py --quick failed:\n{proc.stderr[-3000:]}")
    data = json.load(open(os.path.join(out, "results.json")))
    (config,) = data["configs"]
    if config["families"] != ["write"]:
        fail(f"6.1 has the write pair only, the run says {config['families']}")
    counts = config["raw"]["instructions"]["results"] if isinstance(
        config["raw"]["instructions"], dict) else config["raw"]["instructions"]
    for variant in ("patched", "baseline"):
        rows = [r for r in counts if r["allocator"] == variant]
        if not rows or any(r["allocator_only"] <= 0 or r["memcpy"] <= 0 for r in rows):
            fail(f"{variant}: no callgrind count, or one without the copy: {rows}")
    sizes = config["summary"]["code_size"]
    for fn in ("zs_malloc", "zs_free", "zs_map_object", "zs_unmap_object"):
        if not all(sizes[fn][v]["bytes"] > 0 for v in ("patched", "baseline")):
            fail(f"no size for {fn}: {sizes.get(fn)}")
    if not config["raw"]["callees"]["baseline"]["zs_malloc"]:
        fail("zs_malloc() of the baseline calls nothing out of line: the callee list is empty")
    text = open(os.path.join(out, "ab.txt")).read()
    for needle in ("form 6.1 (zs_map_object)", "Debian 6.1 amd64 defaults",
                   "The mail's table beside ours", "mail: GCC 15 -O2"):
        if needle not in text:
            fail(f"the report lacks {needle!r}")
    print("quick kernel A/B: report, counts, sizes and calls present")


def one_line_failure(args, must_name, what):
    proc = subprocess.run(["/usr/bin/python3", os.path.join(KERNEL, "kernel_build.py"), *args],
                          capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 0 or len(lines) != 1 or must_name not in lines[0]:
        fail(f"{what}: expected one line naming {must_name}, got rc {proc.returncode}:\n"
             f"{proc.stderr}")
    print(f"{what}: {lines[0]}")


def failures(out):
    tree = kernel_build.unpack_debian(os.path.join(out, "tree"))
    bad = os.path.join(out, "bad-tree")
    for f in ("mm/zsmalloc.c", "include/linux/zsmalloc.h"):
        os.makedirs(os.path.dirname(os.path.join(bad, f)), exist_ok=True)
        shutil.copy(os.path.join(tree, f), os.path.join(bad, f))
    src = os.path.join(bad, "mm", "zsmalloc.c")
    text = open(src).read()
    if "zspage = find_get_zspage(class);" not in text:
        fail("zs_malloc() of 6.1 no longer reads as this test expects")
    open(src, "w").write(text.replace("zspage = find_get_zspage(class);",
                                      "zspage = find_get_zspage(kshim_unknown_interface(class));", 1))
    one_line_failure(["--out", os.path.join(out, "bad-build"), "--tree", bad],
                     "function kshim_unknown_interface()", "an interface the shims lack")
    cfg = os.path.join(out, "lockdep.config")
    open(cfg, "w").write("CONFIG_LOCKDEP=y\nCONFIG_COMPACTION=y\n")
    one_line_failure(["--out", os.path.join(out, "cfg-build"), "--tree", tree, "--config", cfg],
                     "CONFIG_LOCKDEP", "an option the shims do not model")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kernel-ab-smoke-")
    try:
        failures(out)
        quick_ab(os.path.join(out, "ab"))
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(out, ignore_errors=True)
    print("kernel A/B smoke test passed")


if __name__ == "__main__":
    main()
