"""How the A/B (tools/lib/ab.py) is shown: the kernel mail's lines per configuration, a markdown
table, and a gnuplot PNG, from configurations as ab.py keeps them ("label", "raw" figures and
their "summary" from ab_analysis.summarize). `ab_report.py build/ab/results.json` prints the
report of a saved run again, summaries recomputed.

Every delta is patched - baseline. A time difference is significant at one size when the
Mann-Whitney U test gives p < 0.05 (ab_analysis.ALPHA), and over all sizes when more sizes are
significant than chance alone would make (ab_analysis.time_summary); otherwise the line says
"within noise".
"""
import json
import os
import subprocess
import sys

import ab_analysis
from ab_analysis import FAMILIES, VARIANTS

PAIR_TITLES = {"store": "zs_store() + zs_free()",
               "write": "zs_malloc() + zs_obj_write() + zs_free()"}

# The kernel mail's figures (patched - baseline per pair), quoted with their lines in MAIL, and
# the configuration of ours each is set beside: (compiler key of ab.py, PGO); a report shows
# the rows of its configurations' architecture. GCC 15 is not packaged in Debian 12, so g++ 12
# stands in for it; AutoFDO needs branch sampling, so PGO stands in for it.
# The mail by its public reference; its line numbers are those of the message as posted.
MAIL = ("LKML 2026-11-05, \"Re: [PATCH] mm/zsmalloc: inline obj_malloc() and obj_free()\" "
        "(Jenhao Chen)")
MAIL_ROWS = [  # x86_64 unless "arch" says otherwise
    {"pair": "write", "compiler": "Clang 22 -O2", "ours": ("clang22", False), "instr": -11.8,
     "time": "-3.2 % cycles", "size": None, "lines": "22-23"},
    {"pair": "write", "compiler": "Clang 22 -O2 +AutoFDO", "ours": ("clang22", True),
     "instr": -17.5, "time": "-4.8 % cycles", "size": ("zs_malloc", 2088, 1474),
     "lines": "24-27"},
    {"pair": "write", "compiler": "GCC 15 -O2", "ours": ("gcc", False), "instr": -23.7,
     "time": None, "size": ("zs_malloc", 1738, 1441), "lines": "28-32"},
    {"pair": "store", "compiler": "Clang 22 -O2", "ours": ("clang22", False), "instr": -26.6,
     "time": "-4.0 to -4.5 % latency", "size": None, "lines": "51-52"},
    {"pair": "store", "compiler": "Clang 22 -O2 +AutoFDO", "ours": ("clang22", True),
     "instr": -31.8, "time": "-4.0 to -4.5 % latency", "size": None, "lines": "51-52"},
    {"pair": "store", "compiler": "GCC 15 -O2", "ours": ("gcc", False), "instr": -37.1,
     "time": "-5.3 % latency (-5.5 % cycles)", "size": ("zs_store", 1997, 1943),
     "lines": "53-55"},
    {"arch": "arm64", "pair": "write", "compiler": "Clang 22 -O2", "ours": ("clang22", False),
     "instr": -7.7, "time": None, "size": None, "lines": "22-23"},
    {"arch": "arm64", "pair": "write", "compiler": "Clang 22 -O2 +AutoFDO",
     "ours": ("clang22", True), "instr": -13.0, "time": None,
     "size": ("zs_malloc", 2872, 1828), "lines": "24-27"},
    {"arch": "arm64", "pair": "store", "compiler": "Clang 22 -O2", "ours": ("clang22", False),
     "instr": -31.3, "time": "-4.0 %", "size": None, "lines": "47-48"},
    {"arch": "arm64", "pair": "store", "compiler": "Clang 22 -O2 +AutoFDO",
     "ours": ("clang22", True), "instr": -34.7, "time": "-4.5 %",
     "size": ("zs_store", 3144, 2448), "lines": "47-50"},
]
NO_TIME = "time: not measured (arm64 runs emulated under qemu; instructions and code size only)"
# What the mail says both compilers did to obj_write() in the baseline (lines 35-37).
MAIL_OBJ_WRITE = ("the mail: GCC 15 left it out of line as obj_write.isra.0 (229 B) and "
                  "Clang 22 as obj_write (219 B) on x86_64, two call sites in zs_store() "
                  f"({MAIL}, lines 35-37)")


def fmt_bytes(n):
    return f"{n:,} B"


def fmt_signed(x):
    return f"{x:+.1f}" if round(x, 1) != 0 else "0.0"


def fmt_pct(x):
    return f"{fmt_signed(x)} %"


