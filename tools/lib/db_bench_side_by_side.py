#!/usr/bin/env python3
"""RocksDB's own db_bench and cache_bench with no secondary tier, RocksDB's compressed tier and
zsm's (libzsm_rocksdb_plugin.so through LD_PRELOAD), repeated and interleaved, compared two
ways: at equal capacity setting, and at equal peak RSS (zsm's capacity raised 1 MiB at a time
to the largest whose peak RSS stays at or below RocksDB's lz4 tier's, uniform and skewed
apart). Prints Markdown tables of ops/s (median and range), secondary hits, hits per MiB of
tier memory, each tier's memory and blocks held; writes them, a CSV of every run and a plot.
tools/run-db-bench.sh installs the tools, builds the plugin and runs this; see
docs/rocksdb.md, "RocksDB's own tools".

Where the figures come from:
- ops/s: db_bench's "readrandom : ... ops/sec" line, cache_bench's "Rough parallel ops/sec".
- secondary hits: RocksDB's ticker rocksdb.secondary.cache.hits (db_bench --statistics), the
  same for both tiers; cache_bench prints none, so there it is zsm's own count (its exit line).
- pool MB, payload %, blocks: zsm's exit line (pool pages, compressed bytes over them,
  entries); RocksDB's tier reports neither, shown as '-'.
- RSS MB: the run's peak resident set (ru_maxrss from wait4).
- tier MB: the run's peak RSS less that of the same reads with no secondary tier (the median
  of its runs): the memory the tier adds. hits/MiB: secondary hits per MiB of it.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import progress  # noqa: E402

READ_FLAGS = ["--benchmarks=readrandom", "--use_existing_db=1", "--compression_type=none",
              "--statistics", "--seed=42", "--threads=1"]


def zsm_tier(name, mib, codec, plugin):
    """zsm's tier of `mib` MiB, admitting every block the primary evicts (its default)."""
    return (name, [f"--secondary_cache_uri=zsm://{mib}M;codec={codec}"], plugin)


def tiers(capacity, plugin):
    rocks = ["--use_compressed_secondary_cache",
             f"--compressed_secondary_cache_size={capacity}"]
    mib = capacity >> 20
    return [
        ("none", [], None),
        ("rocksdb-lz4", rocks + ["--compressed_secondary_cache_compression_type=lz4"], None),
        zsm_tier("zsm-lz4", mib, "lz4", plugin),
        ("rocksdb-zstd", rocks + ["--compressed_secondary_cache_compression_type=zstd"], None),
        zsm_tier("zsm-zstd", mib, "zstd", plugin),
    ]


def cache_bench_tiers(capacity, plugin):
    mib = capacity >> 20
    return [
        ("none", [], None),
        ("rocksdb-lz4", ["--secondary_cache_uri=compressed_secondary_cache://"
                         f"capacity={capacity};compression_type=kLZ4Compression"], None),
        ("zsm-lz4", [f"--secondary_cache_uri=zsm://{mib}M;codec=lz4"], plugin),
    ]


