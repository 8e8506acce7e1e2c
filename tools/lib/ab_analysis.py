"""The arithmetic of the A/B (tools/lib/ab.py): what it makes of the raw figures. Pure functions
over parsed data, no processes run here, so every one is unit-tested (tools/tests/ab_test.py).

  Google Benchmark JSON (read by gbench) -> per-benchmark samples; two sample sets ->
  medians, delta and a two-sided Mann-Whitney U test (scipy), "within noise" when p >= ALPHA; over the sizes, a
  binomial test of how many sizes came out significant, so that one size in eight at
  p < 0.05 (what chance gives) is not sold as a result;
  `nm -S -C` -> symbols of the two variant namespaces (zsm::bench_patched, zsm::bench_baseline),
  GCC clones (.isra, .constprop, .part, .cold) kept apart from the body;
  `objdump -d -C` -> the out-of-line functions each function calls;
  one configuration's raw figures -> its summary (instructions, time, code size, callees); a
  configuration measured without time (arm64 under emulation) has raw["time"] None, and so
  has its summary's time.

The variants are `patched` (A) and `baseline` (B); every delta is patched - baseline, so a
negative figure means the patch saves.
"""
import collections
import math
import re
import statistics

from scipy.stats import binom, mannwhitneyu

import count_pairs
import gbench

VARIANTS = ("patched", "baseline")
# The same two builds on the default pool (per-thread caches on), by policy (bench/variants.h).
CACHED_VARIANTS = {"patched": "cached", "baseline": "cached_baseline"}
FAMILIES = {"store": "zs_store+zs_free", "write": "zs_malloc+zs_obj_write+zs_free"}
ALPHA = 0.05

SYMBOL = re.compile(r"^zsm::bench_(patched|baseline)::(?:\(anonymous namespace\)::)?"
                    r"(?P<name>[\w:$]+?)\((?P<rest>.*)$")
LAMBDA = re.compile(r"\)::(\$_\d+|\{lambda[^}]*\})::operator\(\)")
CLONE = re.compile(r"\[clone (\.[^\]]+)\]")
FUNC_HEADER = re.compile(r"^[0-9a-f]+ <(.+)>:$")
CALL = re.compile(r"\s(?:call|jmp|bl|b)q?\s+[0-9a-f]+ <(.+?)(\+0x[0-9a-f]+)?>$")  # x86-64, arm64


def bench_name(family, variant, size):
    return f"{FAMILIES[family]}/{variant}/{size}"


# --- time -----------------------------------------------------------------------------------

def bench_samples(data):
    """{run_name: {"cpu_ns": [...], "real_ns": [...]}} from one Google Benchmark JSON output
    (iteration runs only, as gbench reads them: aggregates are recomputed here)."""
    return {name: {"cpu_ns": [gbench.ns(r, "cpu") for r in runs],
                   "real_ns": [gbench.ns(r, "real") for r in runs]}
            for name, runs in gbench.iterations(data).items()}


def merge_samples(sets):
    """One sample set from several runs (the separate-binary runs, one repetition each)."""
    merged = {}
    for samples in sets:
        for name, s in samples.items():
            m = merged.setdefault(name, {"cpu_ns": [], "real_ns": []})
            m["cpu_ns"] += s["cpu_ns"]
            m["real_ns"] += s["real_ns"]
    return merged


def u_test(a, b):
    """Two-sided Mann-Whitney U p-value; 1.0 when either side has fewer than two samples or
    all samples are equal (nothing to tell apart)."""
    if len(a) < 2 or len(b) < 2 or len(set(a) | set(b)) == 1:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def compare_times(a, b):
    """Patched samples `a` against baseline samples `b` (ns): medians, delta %, p."""
    ma, mb = statistics.median(a), statistics.median(b)
    p = u_test(a, b)
    return {"patched_ns": ma, "baseline_ns": mb, "delta_pct": 100.0 * (ma / mb - 1.0),
            "p": p, "significant": p < ALPHA, "n": [len(a), len(b)]}


def time_summary(per_size):
    """Over sizes: geometric mean of the median ratios; how many sizes differ significantly,
    in which direction; and chance_p, the probability that at least that many of the sizes
    test significant by chance alone (binomial, ALPHA each). Overall the difference is within
    noise when chance_p >= ALPHA: one size of eight at p < 0.05 is what chance gives."""
    ratios = [1.0 + c["delta_pct"] / 100.0 for c in per_size]
    sig = [c for c in per_size if c["significant"]]
    chance_p = float(binom.sf(len(sig) - 1, len(per_size), ALPHA)) if sig else 1.0
    return {"delta_pct": 100.0 * (math.exp(statistics.fmean(map(math.log, ratios))) - 1.0),
            "sizes": len(per_size), "significant": len(sig),
            "faster": sum(c["delta_pct"] < 0 for c in sig),
            "slower": sum(c["delta_pct"] > 0 for c in sig),
            "min_p": min(c["p"] for c in per_size), "chance_p": chance_p,
            "within_noise": chance_p >= ALPHA}


# --- code size and callees --------------------------------------------------------------------

def parse_symbol(demangled):
    """(variant, base name, clone suffixes or "") of a symbol in a variant namespace, or None.
    A lambda is named after its enclosing function: "zs_store::lambda"."""
    m = SYMBOL.match(demangled)
    if m is None:
        return None
    name = m.group("name")
    if LAMBDA.search(m.group("rest")):
        name += "::lambda"
    return m.group(1), name, " ".join(CLONE.findall(demangled))


