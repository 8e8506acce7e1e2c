#!/usr/bin/python3
"""Two or more zsm_pair_bench binaries side by side (builds of different commits or
changes): the cached pair (zs_store+zs_free/cached) and the baselines it is judged against
(tcmalloc and mimalloc, with glibc's memcpy and with zsm's copy), run in rounds.

Each round runs every binary once, in a shuffled order, pinned to one CPU (taskset -c CPU),
with Google Benchmark's --benchmark_min_time; each run gives each benchmark's real time and
the ratios of the cached pair to the baselines at each size within that run (the machine's
drift between runs then cancels out of the ratios). The table gives the median over the
rounds of each. Read it with two cautions:
  - a ratio moves with the baseline's time as well, and the baseline's loop is code of each
    binary, placed differently in each: compare the cached pair's own ns between binaries,
    and its ratios within one binary;
  - the figures are this CPU's; name it with them (the last line prints lscpu's model name).
Takes about 4 s per binary and round (30 rounds of two binaries: 4 minutes).

Usage: pair_side_by_side.py [--rounds N] [--cpu N] NAME=BINARY NAME=BINARY [...]
"""
import argparse
import collections
import os
import random
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_args  # noqa: E402
import gbench  # noqa: E402

FILTER = (r"^(zs_store\+zs_free/cached/([0-9]+|mixed)$"
          r"|malloc\+(zs_)?memcpy\+free/(tcmalloc|mimalloc)/([0-9]+|mixed)$)")
CACHED = "zs_store+zs_free/cached/"
# ratio column -> the baseline family it divides by
BASELINES = {"tc": "malloc+memcpy+free/tcmalloc/", "tc=": "malloc+zs_memcpy+free/tcmalloc/",
             "mi": "malloc+memcpy+free/mimalloc/"}


def binary_arg(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=BINARY")
    return name, path


def run_once(path, cpu, out_json):
    """{benchmark name: real time in ns} of one run (gbench.py runs and reads it)."""
    data = gbench.run("taskset", ["-c", str(cpu), path, f"--benchmark_filter={FILTER}",
                                  "--benchmark_min_time=0.05"], out_json)
    return gbench.medians(data, "real")


def figures_of(times):
    """The cached pair's ns and its ratios to the baselines, by (row, size)."""
    rows = {}
    for name, ns in times.items():
        if not name.startswith(CACHED):
            continue
        size = name[len(CACHED):]
        rows[("cached ns", size)] = ns
        for column, family in BASELINES.items():
            if family + size in times:
                rows[(f"cached/{column}", size)] = ns / times[family + size]
    for column, family in BASELINES.items():
        for name, ns in times.items():
            if name.startswith(family):
                rows[(f"{column} ns", name[len(family):])] = ns
    return rows


def main():
    ap = cli_args.OneLineParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=cli_args.positive_int, default=30)
    ap.add_argument("--cpu", type=int, default=1, help="the CPU every run is pinned to")
    ap.add_argument("binaries", nargs="+", type=binary_arg, metavar="NAME=BINARY")
    args = ap.parse_args()
    for _, path in args.binaries:
        try:
            cli_args.input_file(path, "binary")
        except cli_args.InputError as e:
            ap.exit(2, f"{ap.prog}: {e}\n")
    seen = collections.defaultdict(lambda: collections.defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "run.json")
        for r in range(args.rounds):
            order = list(args.binaries)
            random.shuffle(order)
            for name, path in order:
                for key, value in figures_of(run_once(path, args.cpu, out_json)).items():
                    seen[name][key].append(value)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    sizes = sorted({size for rows in seen.values() for _, size in rows},
                   key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0))
    print("| binary | figure | " + " | ".join(sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for name, _ in args.binaries:
        for row in ["cached ns", "tc ns", "tc= ns", "mi ns", "cached/tc", "cached/tc=",
                    "cached/mi"]:
            cells = [seen[name].get((row, s)) for s in sizes]
            if any(cells):
                print(f"| {name} | {row} | " + " | ".join(
                    "-" if c is None else f"{statistics.median(c):.{1 if 'ns' in row else 2}f}"
                    for c in cells) + " |")
    model = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in model.splitlines()
                  if line.startswith("Model name")), "unknown")
    print(f"\nmedians of {args.rounds} rounds, each run pinned to CPU {args.cpu}; "
          f"CPU: {model}, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