def time_phrase(t, where):
    """One time comparison over all sizes, with its significance stated plainly."""
    head = f"{fmt_pct(t['delta_pct'])} time per pair {where}"
    alpha = ab_analysis.ALPHA
    if t["significant"] == 0:
        return (f"{head}: within noise (no size with p < {alpha}; "
                f"smallest p = {t['min_p']:.2f})")
    counts = (f"{t['significant']} of {t['sizes']} sizes at p < {alpha} "
              f"({t['faster']} faster, {t['slower']} slower)")
    if t["within_noise"]:
        return (f"{head}: within noise overall: {counts}, as chance alone gives "
                f"(binomial p = {t['chance_p']:.2f})")
    return (f"{head} (geomean of the medians): {counts}; chance alone: "
            f"binomial p = {t['chance_p']:.2g}")


def size_line(fn, s):
    b, p = s["baseline"]["bytes"], s["patched"]["bytes"]
    line = f"{fn}() from {fmt_bytes(b)} to {fmt_bytes(p)} ({fmt_pct(100.0 * (p - b) / b)})"
    cb, cp = s["baseline"]["clone_bytes"], s["patched"]["clone_bytes"]
    if cb or cp:
        line += f", plus {fmt_bytes(cb)} -> {fmt_bytes(cp)} in .cold/.part clones"
    return line


def helper_list(symbols):
    if not symbols:
        return "none"
    return ", ".join(f"{s['function']}{' [' + s['clone'] + ']' if s['clone'] else ''} "
                     f"({fmt_bytes(s['bytes'])})" for s in symbols)


def callee_list(callees):
    parts = [f"{fn}() -> {', '.join(names)}" for fn, names in callees.items() if names]
    return "; ".join(parts) if parts else "nothing (everything inlined)"


def same_code(symbols):
    """Whether both variants have the same functions (clones included) of the same sizes."""
    def shape(v):
        return sorted((s["function"], s["clone"], s["bytes"]) for s in symbols
                      if s["variant"] == v)
    return shape("patched") == shape("baseline")


def mail_lines(config):
    """The mail's paragraph for one configuration."""
    s = config["summary"]
    sizes = [r["size"] for r in next(iter(s["families"].values()))["sizes"]]
    titles = config.get("pair_titles", PAIR_TITLES)
    span = f"{len(sizes)} sizes {sizes[0]}..{sizes[-1]} B" if len(sizes) > 1 \
        else f"size {sizes[0]} B"
    lines = [f"{config['label']}: patched vs baseline, {span}"]
    for n, (family, fam) in enumerate(s["families"].items(), 1):
        lines.append(f"{n}. {titles[family]}:")
        copy = ", which includes the copy: the compiler inlined memcpy" \
            if fam["copy_inlined"] else ""
        lines.append(f"   - {fmt_signed(fam['instr_delta'])} retired instructions per pair "
                     f"({fmt_pct(fam['instr_delta_pct'])} of the "
                     f"{fam['instr_baseline_total']:.0f} of the pair with its memcpy, "
                     f"{fmt_pct(fam['instr_delta_alloc_pct'])} of the allocator's own "
                     f"{fam['instr_baseline']:.0f}{copy})")
        if fam["time"] is None:
            lines.append("   - " + NO_TIME)
            continue
        lines.append("   - " + time_phrase(fam["time"]["one_binary"], "in one binary"))
        lines.append("   - " + time_phrase(fam["time"]["separate"], "across two binaries"))
    cached = s.get("cached")
    if cached:
        lines.append("   with per-thread caches on (the default pool, whose steady pair calls "
                     "none of these helpers): " + ", ".join(
                         f"{PAIR_TITLES[f]} {fmt_signed(c['instr_delta'])} instructions per "
                         f"pair (of {c['instr_baseline']:.0f})" for f, c in cached.items()))
    if same_code(config["raw"]["symbols"]):
        lines.append("   the two variants compiled to the same functions of the same sizes: "
                     "under this compiler the policy changes nothing")
    lines.append("   code size (function body; baseline -> patched):")
    lines += [f"   - {size_line(fn, cs)}" for fn, cs in s["code_size"].items()]
    if sized_as(s["code_size"], "zs_store") in s["code_size"]:
        lines.append("   " + obj_write_line(config))
    lines.append("   out of line:")
    for v in VARIANTS:
        lines.append(f"   - {v}: named helpers with their own copy: "
                     f"{helper_list(s['out_of_line'][v])}")
        lines.append(f"     {v}: calls from the API bodies: "
                     f"{callee_list(config['raw']['callees'][v])}")
    return lines


def sized_as(sizes, kernel_name):
    """The key under which the kernel's `kernel_name` ("zs_store") was measured: itself in the
    kernel's own A/B, locked_path::store in zsm's (where zs_store is the cached entry)."""
    ours = "locked_path::" + kernel_name.removeprefix("zs_")
    return ours if ours in sizes else kernel_name


