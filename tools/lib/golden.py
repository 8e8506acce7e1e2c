#!/usr/bin/env python3
"""Golden fast-path counts (as tcmalloc's testing/fast_path.*.golden): the allocator-only
retired instructions per steady-state pair (callgrind, tools/lib/count_pairs.py) of each variant
(cached: the default pool, per-thread caches on; patched, baseline: the locked path) x pair
(store, write) x size, per compiler and flags, checked in at
bench/golden/fast_path.json. tools/lib/ab.py --write-golden writes it; ctest runs `check` on the
test build's zsm_pair_count, which fails when a figure moves by more than the tolerance.

Tolerance: TOLERANCE_PCT = 2 % of the golden figure (5-7 instructions on these 240-330
instruction pairs). The counts are exact (the same binary gives the same count every run),
so the tolerance is not for noise: it lets a change that adds or removes an instruction or
two on the fast path pass, while anything an inlining decision moves fails. One helper left
out of line costs a call, a return and the argument shuffling around them: obj_write left out
of line by g++ 12 costs 17-25 instructions per pair (6-10 %), three times the tolerance.

A figure outside the tolerance in either direction fails: an improvement is recorded by
regenerating the file (REGENERATE), so the next regression is measured from it.

Usage (ctest): golden.py check --golden FILE --binary zsm_pair_count --compiler-id GNU
               --compiler-version 12.2.0 --flags "-O2 -g -DNDEBUG"
Exit 77 (ctest: skipped) when the file has no entry for that compiler and those flags.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_pairs  # noqa: E402

TOLERANCE_PCT = 2.0
PAIRS = 20000
# zsm as users get it (per-thread caches) and the locked path under both inline policies.
VARIANTS = ("cached", "patched", "baseline")
REGENERATE = "tools/run-ab.sh --write-golden"
SKIP = 77


def key(compiler_id, compiler_version, flags):
    """What an entry is matched by: compiler and major version, and the exact flags."""
    return f"{compiler_id} {compiler_version.split('.')[0]}", " ".join(flags.split())


def measure(binary, sizes, pairs=PAIRS):
    """{variant: {family: {size (str): allocator-only instructions per pair}}}"""
    counts = {}
    for r in count_pairs.count(binary, VARIANTS, sizes, pairs):
        counts.setdefault(r["allocator"], {}).setdefault(r["family"], {})[
            str(r["size"])] = round(r["allocator_only"], 2)
    return counts


def load(path):
    if not os.path.exists(path):
        return {"builds": []}
    with open(path) as fh:
        return json.load(fh)


def write_entry(path, compiler_id, compiler_version, flags, counts):
    """Adds or replaces the entry for one compiler and flags; other entries stay."""
    compiler, flags = key(compiler_id, compiler_version, flags)
    builds = [b for b in load(path)["builds"] if (b["compiler"], b["flags"]) != (compiler, flags)]
    builds.append({"compiler": compiler, "version": compiler_version, "flags": flags,
                   "allocator_only": counts})
    golden = {"about": "Allocator-only retired instructions per steady-state pair (callgrind), "
                       "checked by tools/lib/golden.py, which states the tolerance",
              "regenerate": REGENERATE, "pairs": PAIRS,
              "builds": sorted(builds, key=lambda b: (b["compiler"], b["flags"]))}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(golden, fh, indent=1)
        fh.write("\n")


def find_entry(golden, compiler, flags):
    for b in golden["builds"]:
        if (b["compiler"], b["flags"]) == (compiler, flags):
            return b
    return None


def compare(expected, actual, tolerance_pct=TOLERANCE_PCT):
    """Lines naming every figure that moved by more than the tolerance."""
    moved = []
    for variant, families in expected.items():
        for family, sizes in families.items():
            for size, want in sizes.items():
                got = actual[variant][family][size]
                if abs(got - want) > tolerance_pct / 100.0 * want:
                    moved.append(f"{variant} {family} {size} B: {want:.2f} -> {got:.2f} "
                                 f"({got - want:+.2f}, {100.0 * (got - want) / want:+.1f} %)")
    return moved


def check(args):
    golden = load(args.golden)
    compiler, flags = key(args.compiler_id, args.compiler_version, args.flags)
    entry = find_entry(golden, compiler, flags)
    if entry is None:
        have = ", ".join(f"{b['compiler']} '{b['flags']}'" for b in golden["builds"]) or "none"
        print(f"SKIP: {args.golden} has no entry for {compiler} with flags '{flags}' "
              f"(entries: {have}); add one with {REGENERATE}")
        return SKIP
    sizes = sorted({int(s) for fams in entry["allocator_only"].values()
                    for f in fams.values() for s in f})
    moved = compare(entry["allocator_only"], measure(args.binary, sizes, golden["pairs"]))
    if moved:
        print(f"FAIL: fast-path instruction counts of {compiler} '{flags}' moved by more "
              f"than {TOLERANCE_PCT} % from {args.golden}:")
        print("\n".join("  " + m for m in moved))
        print(f"If the change is intended, regenerate the file with {REGENERATE} "
              "and commit it with the change.")
        return 1
    print(f"{compiler} '{flags}': every fast-path count within {TOLERANCE_PCT} % of the golden")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("--golden", required=True)
    c.add_argument("--binary", required=True)
    c.add_argument("--compiler-id", required=True)
    c.add_argument("--compiler-version", required=True)
    c.add_argument("--flags", required=True)
    args = ap.parse_args()
    sys.exit(check(args))


if __name__ == "__main__":
    main()
