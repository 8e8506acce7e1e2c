#!/usr/bin/python3
"""Runs zsm_stats with the given arguments and checks what it prints (a ctest test).

Usage: stats_check.py ZSM_STATS ARGS...

--sizes and --files runs: the debugfs classes table has the kernel's header, 17 numbers a
class row, rows that add up to the Total row, and pages_used = obj_allocated / objs_per_zspage
* pages_per_zspage for every row; the summary agrees with the table (objects, pages); a sizes
run leaves stores - frees objects; a --files run prints a 9-field mm_stat line whose
mem_used_total is the pages held and whose orig_data_size is the pages stored.
--class-table runs: one row per distinct class (119 at chain 8, 69 at chain 4), whose payload
ranges tile 1..page size and whose tail waste is the zspage's bytes not covered by objects.
Prints "stats_check: ok" when every check passes; exits 1 with the reason otherwise.
"""
import re
import subprocess
import sys

# The kernel's header (mm/zsmalloc.c, zs_stats_size_show), column for column.
CLASSES_HEADER = (" %5s %5s" % ("class", "size")
                  + "".join(" %9s" % g for g in ("10%", "20%", "30%", "40%", "50%", "60%",
                                                  "70%", "80%", "90%", "99%", "100%"))
                  + " %13s %10s %10s %16s %8s" % ("obj_allocated", "obj_used", "pages_used",
                                                  "pages_per_zspage", "freeable"))
DISTINCT_CLASSES = {4: 69, 8: 119}  # 4 KiB pages, the kernel's rule (kernel-zsmalloc.md)


def fail(msg):
    print(f"stats_check: FAIL: {msg}")
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def classes_table(lines):
    """The lines of the classes table: its header up to its Total row."""
    expect("classes:" in lines, "no 'classes:' section")
    start = lines.index("classes:") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].lstrip().startswith("Total")),
               None)
    expect(end is not None, "no Total row")
    return lines[start:end + 1]


def chain_size(args):
    return next((int(a.split("=")[1]) for a in args if a.startswith("--chain=")), 8)


def check_classes(lines, args):
    """The classes table (4 KiB pages); returns its Total row as a list of ints."""
    body = classes_table(lines)
    expect(body[0] == CLASSES_HEADER, f"classes header is {body[0]!r}")
    rows = [list(map(int, l.split())) for l in body[1:] if l.strip() and "Total" not in l]
    total = list(map(int, body[-1].split()[1:]))
    expect(all(len(r) == 18 for r in rows), "a class row without 18 numbers")
    expect(len(rows) == DISTINCT_CLASSES[chain_size(args)], f"{len(rows)} class rows")
    expect(len(total) == 15, "Total row without 15 numbers")
    for r in rows:
        size, allocated, used, pages_used, ppz = r[1], r[13], r[14], r[15], r[16]
        objs = ppz * 4096 // size
        expect(used <= allocated, f"class {r[0]}: obj_used above obj_allocated")
        expect(allocated % objs == 0, f"class {r[0]}: obj_allocated not whole zspages")
        expect(pages_used == allocated // objs * ppz, f"class {r[0]}: pages_used")
        expect(r[17] == (allocated - used) // objs * ppz, f"class {r[0]}: freeable")
    sums = [sum(r[c] for r in rows) for c in range(2, 16)]
    expect(total[:14] == sums, f"Total row {total} is not the sum of the rows {sums}")
    expect(total[14] == sum(r[17] for r in rows), "Total freeable")
    return total


def summary_number(lines, pattern):
    for line in lines:
        m = re.search(pattern, line)
        if m:
            return int(m.group(1))
    fail(f"no summary line matching {pattern!r}")


def check_run(out, args):
    lines = out.splitlines()
    total = check_classes(lines, args)
    objects = summary_number(lines, r"^objects: (\d+) live")
    pages = summary_number(lines, r"^held: (\d+) pages")
    expect(objects == total[12], f"summary objects {objects} != Total obj_used {total[12]}")
    expect(pages >= total[13], f"summary pages {pages} below Total pages_used {total[13]}")
    expect(objects > 0, "no live object")
    if any(a.startswith("--sizes=") for a in args):
        m = re.search(r"(\d+) stores, (\d+) frees", out)
        expect(m, "no stores/frees line")
        expect(objects == int(m.group(1)) - int(m.group(2)), "live objects != stores - frees")
    if any(a.startswith("--files=") for a in args):
        i = next((i for i, l in enumerate(lines) if l.startswith("mm_stat (")), None)
        expect(i is not None, "no mm_stat section")
        expect(lines[i].split("(")[1].rstrip("):").split() ==
               ["orig_data_size", "compr_data_size", "mem_used_total", "mem_limit",
                "mem_used_max", "same_pages", "pages_compacted", "huge_pages",
                "huge_pages_since"], "mm_stat column names")
        fields = lines[i + 1].split()
        expect(len(fields) == 9 and all(f.isdigit() for f in fields),
               f"mm_stat line {lines[i + 1]!r} is not 9 numbers")
        mm = list(map(int, fields))
        stored = int(re.search(r": (\d+) pages of 4 KiB", out).group(1))
        expect(mm[0] == stored * 4096, "orig_data_size != pages stored * 4096")
        expect(mm[2] == pages * 4096, "mem_used_total != pages held * 4096")
        expect(mm[1] < mm[0], "compr_data_size not below orig_data_size")
        expect(mm[4] >= mm[2], "mem_used_max below mem_used_total")


def check_class_table(out, args):
    chain = chain_size(args)
    rows = [list(map(int, l.split())) for l in out.splitlines()
            if l.strip() and not l.startswith("#")]
    expect(len(rows) == DISTINCT_CLASSES[chain], f"{len(rows)} classes at chain {chain}")
    expected_min = 1
    for index, size, ppz, objs, zspage, waste, lo, hi in rows:
        expect(zspage == ppz * 4096 and waste == zspage - objs * size, f"class {index} waste")
        expect(lo == expected_min and lo <= hi, f"class {index} payload range {lo}..{hi}")
        expected_min = hi + 1
    expect(expected_min == 4097, "payload ranges do not end at the page size")


def main():
    binary, args = sys.argv[1], sys.argv[2:]
    proc = subprocess.run([binary] + args, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    expect(proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr}")
    if "--class-table" in args:
        check_class_table(proc.stdout, args)
    else:
        check_run(proc.stdout, args)
    print("stats_check: ok")


if __name__ == "__main__":
    main()