def obj_write_line(config):
    """What this compiler did to obj_write() in the baseline, beside the mail's account."""
    s = config["summary"]
    copies = [h for h in s["out_of_line"]["baseline"] if h["function"] == "obj_write"]
    store = sized_as(config["summary"]["code_size"], "zs_store")
    calls = [c for c in config["raw"]["callees"]["baseline"].get(store, [])
             if c.startswith("obj_write")]
    if not copies:
        ours = f"inlined into {store}() (no out-of-line copy)"
    else:
        ours = ("out of line: " + helper_list(copies) + f", called from {store}() as "
                + (", ".join(calls) if calls else f"nothing ({store}() inlined it)"))
    return f"obj_write() in the baseline: {ours}; {MAIL_OBJ_WRITE}"


def find_config(configs, key):
    compiler, pgo = key
    for c in configs:
        if c["compiler"] == compiler and c["pgo"] == pgo:
            return c
    return None


def time_cell(t):
    """A time comparison over all sizes in a few words (time_phrase() in full)."""
    if t["significant"] == 0 or t["within_noise"]:
        return f"{fmt_pct(t['delta_pct'])}, within noise"
    return f"{fmt_pct(t['delta_pct'])}, {t['significant']} of {t['sizes']} sizes at p < 0.05"


def verdict(mail, ours):
    """Direction and size of our instruction delta against the mail's."""
    if abs(ours) < 1.0:
        return "no effect here (within one instruction)"
    if (ours < 0) != (mail < 0):
        return "opposite direction"
    return f"same direction, {100.0 * ours / mail:.0f} % of the mail's size"


def mail_comparison(configs):
    """The mail's rows beside ours, row by row (markdown)."""
    out = ["| pair | compiler | instr/pair | time | zs_store B | zs_malloc B | source | verdict |",
           "|---|---|---:|---|---|---|---|---|"]
    arch = configs[0].get("arch", "x86_64") if configs else "x86_64"
    for row in (r for r in MAIL_ROWS if r.get("arch", "x86_64") == arch):
        size = {"zs_store": "-", "zs_malloc": "-"}
        if row["size"]:
            fn, b, p = row["size"]
            size[fn] = f"{b:,} -> {p:,}"
        out.append(f"| {FAMILIES[row['pair']]} | mail: {row['compiler']} | {row['instr']:+.1f} "
                   f"| {row['time'] or '-'} | {size['zs_store']} | {size['zs_malloc']} "
                   f"| {MAIL}, lines {row['lines']} | |")
        c = find_config(configs, row["ours"])
        if c is None:
            out.append(f"| | ours: not run ({'--pgo' if row['ours'][1] else '--compilers'}) "
                       "| | | | | | |")
            continue
        if row["pair"] not in c["summary"]["families"]:
            out.append(f"| | ours: {c['label']}: this source has no {FAMILIES[row['pair']]} "
                       "pair | | | | | | |")
            continue
        fam = c["summary"]["families"][row["pair"]]
        sizes = c["summary"]["code_size"]
        cells = {fn: (f"{sizes[k]['baseline']['bytes']:,} -> {sizes[k]['patched']['bytes']:,}"
                      if (k := sized_as(sizes, fn)) in sizes else "-")
                 for fn in ("zs_store", "zs_malloc")}
        out.append(f"| | ours: {c['label']} | {fam['instr_delta']:+.1f} "
                   f"| {time_cell(fam['time']['one_binary']) if fam['time'] else 'emulated'} "
                   f"| {cells['zs_store']} | {cells['zs_malloc']} | results.json "
                   f"| {verdict(row['instr'], fam['instr_delta'])} |")
    out.append("")
    out.append("instr/pair: patched - baseline retired instructions per pair (the mail's in the "
               "kernel; ours allocator only, averaged over the sizes). Time: ours is CPU time per "
               "pair in one binary, geomean over the sizes. Code size: baseline -> "
               "patched function body. GCC 15 is not packaged in Debian 12: g++ 12 stands in "
               "for it; PGO stands in for AutoFDO. "
               + ("arm64: instructions counted under qemu-aarch64, no time." if arch == "arm64"
                  else "The mail's arm64 rows: tools/run-kernel-ab.sh --arch arm64."))
    return "\n".join(out) + "\n"


