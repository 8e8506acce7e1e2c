#!/usr/bin/python3
"""Exact arm64 instruction counts under qemu-user, the arm64 counterpart of count_pairs.py's
callgrind runs (this machine has no arm64 CPU, and valgrind runs only native code).

The method: `qemu-aarch64 -singlestep -d nochain,exec -D FIFO PROGRAM` logs one line per guest
instruction executed, naming the function it is in (tools/qemu/trace_count.c says why);
trace_count reads the FIFO and counts the lines between the markers zsm_count_start() and
zsm_count_stop() (bench/count_markers.h), per function. check_method() proves it on
tools/qemu/known_loop.c, a loop of a known body: the count must be the body times the
iterations plus a constant, and two runs of different lengths must differ by exactly the body
times the difference. The counts are exact and repeat run to run; emulated time means
nothing, so no time is taken under qemu.

pair_counts() splits a pair driver's count as count_pairs.run_one() splits callgrind's: total,
no_memcpy (less the copy: memcpy/memmove and zsm's copy_payload), allocator_only (less the
driver's own loop, store_pairs/write_pairs), each per pair.

Usage: qemu_count.py --check [--out DIR]      the known-loop check, printed
       qemu_count.py PROGRAM ARGS...           the per-function counts of one run
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_pairs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QEMU_DIR = os.path.join(ROOT, "tools", "qemu")
QEMU = "qemu-aarch64"
START, STOP = "zsm_count_start", "zsm_count_stop"
KNOWN_LOOP_BODY = 6  # tools/qemu/known_loop.c
HARNESS = re.compile(r"(store|write)_pairs")


class CountError(Exception):
    """A count that could not be taken; the message is one line."""


def trace_counter(out_dir):
    """tools/qemu/trace_count.c compiled for the host under out_dir (once); its path."""
    binary = os.path.join(out_dir, "trace_count")
    source = os.path.join(QEMU_DIR, "trace_count.c")
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
        os.makedirs(out_dir, exist_ok=True)
        proc = subprocess.run(["cc", "-O2", "-o", binary, source], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise CountError(f"tools/qemu/trace_count.c does not compile: {proc.stderr[-400:]}")
    return binary


def count(counter, argv, markers=True):
    """Per-function instruction counts of one run of the arm64 program argv under qemu:
    {"functions": {mangled name: count}, "total": counted, "lines": every instruction}."""
    if shutil.which(QEMU) is None:
        raise CountError(f"{QEMU} is missing: install the Debian package qemu-user "
                         "(tools/setup.sh does)")
    with tempfile.TemporaryDirectory(prefix="qemu-count-") as tmp:
        fifo = os.path.join(tmp, "trace")
        os.mkfifo(fifo)
        args = [START, STOP] if markers else []
        reader = subprocess.Popen(["sh", "-c", 'exec "$0" "$@" < "$TRACE"', counter, *args],
                                  env=dict(os.environ, TRACE=fifo), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        program = subprocess.run([QEMU, "-singlestep", "-d", "nochain,exec", "-D", fifo, *argv],
                                 capture_output=True, text=True)
        out, err = reader.communicate()
    if program.returncode != 0:
        raise CountError(f"{' '.join(argv)} failed under {QEMU} (exit {program.returncode}): "
                         f"{(program.stderr or program.stdout).strip()[-600:]}")
    if reader.returncode != 0:
        raise CountError(f"counting {' '.join(argv)}: {err.strip()}")
    functions, totals = {}, {}
    for line in out.splitlines():
        n, _, name = line.partition(" ")
        if n in ("total", "lines"):
            totals[n] = int(name)
        else:
            functions[name] = int(n)
    return {"functions": functions, "total": totals["total"], "lines": totals["lines"]}


def demangle(names):
    """{mangled: demangled} (c++filt, binutils)."""
    names = list(names)
    proc = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                          check=True)
    return dict(zip(names, proc.stdout.splitlines()))


def split(functions):
    """(total, copy, harness) of one run's per-function counts, classified as
    count_pairs.parse_annotate() classifies callgrind's functions."""
    plain = demangle(functions)
    copy = sum(n for f, n in functions.items() if count_pairs.COPY.search(plain[f]))
    harness = sum(n for f, n in functions.items()
                  if not count_pairs.COPY.search(plain[f]) and HARNESS.search(plain[f]))
    return sum(functions.values()), copy, harness


def pair_counts(counter, binary, allocator, family, size, pairs):
    """One pair driver run (zsm_pair_count or kernel_pair_count, built for arm64), as
    count_pairs.run_one() returns it."""
    result = count(counter, [binary, allocator, family, str(size), str(pairs)])
    total, copy, harness = split(result["functions"])
    return {"allocator": allocator, "family": family, "size": size, "pairs": pairs,
            "total": total / pairs, "no_memcpy": (total - copy) / pairs,
            "allocator_only": (total - copy - harness) / pairs, "memcpy": copy / pairs,
            "harness": harness / pairs, "counter": "qemu-aarch64 -singlestep"}


def build_known_loop(out_dir, cc=("clang-22", "--target=aarch64-linux-gnu")):
    binary = os.path.join(out_dir, "known_loop")
    proc = subprocess.run([*cc, "-O2", "-static", os.path.join(QEMU_DIR, "known_loop.c"), "-o",
                           binary], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CountError(f"tools/qemu/known_loop.c does not build for arm64 with {cc[0]}: "
                         f"{proc.stderr.strip()[-400:]}")
    return binary


def check_method(out_dir, iterations=(1000, 3000)):
    """The counting method on the known loop; a one-line account, or CountError."""
    counter = trace_counter(out_dir)
    loop = build_known_loop(out_dir)
    runs = [count(counter, [loop, str(n)]) for n in iterations]
    body = [r["functions"].get("known_loop", 0) for r in runs]
    extra = {b - KNOWN_LOOP_BODY * n for b, n in zip(body, iterations)}
    span = iterations[1] - iterations[0]
    lines = runs[1]["lines"] - runs[0]["lines"]
    if len(extra) != 1 or lines != KNOWN_LOOP_BODY * span:
        raise CountError(f"the counting method fails on the known loop: known_loop ran {body} "
                         f"instructions for {list(iterations)} iterations of "
                         f"{KNOWN_LOOP_BODY}, and the runs differ by {lines} in all (expected "
                         f"{KNOWN_LOOP_BODY * span})")
    return (f"counting checked on a loop of {KNOWN_LOOP_BODY} instructions: "
            f"{iterations[0]} and {iterations[1]} iterations counted {body[0]} and {body[1]} "
            f"({KNOWN_LOOP_BODY} x n + {extra.pop()}), the whole runs differ by {lines} = "
            f"{KNOWN_LOOP_BODY} x {span}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="the known-loop check")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "qemu-count"))
    ap.add_argument("--no-markers", action="store_true", help="count the whole run")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    try:
        if args.check:
            print(check_method(args.out))
            return
        if not args.program:
            ap.error("a PROGRAM to count, or --check")
        result = count(trace_counter(args.out), args.program, not args.no_markers)
    except CountError as e:
        sys.exit(f"qemu_count: {e}")
    for name, n in sorted(result["functions"].items(), key=lambda kv: -kv[1]):
        print(f"{n:12d} {name}")
    print(f"{result['total']:12d} counted, {result['lines']} run")


if __name__ == "__main__":
    main()