def run(cmd, preload):
    """Runs cmd; returns (output, peak RSS in bytes)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    return out, usage.ru_maxrss * 1024


def zsm_line(out):
    m = re.search(r"zsm tier \S+: hits (\d+) .*? entries (\d+) bytes_held (\d+) "
                  r"pool_bytes (\d+) compr_bytes (\d+)", out)
    if not m:
        return None
    hits, entries, held, pool, compr = map(int, m.groups())
    return {"zsm_hits": hits, "blocks": entries, "held": held, "pool": pool, "compr": compr}


def db_bench_run(args, extra, preload, skewed):
    cmd = [args.db_bench, f"--db={args.db}", f"--num={args.num}",
           f"--value_size={args.value_size}", f"--cache_size={args.cache_size}",
           f"--reads={args.reads}"] + READ_FLAGS + extra
    if skewed:
        cmd.append(f"--read_random_exp_range={args.exp_range}")
    out, rss = run(cmd, preload)
    m = re.search(r"readrandom\s*:\s*[\d.]+ micros/op (\d+) ops/sec", out)
    h = re.search(r"rocksdb\.secondary\.cache\.hits COUNT : (\d+)", out)
    if not m or not h:
        sys.exit(f"no readrandom line or hits in:\n{out[-3000:]}")
    r = {"ops": int(m.group(1)), "hits": int(h.group(1)), "rss": rss}
    r.update(zsm_line(out) or {})
    return r


def cache_bench_run(args, extra, preload):
    cmd = [args.cache_bench, f"--ops_per_thread={args.cb_ops}",
           f"--threads={args.cb_threads}"] + extra
    out, rss = run(cmd, preload)
    m = re.search(r"Rough parallel ops/sec = (\d+)", out)
    if not m:
        sys.exit(f"no ops/sec line in:\n{out[-3000:]}")
    r = {"ops": int(m.group(1)), "rss": rss}
    z = zsm_line(out)
    if z:
        r.update(z)
        r["hits"] = z["zsm_hits"]
    return r


def fill(args):
    marker = os.path.join(args.db, ".zsm-filled")
    want = f"{args.num} {args.value_size}\n"
    if os.path.exists(marker) and open(marker).read() == want:
        print(f"# DB {args.db}: filled before ({want.strip()}), reused", flush=True)
        return
    subprocess.run(["rm", "-rf", args.db], check=True)
    t = time.time()
    run([args.db_bench, "--benchmarks=fillrandom,compact", f"--db={args.db}",
         f"--num={args.num}", f"--value_size={args.value_size}", "--compression_type=none",
         "--seed=1"], None)
    open(marker, "w").write(want)
    print(f"# DB {args.db}: filled, {args.num} keys of {args.value_size} B, "
          f"{time.time() - t:.0f} s", flush=True)


def mb(v):
    return f"{v / 1e6:.1f}"


def tier_memory(rs, base_rss):
    """The peak RSS the tier adds over no tier, in bytes (median over the runs)."""
    return statistics.median(r["rss"] for r in rs) - base_rss


def hits_per_mib(rs, base_rss):
    added = tier_memory(rs, base_rss)
    if "hits" not in rs[-1] or added <= 0:
        return None
    return statistics.median(r["hits"] for r in rs) / (added / (1 << 20))


def table(title, names, results, base_rss=None, show_payload=True):
    lines = [f"\n{title}\n",
             "| tier | ops/s median | ops/s range | secondary hits | tier MB | hits/MiB "
             "| pool MB | payload % | bytes held MB | blocks held | peak RSS MB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        rs = results[name]
        per_mib = hits_per_mib(rs, base_rss) if base_rss is not None else None
        tier_mb = (mb(tier_memory(rs, base_rss))
                   if base_rss is not None and name != "none" else "-")
        ops = [r["ops"] for r in rs]
        last = rs[-1]
        hits = statistics.median(r["hits"] for r in rs) if "hits" in last else None
        rss = statistics.median(r["rss"] for r in rs)
        pool = f"{mb(last['pool'])}" if "pool" in last else "-"
        payload = (f"{100 * last['compr'] / last['pool']:.1f}"
                   if "pool" in last and last["pool"] and show_payload else "-")
        held = mb(last["held"]) if "held" in last else "-"
        blocks = f"{last['blocks']:,}" if "blocks" in last else "-"
        lines.append(f"| {name} | {statistics.median(ops):,.0f} | {min(ops):,}-{max(ops):,} | "
                     f"{'-' if hits is None else f'{hits:,.0f}'} | {tier_mb} | "
                     f"{'-' if per_mib is None or name == 'none' else f'{per_mib:,.0f}'} | "
                     f"{pool} | {payload} | {held} | {blocks} | {mb(rss)} |")
    payloads = [100 * r["compr"] / r["pool"] for name in names for r in results[name]
                if r.get("pool")]
    if payloads:
        lines.append(f"\nzsm pool payload at the end of every run: {min(payloads):.1f} % "
                     f"(lowest) .. {max(payloads):.1f} % (highest)")
    return "\n".join(lines)


def equal_rss(args, results, distribution):
    """zsm-lz4's capacity raised 1 MiB at a time from the equal-capacity setting while its peak
    RSS stays at or below rocksdb-lz4's (the median of its runs): the largest such capacity, and
    args.reps runs at it (the first of them the last probe's). None when even the equal
    capacity passes RocksDB's RSS."""
    target = statistics.median(r["rss"] for r in results[(distribution, "rocksdb-lz4")])
    skewed = distribution == "skewed"
    mib = args.capacity >> 20
    best = None
    while mib <= 4 * (args.capacity >> 20):
        r = db_bench_run(args, zsm_tier("zsm-lz4", mib, "lz4", args.plugin)[1], args.plugin,
                         skewed)
        print(f"# equal RSS {distribution:7} zsm-lz4 {mib:>3} MiB: RSS {mb(r['rss'])} MB "
              f"(RocksDB's {mb(target)}), {r['hits']:>8} hits", flush=True)
        if r["rss"] > target:
            break
        best = (mib, [r])
        mib += 1
    if best is None:
        return None
    mib, runs = best
    for _ in range(args.reps - 1):
        runs.append(db_bench_run(args, zsm_tier("zsm-lz4", mib, "lz4", args.plugin)[1],
                                 args.plugin, skewed))
    return mib, runs


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["comparison", "distribution", "tier", "capacity_mib", "rep", "ops_per_s",
                    "secondary_hits", "peak_rss_bytes", "tier_bytes", "zsm_blocks",
                    "zsm_pool_bytes"])
        w.writerows(rows)