def markdown(configs):
    """Two markdown tables: per configuration, pair and size; per function, code size."""
    out = ["| configuration | pair | size | instr baseline | instr patched | Δ instr "
           "| ns baseline | ns patched | Δ time, one binary (p) | Δ time, two binaries (p) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in configs:
        for family, fam in c["summary"]["families"].items():
            for r in fam["sizes"]:
                if "one_binary" in r:
                    one, sep = r["one_binary"], r["separate"]
                    times = (f"{one['baseline_ns']:.1f} | {one['patched_ns']:.1f} | {cell(one)} "
                             f"| {cell(sep)}")
                else:
                    times = "- | - | emulated | emulated"
                out.append(
                    f"| {c['label']} | {FAMILIES[family]} | {r['size']} "
                    f"| {r['instr']['baseline']:.1f} | {r['instr']['patched']:.1f} "
                    f"| {fmt_signed(r['instr_delta'])} | {times} |")
    out += ["", "| configuration | function | baseline B | patched B | Δ "
            "| baseline calls out of line | patched calls out of line |",
            "|---|---|---:|---:|---:|---|---|"]
    for c in configs:
        for fn, cs in c["summary"]["code_size"].items():
            b, p = cs["baseline"]["bytes"], cs["patched"]["bytes"]
            out.append(f"| {c['label']} | {fn} | {b} | {p} | {fmt_pct(100.0 * (p - b) / b)} "
                       f"| {', '.join(c['raw']['callees']['baseline'][fn]) or '-'} "
                       f"| {', '.join(c['raw']['callees']['patched'][fn]) or '-'} |")
    out.append("")
    out.append("instr: retired instructions per pair (callgrind; qemu-aarch64 on arm64), "
               "allocator only (without the "
               "copy, memcpy or zsm's copy_payload, and the benchmark loop). ns: median CPU time "
               "per pair over the repetitions in one binary. Δ time: patched vs baseline "
               "medians, two-sided Mann-Whitney U p; "
               f"p >= {ab_analysis.ALPHA} is within noise.")
    return "\n".join(out) + "\n"


def cell(cmp):
    verdict = "" if cmp["significant"] else ", noise"
    return f"{fmt_pct(cmp['delta_pct'])} ({cmp['p']:.3f}{verdict})"


def plot(configs, out_dir):
    """ab.png: instructions and ns per pair against size, per pair, configuration and
    variant. Returns the PNG's path."""
    data = os.path.join(out_dir, "ab_plot.dat")
    with open(data, "w") as fh:
        for c in configs:  # one gnuplot index per configuration
            fh.write(f"# {c['label']}\n")
            for i, r in enumerate(c["summary"]["families"]["store"]["sizes"]):
                w = c["summary"]["families"]["write"]["sizes"][i]
                fh.write(" ".join(str(x) for x in (
                    r["size"], r["instr"]["patched"], r["instr"]["baseline"],
                    r["one_binary"]["patched_ns"], r["one_binary"]["baseline_ns"],
                    w["instr"]["patched"], w["instr"]["baseline"],
                    w["one_binary"]["patched_ns"], w["one_binary"]["baseline_ns"])) + "\n")
            fh.write("\n\n")
    png = os.path.join(out_dir, "ab.png")
    panels = [(2, "store", "instructions per pair (allocator only)"),
              (4, "store", "ns per pair (median CPU time, one binary)"),
              (6, "write", "instructions per pair (allocator only)"),
              (8, "write", "ns per pair (median CPU time, one binary)")]
    script = ["set terminal pngcairo size 1400,1000 font ',10' noenhanced",
              f"set output '{png}'", "set multiplot layout 2,2", "set key top left font ',8'",
              "set xlabel 'object size (B)'", "set grid"]
    for col, family, ylabel in panels:
        script += [f"set title '{FAMILIES[family]}'", f"set ylabel '{ylabel}'"]
        curves = []
        for i, c in enumerate(configs):
            for off, v, dash in ((0, "patched", 1), (1, "baseline", 2)):
                curves.append(f"'{data}' index {i} using 1:{col + off} with linespoints "
                              f"lc {i + 1} dt {dash} title '{c['label']} {v}'")
        script.append("plot " + ", ".join(curves))
    script.append("unset multiplot")
    proc = subprocess.run(["gnuplot"], input="\n".join(script), text=True, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gnuplot failed:\n{proc.stderr}")
    return png


def report(configs):
    """The printed report: every configuration's mail paragraph, the mail's rows beside ours,
    then the markdown tables."""
    lines = []
    for c in configs:
        lines += mail_lines(c) + [""]
    return ("\n".join(lines) + "\nThe mail's table beside ours\n\n" + mail_comparison(configs)
            + "\n" + markdown(configs))


def load(path):
    """A saved run (ab.py's results.json), every configuration's summary recomputed from its
    raw figures."""
    with open(path) as fh:
        data = json.load(fh)
    st = data["settings"]
    for c in data["configs"]:
        c["summary"] = ab_analysis.summarize(c["raw"], st["sizes"], st["functions"],
                                             st["helpers"])
    return data


def main():
    """Prints the report of a saved run again."""
    data = load(sys.argv[1])
    print("\n".join(data["header"]) + "\n\n" + report(data["configs"]))


if __name__ == "__main__":
    main()