def parse_nm(text):
    """Function symbols of the variant namespaces from `nm -S -C` output:
    [{"variant", "function", "clone", "bytes"}]."""
    symbols = []
    for line in text.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) != 4 or parts[2] not in "tTwW":
            continue
        parsed = parse_symbol(parts[3])
        if parsed:
            variant, name, clone = parsed
            symbols.append({"variant": variant, "function": name, "clone": clone,
                            "bytes": int(parts[1], 16)})
    return symbols


def parse_calls(text):
    """{caller: Counter of callees: call sites} from `objdump -d -C` output: calls, and jumps
    to a function's first byte (tail calls); jumps into a function's middle (.cold parts back
    to their body) and calls of a function to itself are not calls of another function."""
    calls = {}
    current = None
    for line in text.splitlines():
        header = FUNC_HEADER.match(line)
        if header:
            current = header.group(1)
            calls[current] = collections.Counter()
            continue
        m = CALL.search(line)
        if current and m and not m.group(2) and m.group(1) != current:
            calls[current][m.group(1)] += 1
    return calls


def code_sizes(symbols, functions):
    """{function: {variant: {"bytes": body, "clone_bytes": .cold/.part/... parts}}}"""
    sizes = {}
    for fn in functions:
        for v in VARIANTS:
            body = sum(s["bytes"] for s in symbols
                       if s["variant"] == v and s["function"] == fn and not s["clone"])
            clones = sum(s["bytes"] for s in symbols
                         if s["variant"] == v and s["function"] == fn and s["clone"])
            sizes.setdefault(fn, {})[v] = {"bytes": body, "clone_bytes": clones}
    return sizes


def out_of_line(symbols, helpers):
    """{variant: [symbol]}: the named helpers that have an out-of-line copy (any clone)."""
    return {v: [s for s in symbols if s["variant"] == v and s["function"] in helpers]
            for v in VARIANTS}


def callees(calls, functions):
    """{variant: {function: [names]}}: what each API function's body (not its .cold part)
    calls out of line in its own variant's namespace; a clone keeps its suffix, as GCC names
    it ("obj_write.isra.0"; "zs_obj_write.part.0" is the function's own split-off part), and a
    callee called from more than one site says how many ("obj_write.isra.0 x2")."""
    result = {v: {fn: collections.Counter() for fn in functions} for v in VARIANTS}
    for caller, targets in calls.items():
        parsed = parse_symbol(caller)
        if parsed is None or parsed[1] not in functions or parsed[2]:
            continue
        for target, sites in targets.items():
            callee = parse_symbol(target)
            if callee and callee[0] == parsed[0]:
                result[parsed[0]][parsed[1]][callee[1] + callee[2].replace(" ", "")] += sites
    return {v: {fn: sorted(n if k == 1 else f"{n} x{k}" for n, k in names.items())
                for fn, names in fns.items()} for v, fns in result.items()}


# --- one configuration ------------------------------------------------------------------------

def instructions(counts, family, variant, size):
    r = count_pairs.find(counts, variant, family, size)
    if r is None:
        raise KeyError(f"no callgrind count for {variant} {family} {size}")
    return r


def family_summary(raw, family, sizes):
    rows = []
    for size in sizes:
        p = instructions(raw["instructions"], family, "patched", size)
        b = instructions(raw["instructions"], family, "baseline", size)
        row = {"size": size,
               "instr": {"patched": p["allocator_only"], "baseline": b["allocator_only"]},
               "instr_total": {"patched": p["total"], "baseline": b["total"]},
               "instr_delta": p["allocator_only"] - b["allocator_only"]}
        for key in ("one_binary", "separate") if raw["time"] else ():
            samples = raw["time"][key]
            row[key] = compare_times(samples[bench_name(family, "patched", size)]["cpu_ns"],
                                     samples[bench_name(family, "baseline", size)]["cpu_ns"])
        rows.append(row)
    delta = statistics.fmean(r["instr_delta"] for r in rows)
    copies = [instructions(raw["instructions"], family, v, s)["memcpy"]
              for v in VARIANTS for s in sizes]
    total_b = statistics.fmean(r["instr_total"]["baseline"] for r in rows)
    alloc_b = statistics.fmean(r["instr"]["baseline"] for r in rows)
    return {"sizes": rows, "instr_delta": delta, "instr_baseline_total": total_b,
            "instr_baseline": alloc_b, "instr_delta_pct": 100.0 * delta / total_b,
            "instr_delta_alloc_pct": 100.0 * delta / alloc_b, "copy_inlined": min(copies) == 0,
            "time": {key: time_summary([r[key] for r in rows])
                     for key in ("one_binary", "separate")} if raw["time"] else None}


def cached_summary(counts, sizes):
    """Patched - baseline allocator instructions per pair on the default pool (per-thread
    caches on), per family: {family: {"instr_delta", "instr_baseline"}}; None for a run
    without those counts."""
    out = {}
    for family in FAMILIES:
        deltas, baselines = [], []
        for size in sizes:
            p = count_pairs.find(counts, CACHED_VARIANTS["patched"], family, size)
            b = count_pairs.find(counts, CACHED_VARIANTS["baseline"], family, size)
            if p is None or b is None:
                return None
            deltas.append(p["allocator_only"] - b["allocator_only"])
            baselines.append(b["allocator_only"])
        out[family] = {"instr_delta": statistics.fmean(deltas),
                       "instr_baseline": statistics.fmean(baselines)}
    return out


def summarize(raw, sizes, functions, helpers, families=tuple(FAMILIES)):
    """The summary of one configuration (compiler x PGO) from its raw figures; `families`
    names the pairs measured (a kernel tree without zs_store() has the write pair only)."""
    return {"families": {f: family_summary(raw, f, sizes) for f in families},
            "cached": cached_summary(raw["instructions"], sizes),
            "code_size": code_sizes(raw["symbols"], functions),
            "out_of_line": out_of_line(raw["symbols"], helpers)}