def plot(path, bars):
    """A bar chart of secondary hits: per distribution and comparison, RocksDB's beside zsm's.
    bars: [(label, rocksdb hits, zsm hits)]. Drawn with gnuplot when it is there."""
    dat = path + ".dat"
    with open(dat, "w") as f:
        f.write("comparison rocksdb-lz4 zsm-lz4\n")
        for label, rocks, zsm in bars:
            f.write(f'"{label}" {rocks} {zsm}\n')
    script = f"""set terminal pngcairo size 900,500
set output '{path}'
set title 'db_bench readrandom: secondary hits, RocksDB lz4 against zsm lz4'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'secondary cache hits'
set yrange [0:*]
set key top left
plot '{dat}' using 2:xtic(1) title columnheader(2), '' using 3 title columnheader(3)
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True, capture_output=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plugin", required=True, help="libzsm_rocksdb_plugin.so")
    p.add_argument("--db", required=True, help="the DB's directory (filled once, then reused)")
    p.add_argument("--db-bench", default="db_bench")
    p.add_argument("--cache-bench", default="cache_bench")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--num", type=int, default=200000)
    p.add_argument("--value-size", type=int, default=1000)
    p.add_argument("--reads", type=int, default=150000)
    p.add_argument("--cache-size", type=int, default=4 << 20, help="the primary block cache")
    p.add_argument("--capacity", type=int, default=16 << 20, help="each secondary tier")
    p.add_argument("--exp-range", type=int, default=5,
                   help="the skewed reads' --read_random_exp_range")
    p.add_argument("--no-equal-rss", action="store_true",
                   help="skip the equal-RSS comparison")
    p.add_argument("--cb-ops", type=int, default=100000, help="cache_bench --ops_per_thread")
    p.add_argument("--cb-threads", type=int, default=4, help="cache_bench --threads")
    p.add_argument("--no-cache-bench", action="store_true")
    p.add_argument("--out", help="also write the tables here, the CSV beside (.csv) and the "
                   "plot (.png)")
    args = p.parse_args()

    fill(args)
    db_tiers = tiers(args.capacity, args.plugin)
    cb_tiers = cache_bench_tiers(args.capacity, args.plugin)
    results = {(d, n): [] for d in ("uniform", "skewed") for n, _, _ in db_tiers}
    cb_results = {n: [] for n, _, _ in cb_tiers}
    total = args.reps * (2 * len(db_tiers) + (0 if args.no_cache_bench else len(cb_tiers)))
    start, done = time.time(), 0
    for rep in range(args.reps):
        # Interleaved: every tier once per repetition, in an order rotated by the repetition.
        k = rep % len(db_tiers)
        for skewed in (False, True):
            for name, extra, preload in db_tiers[k:] + db_tiers[:k]:
                r = db_bench_run(args, extra, preload, skewed)
                d = "skewed" if skewed else "uniform"
                results[(d, name)].append(r)
                done += 1
                print(f"# rep {rep + 1} {d:7} {name:12} {r['ops']:>8} ops/s "
                      f"{r['hits']:>8} hits (run {done}/{total}"
                      f"{progress.eta(start, done, total)})", flush=True)
        if not args.no_cache_bench:
            k = rep % len(cb_tiers)
            for name, extra, preload in cb_tiers[k:] + cb_tiers[:k]:
                r = cache_bench_run(args, extra, preload)
                cb_results[name].append(r)
                done += 1
                print(f"# rep {rep + 1} cache_bench {name:12} {r['ops']:>8} ops/s "
                      f"{r.get('hits', '-')} zsm hits (run {done}/{total}"
                      f"{progress.eta(start, done, total)})", flush=True)

    rss_match = {}
    if not args.no_equal_rss:
        for d in ("uniform", "skewed"):
            rss_match[d] = equal_rss(args, results, d)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    head = (f"db_bench/cache_bench side by side on {cpu}, {os.cpu_count()} CPUs, "
            f"{args.reps} interleaved repetitions, each tier {args.capacity >> 20} MiB "
            f"at equal capacity (zsm's admission: every block the primary evicts, its default)")
    names = [n for n, _, _ in db_tiers]
    common = (f"--num={args.num} --value_size={args.value_size} --compression_type=none "
              f"--cache_size={args.cache_size} --reads={args.reads} --statistics --seed=42")
    out = [head]
    rows, bars = [], []
    for d in ("uniform", "skewed"):
        flags = common + (f" --read_random_exp_range={args.exp_range}" if d == "skewed" else "")
        by_name = {n: results[(d, n)] for n in names}
        base = statistics.median(r["rss"] for r in by_name["none"])
        out.append(table(f"db_bench readrandom, {d}, equal capacity ({flags})", names, by_name,
                         base))
        for n in names:
            for rep, r in enumerate(by_name[n]):
                rows.append(["equal-capacity", d, n, args.capacity >> 20, rep, r["ops"],
                             r["hits"], r["rss"], r["rss"] - base, r.get("blocks", ""),
                             r.get("pool", "")])
        rocks_hits = statistics.median(r["hits"] for r in by_name["rocksdb-lz4"])
        zsm_hits = statistics.median(r["hits"] for r in by_name["zsm-lz4"])
        bars.append((f"{d}, equal capacity", rocks_hits, zsm_hits))
        match = rss_match.get(d)
        if match:
            mib, runs = match
            name = f"zsm-lz4 at {mib} MiB"
            out.append(table(f"db_bench readrandom, {d}, equal peak RSS: zsm's capacity raised to "
                             f"the largest whose RSS stays at or below RocksDB's lz4 tier's",
                             ["rocksdb-lz4", name],
                             {"rocksdb-lz4": by_name["rocksdb-lz4"], name: runs}, base))
            for rep, r in enumerate(runs):
                rows.append(["equal-rss", d, "zsm-lz4", mib, rep, r["ops"], r["hits"], r["rss"],
                             r["rss"] - base, r.get("blocks", ""), r.get("pool", "")])
            match_hits = statistics.median(r["hits"] for r in runs)
            out.append(f"\nzsm at equal RSS: {match_hits:,.0f} hits against RocksDB's "
                       f"{rocks_hits:,.0f} ({100 * (match_hits / rocks_hits - 1):+.1f} %)")
            bars.append((f"{d}, equal RSS", rocks_hits, match_hits))
        elif not args.no_equal_rss:
            out.append(f"\n{d}: zsm's tier at {args.capacity >> 20} MiB already passes RocksDB's "
                       "peak RSS: no equal-RSS capacity at or above it")
    if not args.no_cache_bench:
        out.append(table(f"cache_bench, default values (8 KiB), --ops_per_thread={args.cb_ops} "
                         f"--threads={args.cb_threads} (secondary hits: zsm's own count)",
                         [n for n, _, _ in cb_tiers], cb_results))
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        open(args.out, "w").write(text)
        base_path = os.path.splitext(args.out)[0]
        write_csv(base_path + ".csv", rows)
        drawn = plot(base_path + ".png", bars)
        print(f"# wrote {args.out}, {base_path}.csv" + (f", {base_path}.png" if drawn else
              " (no plot: gnuplot failed or is missing)"))


if __name__ == "__main__":
    main()
