#!/usr/bin/python3
"""Code sizes of the kernel's zsmalloc.c under configuration options, one build per option set,
nothing run: which options grow zs_malloc() toward a given size (docs/ab.md, "What makes the
mail's zs_malloc() twice ours"). Each set is built with kernel/kernel_build.py for the
chosen compiler and architecture, unchanged (the `baseline` variant), and the sizes of the
named functions and of the helpers with an out-of-line copy are read with nm.

Usage: kernel_sizes.py [TREE] [--arch x86_64|arm64] [--compiler clang22]
                       [--set NAME=CONFIG_X=V[,CONFIG_Y=W]]... [--out DIR]
Without --set it tries the options a development kernel enables that the shims can model, one
at a time and all together (SETS below).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The kernel builder lives beside the shims it builds with.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "kernel"))
import cli_args  # noqa: E402
import kernel_build  # noqa: E402

ROOT = kernel_build.ROOT
FUNCTIONS = ("zs_malloc", "zs_free", "obj_malloc", "obj_free", "alloc_zspage", "zs_obj_write")
# Options that change zsmalloc.c's code in a debug or hardened kernel, as the shims model them.
SETS = [
    ("as configured", []),
    ("+ DEBUG_VM", [("CONFIG_DEBUG_VM", "y")]),
    ("+ ZSMALLOC_STAT", [("CONFIG_ZSMALLOC_STAT", "y")]),
    ("+ UBSAN array bounds (trap)", [("CONFIG_UBSAN", "y"), ("CONFIG_UBSAN_BOUNDS", "y"),
                                     ("CONFIG_UBSAN_ARRAY_BOUNDS", "y"),
                                     ("CONFIG_UBSAN_TRAP", "y")]),
    ("+ kCFI", [("CONFIG_CFI_CLANG", "y")]),
    ("+ ZERO_CALL_USED_REGS", [("CONFIG_ZERO_CALL_USED_REGS", "y")]),
    ("+ INIT_STACK_ALL_PATTERN", [("CONFIG_INIT_STACK_ALL_ZERO", "n"),
                                  ("CONFIG_INIT_STACK_ALL_PATTERN", "y")]),
    ("+ all of the above", [("CONFIG_DEBUG_VM", "y"), ("CONFIG_ZSMALLOC_STAT", "y"),
                            ("CONFIG_UBSAN", "y"), ("CONFIG_UBSAN_BOUNDS", "y"),
                            ("CONFIG_UBSAN_ARRAY_BOUNDS", "y"), ("CONFIG_UBSAN_TRAP", "y"),
                            ("CONFIG_CFI_CLANG", "y"), ("CONFIG_ZERO_CALL_USED_REGS", "y")]),
]


def sizes_of(obj, arch):
    """{function: bytes} of the variant object's functions (its symbols are renamed into
    zsm::bench_baseline, nm -C shows them plainly)."""
    out = subprocess.run([kernel_build.binutil("nm", arch), "-S", "-C", obj], check=True,
                         capture_output=True, text=True).stdout
    sizes = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2] in "tTwW":
            name = parts[3].split("::")[-1].split("(")[0]
            sizes[name] = sizes.get(name, 0) + int(parts[1], 16)
    return sizes


def parse_set(text):
    name, eq, options = text.partition("=")
    pairs = [o.partition("=") for o in options.split(",")] if eq else []
    if not name or not pairs or any(not p[1] or not p[0].startswith("CONFIG_") for p in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=CONFIG_X=V[,CONFIG_Y=W]")
    return name, [(k, v) for k, _, v in pairs]


def main():
    ap = cli_args.OneLineParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", nargs="?", help="kernel tree (default: Debian's linux-source-6.1)")
    ap.add_argument("--arch", default="x86_64", choices=kernel_build.ARCHES)
    ap.add_argument("--compiler", default="clang22", choices=kernel_build.COMPILERS)
    ap.add_argument("--preset", choices=sorted(kernel_build.PRESETS))
    ap.add_argument("--set", action="append", type=parse_set, dest="sets")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "kernel-sizes"))
    args = ap.parse_args()
    try:
        out = cli_args.output_dir(args.out)
        tree = os.path.abspath(args.tree) if args.tree else \
            kernel_build.unpack_debian(os.path.join(out, "tree"))
        kernel_build.check_inputs(tree, None, None, args.arch, args.preset)
        rows = []
        for n, (name, overrides) in enumerate(args.sets or SETS):
            built = kernel_build.build(os.path.join(out, f"set{n}"), tree, None, args.compiler,
                                       [("baseline", "none")], overrides=overrides,
                                       arch=args.arch, preset=args.preset)
            rows.append((name, sizes_of(built["objects"]["baseline"], args.arch)))
    except cli_args.InputError as e:
        sys.exit(f"kernel_sizes: {e}")
    print(f"{tree}, {args.compiler}, {args.arch}, preset {args.preset or 'default'}: function "
          "bytes (- : inlined everywhere)")
    print(f"| options | {' | '.join(FUNCTIONS)} |")
    print(f"|---|{'---:|' * len(FUNCTIONS)}")
    for name, sizes in rows:
        print(f"| {name} | " + " | ".join(f"{sizes[f]:,}" if f in sizes else "-"
                                          for f in FUNCTIONS) + " |")


if __name__ == "__main__":
    main()
