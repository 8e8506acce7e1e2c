#!/usr/bin/python3
"""Every bad input to the A/B scripts ends in one line (ctest ab_bad_inputs): kernel/kernel_build.py,
lib/kernel_ab.py and lib/ab.py, and the entry points that forward to them (run-kernel-ab.sh,
run-ab.sh), given a bad tree, file, folder or value, must exit non-zero having printed exactly
one line, which names the input and says what is wrong, and no Python traceback. The trees are
small made-up ones (the errors come before anything is compiled), so no kernel source is
needed and the test takes seconds.

Usage: ab_bad_inputs_test.py [OUT_DIR]  (default: a temporary directory, removed afterwards)
"""
import os
import shutil
import subprocess
import sys
import tempfile

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(TOOLS, "lib")
PY = "/usr/bin/python3"

# A file with the shape of 6.1's mm/zsmalloc.c as far as the checks before compiling read it.
SOURCE = ("unsigned long zs_malloc(struct zs_pool *pool, size_t size, gfp_t gfp)\n{ return 0; }\n"
          "void *zs_map_object(struct zs_pool *pool, unsigned long handle, int mm)\n"
          "{ return 0; }\n")


def make_tree(root, name, edit=None):
    """A made-up tree root/name with mm/zsmalloc.c and include/linux/zsmalloc.h; edit(tree)
    then breaks it."""
    tree = os.path.join(root, name)
    os.makedirs(os.path.join(tree, "mm"))
    os.makedirs(os.path.join(tree, "include", "linux"))
    with open(os.path.join(tree, "mm", "zsmalloc.c"), "w") as fh:
        fh.write(SOURCE)
    with open(os.path.join(tree, "include", "linux", "zsmalloc.h"), "w") as fh:
        fh.write("/* the API */\n")
    if edit:
        edit(tree)
    return tree


def write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


def replace_with_dir(path):
    os.remove(path)
    os.makedirs(path)


def cases(root):
    """(what, command, text the one line must contain)."""
    good = make_tree(root, "good")
    c = lambda t: os.path.join(t, "mm", "zsmalloc.c")  # noqa: E731
    h = lambda t: os.path.join(t, "include", "linux", "zsmalloc.h")  # noqa: E731
    nonutf8 = make_tree(root, "nonutf8", lambda t: write(c(t), SOURCE.encode() + b"\xff\xfe\n"))
    c_dir = make_tree(root, "c_dir", lambda t: replace_with_dir(c(t)))
    no_h = make_tree(root, "no_h", lambda t: os.remove(h(t)))
    h_dir = make_tree(root, "h_dir", lambda t: replace_with_dir(h(t)))
    with_zpdesc = (SOURCE + '#include "zpdesc.h"\n').encode()
    no_zpdesc = make_tree(root, "no_zpdesc", lambda t: write(c(t), with_zpdesc))
    bad_zpdesc = make_tree(root, "bad_zpdesc", lambda t: (
        write(c(t), with_zpdesc), write(os.path.join(t, "mm", "zpdesc.h"), b"\xff\xfe\n")))
    bad_dotconfig = make_tree(root, "bad_dotconfig",
                              lambda t: write(os.path.join(t, ".config"), b"\x00\xff\xfe"))
    dir_dotconfig = make_tree(root, "dir_dotconfig",
                              lambda t: os.makedirs(os.path.join(t, ".config")))
    a_file = os.path.join(root, "a_file")
    write(a_file, b"not a folder\n")
    binary = os.path.join(root, "binary.config")
    write(binary, b"\x00\xff\xfe\x80CONFIG_X=y\n")
    chain = os.path.join(root, "chain.config")
    write(chain, b"CONFIG_ZSMALLOC_CHAIN_SIZE=abc\n")
    chain_big = os.path.join(root, "chain_big.config")
    write(chain_big, b"CONFIG_ZSMALLOC_CHAIN_SIZE=100\n")
    x86_config = os.path.join(root, "x86.config")
    write(x86_config, b"CONFIG_X86_64=y\nCONFIG_ZSMALLOC=y\n")
    static_scs = os.path.join(root, "scs.config")
    write(static_scs, b"CONFIG_ARM64=y\nCONFIG_SHADOW_CALL_STACK=y\n")
    lockdep = os.path.join(root, "lockdep.config")
    write(lockdep, b"CONFIG_LOCKDEP=y\n")
    garbage_patch = os.path.join(root, "garbage.patch")
    write(garbage_patch, b"\xff\xfe\x00 no hunks here\n")
    missing = os.path.join(root, "missing")
    kb = [PY, os.path.join(os.path.dirname(TOOLS), "kernel", "kernel_build.py")]
    ka = [PY, os.path.join(LIB, "kernel_ab.py"), "--compilers", "gcc"]
    ab = [PY, os.path.join(LIB, "ab.py")]
    out = lambda n: ["--out", os.path.join(root, "out", n)]  # noqa: E731
    return [
        ("kernel_build: no tree", kb + out("1") + ["--tree", missing], missing),
        ("kernel_build: the tree is a file", kb + out("2") + ["--tree", a_file], a_file),
        ("kernel_build: a tree without mm/zsmalloc.c", kb + out("3") + ["--tree", root],
         "has no mm/zsmalloc.c"),
        ("kernel_build: a non-UTF-8 zsmalloc.c", kb + out("4") + ["--tree", nonutf8],
         c(nonutf8) + ": not UTF-8"),
        ("kernel_build: zsmalloc.c is a folder", kb + out("5") + ["--tree", c_dir],
         c(c_dir) + ": is a folder"),
        ("kernel_build: no include/linux/zsmalloc.h", kb + out("6") + ["--tree", no_h],
         h(no_h) + ": no such file"),
        ("kernel_build: include/linux/zsmalloc.h is a folder", kb + out("7") + ["--tree", h_dir],
         h(h_dir) + ": is a folder"),
        ("kernel_build: zpdesc.h included, not there", kb + out("8") + ["--tree", no_zpdesc],
         "mm/zpdesc.h: no such file"),
        ("kernel_build: a non-UTF-8 zpdesc.h", kb + out("9") + ["--tree", bad_zpdesc],
         "mm/zpdesc.h: not UTF-8"),
        ("kernel_build: the tree's .config not UTF-8", kb + out("10") + ["--tree", bad_dotconfig],
         ".config: not UTF-8"),
        ("kernel_build: the tree's .config a folder", kb + out("11") + ["--tree", dir_dotconfig],
         ".config: is a folder"),
        ("kernel_build: --config missing", kb + out("12") + ["--tree", good, "--config", missing],
         f"--config {missing}: no such file"),
        ("kernel_build: --config a folder", kb + out("13") + ["--tree", good, "--config", root],
         f"--config {root}: is a folder"),
        ("kernel_build: --config binary", kb + out("14") + ["--tree", good, "--config", binary],
         f"--config {binary}: not UTF-8"),
        ("kernel_build: a chain size that is no number",
         kb + out("15") + ["--tree", good, "--config", chain], "CONFIG_ZSMALLOC_CHAIN_SIZE=abc"),
        ("kernel_build: a chain size out of range",
         kb + out("16") + ["--tree", good, "--config", chain_big], "CONFIG_ZSMALLOC_CHAIN_SIZE=100"),
        ("kernel_build: --set a chain size that is no number",
         kb + out("17") + ["--tree", good, "--set", "CONFIG_ZSMALLOC_CHAIN_SIZE=x"],
         "CONFIG_ZSMALLOC_CHAIN_SIZE=x"),
        ("kernel_build: --set without =", kb + out("18") + ["--tree", good, "--set", "FOO"],
         "--set FOO"),
        ("kernel_build: --out under a file", kb + ["--out", a_file + "/sub", "--tree", good],
         f"--out {a_file}/sub: cannot create"),
        ("kernel_build: --out is a file", kb + ["--out", a_file, "--tree", good],
         f"--out {a_file}: cannot create"),
        ("kernel_build: --compiler unknown", kb + out("19") + ["--tree", good, "--compiler", "icc"],
         "'icc'"),
        ("kernel_build: --variant with a bad name", kb + out("20") + ["--variant", "Bad-Name"],
         "'Bad-Name'"),
        ("kernel_build: --variant with a missing patch",
         kb + out("21") + ["--variant", f"x={missing}"], f"{missing}: no such file"),
        ("kernel_build: --variant with a folder for a patch",
         kb + out("22") + ["--variant", f"x={root}"], f"{root}: is a folder"),
        ("kernel_build: --namespace-prefix not C++", kb + out("23") + ["--namespace-prefix", "a b"],
         "'a b'"),
        ("kernel_ab: --sizes abc", ka + out("a1") + ["--sizes", "abc", good], "'abc'"),
        ("kernel_ab: --sizes 5000", ka + out("a2") + ["--sizes", "5000", good], "5000"),
        ("kernel_ab: --sizes empty", ka + out("a3") + ["--sizes", "384,", good], "'384,'"),
        ("kernel_ab: --repetitions 0", ka + out("a4") + ["--repetitions", "0", good], "'0'"),
        ("kernel_ab: --pairs negative", ka + out("a5") + ["--pairs", "-5", good], "'-5'"),
        ("kernel_ab: --min-time nan", ka + out("a6") + ["--min-time", "nan", good], "'nan'"),
        ("kernel_ab: --compilers unknown", [PY, os.path.join(LIB, "kernel_ab.py"), "--compilers",
                                            "gcc,icc"] + out("a7") + [good], "'icc'"),
        ("kernel_ab: --out not creatable", ka + ["--out", a_file + "/sub", good],
         f"--out {a_file}/sub: cannot create"),
        ("kernel_ab: no tree", ka + out("a8") + [missing], missing),
        ("kernel_ab: a non-UTF-8 zsmalloc.c", ka + out("a9") + [nonutf8], "not UTF-8"),
        ("kernel_ab: --config binary", ka + out("a10") + ["--config", binary, good],
         f"--config {binary}: not UTF-8"),
        ("kernel_ab: --patch missing", ka + out("a11") + ["--patch", missing, good],
         f"--patch {missing}: no such file"),
        ("kernel_ab: --patch a folder", ka + out("a12") + ["--patch", root, good],
         f"--patch {root}: is a folder"),
        ("kernel_ab: --patch that does not apply", ka + out("a13") + ["--patch", garbage_patch,
                                                                      good],
         f"--patch {garbage_patch}: does not apply"),
        ("kernel_ab: an unknown option", ka + ["--frobnicate"], "--frobnicate"),
        ("kernel_ab: --arch unknown", ka + out("a14") + ["--arch", "riscv", good], "'riscv'"),
        ("kernel_ab: an arm64 preset on x86-64", ka + out("a15") + ["--preset", "gki-arm64", good],
         "--preset gki-arm64 is an arm64 configuration"),
        ("kernel_ab: an x86-64 config on arm64",
         ka + out("a16") + ["--arch", "arm64", "--config", x86_config, good], "CONFIG_X86_64=y"),
        ("kernel_ab: a compiled-in shadow call stack",
         ka + out("a17") + ["--arch", "arm64", "--config", static_scs, good],
         "CONFIG_SHADOW_CALL_STACK"),
        ("kernel_ab: an option the shims do not model", ka + out("a18") + ["--config", lockdep,
                                                                           good],
         "CONFIG_LOCKDEP"),
        ("kernel_ab: --pgo with gcc", ka + out("a19") + ["--pgo", good], "--pgo"),
        ("kernel_ab: --config and --preset", ka + out("a20") + ["--config", chain, "--preset",
                                                                "debian-amd64", good],
         "--preset"),
        ("ab: --sizes abc", ab + out("b1") + ["--sizes", "abc"], "'abc'"),
        ("ab: --runs 0", ab + out("b2") + ["--runs", "0"], "'0'"),
        ("ab: --out not creatable", ab + ["--out", a_file + "/sub"],
         f"--out {a_file}/sub: cannot create"),
        ("ab: --compilers unknown", ab + out("b3") + ["--compilers", "icc"], "'icc'"),
        ("ab: --arch unknown", ab + out("b4") + ["--arch", "mips"], "'mips'"),
        ("ab: --pgo on arm64", ab + out("b5") + ["--arch", "arm64", "--pgo"],
         "--pgo with --arch arm64"),
        ("ab: --write-golden on arm64", ab + out("b6") + ["--arch", "arm64", "--write-golden"],
         "--write-golden"),
        ("run-kernel-ab.sh: --sizes abc",
         [os.path.join(TOOLS, "run-kernel-ab.sh"), "--sizes", "abc", good], "'abc'"),
        ("run-ab.sh: --pairs 0", [os.path.join(TOOLS, "run-ab.sh"), "--pairs", "0"], "'0'"),
    ]


def check(what, cmd, must_name):
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120)
    said = (proc.stdout + proc.stderr).strip()
    lines = said.splitlines()
    problems = []
    if proc.returncode == 0:
        problems.append("exit status 0")
    if "Traceback" in said:
        problems.append("a Python traceback")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines instead of one")
    elif must_name not in lines[0]:
        problems.append(f"the line does not name {must_name!r}")
    if problems:
        print(f"FAIL {what}: {', '.join(problems)}; rc {proc.returncode}, output:\n{said}\n")
        return False
    print(f"ok   {what}: {lines[0]}")
    return True


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ab-bad-inputs-")
    try:
        results = [check(*case) for case in cases(root)]
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(root, ignore_errors=True)
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
