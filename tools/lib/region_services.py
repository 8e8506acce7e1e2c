#!/usr/bin/env python3
"""Long-running services whose old data sits idle, each run plainly and under zsm-run (with no
flags: its default mode; or with --zsm-args'), side by side: redis-server; a python3 process
serving a dict; sqlite3 (an in-memory database, whose page cache is the whole database) in a
python3 process. Every service
holds the same values: 2 KiB each, cut in order from the corpus, the files under /usr/share and
/usr/lib (one of each in turn, in name order, each file's first 256 KiB, compressed files left
out: real text and binaries, compressible as memory is). Key i ("k:<i>") is the i-th value;
the newest keys are the highest.

Each run: the service starts (the Python ones build their data first; redis-server is loaded by
the client, SETs: the table's "load s"), a warm-up of a quarter of --seconds, then the measured phase: the client
(tools/region/service_client.cpp; one connection, 16 requests in flight) reads for --seconds,
Zipf(0.99) over the newest 30 % of the keys and one read in a thousand an older key, checking
every value, while the service's VmRSS is sampled every 0.2 s (and all its life long, into
DIR/<service>-<plain|zsm>.rss.csv, for tools/run-plots.sh services). Then SHUTDOWN, so that zsm-run's
--stats line (when --zsm-args asks for it) is printed at exit. One Markdown table; the service's
and the client's CPU share of the measured phase show which of them was the bottleneck.

  region_services.py --zsm-run PATH --client PATH [--services redis,python,sqlite] [--scale N]
                     [--seconds N] [--rounds N] [--zsm-args "..."] [--dir DIR] [--user UID] [--check]

With --rounds N, each service runs N pairs, plain first in odd rounds and zsm-run first in even
ones, and a last row gives the medians of the pairs' ratios (the machine's own noise between
identical runs is often larger than 5 %).

The Python services are this module, run as `region_services.py --serve dict|sqlite ...`.
"""
import argparse
import atexit
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from region_programs import as_user, cpu_line, free_port, reachable_by_others  # noqa: E402

VALUE = 2048  # bytes of each value
COMPRESSED = {".gz", ".xz", ".zst", ".bz2", ".lz4", ".zip", ".jar", ".png", ".jpg", ".jpeg", ".gif",
              ".woff", ".woff2", ".deb"}


def corpus_files(root):
    """The regular files under root in name order, compressed ones left out."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            if path.suffix not in COMPRESSED and path.is_file() and not path.is_symlink():
                yield path


def make_corpus(target, keys):
    """keys values of VALUE bytes into the file target; returns (files read, zlib level 1's ratio)."""
    want, got, used, chunks = keys * VALUE, 0, 0, []
    sources = [corpus_files("/usr/share"), corpus_files("/usr/lib")]
    while got < want and sources:
        for files in list(sources):
            source = next(files, None)
            if source is None:
                sources.remove(files)
                continue
            try:
                with open(source, "rb") as f:
                    chunks.append(f.read(256 << 10))
            except OSError:
                continue
            got += len(chunks[-1])
            used += 1
    data = b"".join(chunks)[:want]
    if len(data) < want:
        sys.exit("region_services.py: /usr/share and /usr/lib hold too few bytes for this --scale")
    target.write_bytes(data)
    target.chmod(0o644)
    return used, len(zlib.compress(data, 1)) / len(data)


def serve(store, port, corpus, keys):
    """The Python services: the values in a dict, or in an in-memory SQLite table, then answers
    "GET k:<i>" lines as redis does ($<len> and the bytes, $-1 for none), every complete line of
    what one recv() brought, in one send; SHUTDOWN ends it (a normal exit: zsm-run's line)."""
    with open(corpus, "rb") as f:
        if store == "dict":
            get = {b"k:%d" % i: f.read(VALUE) for i in range(keys)}.get
        else:
            db = sqlite3.connect(":memory:")
            db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
            db.executemany("INSERT INTO t VALUES (?, ?)", ((i, f.read(VALUE)) for i in range(keys)))
            db.commit()

            def get(key):
                row = db.execute("SELECT v FROM t WHERE id = ?", (int(key[2:]),)).fetchone()
                return row and row[0]
    server = socket.create_server(("127.0.0.1", port))  # listening now: the data is in
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            rest = b""
            while chunk := conn.recv(1 << 16):
                *lines, rest = (rest + chunk).split(b"\r\n")
                out = []
                for line in lines:
                    command, _, key = line.partition(b" ")
                    if command == b"SHUTDOWN":
                        return
                    v = get(key)
                    out.append(b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v))
                conn.sendall(b"".join(out))


def wait_ready(port, proc, timeout):
    """Whether the service accepts connections within timeout (False when it exited)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Failed(Exception):
    """A run that ended without its measurement; the text says why."""


def client(a, port, *how, timeout):
    """The client's line (tools/region/service_client.cpp) as a dict of numbers."""
    p = subprocess.run([a.client, "--port", str(port), "--keys", str(a.keys), "--corpus", str(a.corpus), *how],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise Failed(f"client: {p.stderr.strip()}")
    return {k: float(v) for k, v in (f.split("=") for f in p.stdout.split())}


def cpu_ticks(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def status_kib(pid, field):
    return next(int(l.split()[1]) for l in Path(f"/proc/{pid}/status").read_text().splitlines()
                if l.startswith(field + ":"))


class RssSeries:
    """The service's VmRSS every 0.2 s from its start to its end, written as CSV (seconds, MiB):
    what tools/run-plots.sh services draws, plain against zsm-run (with --rounds, the last
    round's)."""

    def __init__(self, pid, path):
        self.pid, self.path, self.start, self.rows = pid, path, time.monotonic(), []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.done.wait(0.2):
            try:
                self.rows.append((time.monotonic() - self.start, status_kib(self.pid, "VmRSS") / 1024))
            except (OSError, StopIteration):  # exited, or a zombie without the field
                return

    def close(self):
        self.done.set()
        self.thread.join()
        self.path.write_text("seconds,rss_mib\n" + "".join(f"{t:.1f},{m:.1f}\n" for t, m in self.rows))


def measure(a, pid, port):
    """The measured phase: the client's dict, with the service's RSS sampled every 0.2 s meanwhile
    (average and peak, MiB) and its CPU share added."""
    ticks, samples = cpu_ticks(pid), []
    with ThreadPoolExecutor(1) as pool:
        reads = pool.submit(client, a, port, "--seconds", str(a.seconds), timeout=a.seconds + 60)
        while not reads.done():
            samples.append(status_kib(pid, "VmRSS"))
            time.sleep(0.2)
        r = reads.result()
    r["rss"] = sum(samples) / len(samples) / 1024
    r["peak"] = status_kib(pid, "VmHWM") / 1024
    r["service_cpu"] = (cpu_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / r["seconds"]
    return r


def run_service(a, name, zsm, work):
    """One run: the measurement's dict, or a string saying why there is none."""
    port = int(free_port())
    if name == "redis":
        argv = ["redis-server", "--save", "", "--appendonly", "no", "--port", str(port), "--bind", "127.0.0.1",
                "--dir", str(work)]
    else:
        argv = ["/usr/bin/python3", a.module, "--serve", "dict" if name == "python" else "sqlite",
                "--port", str(port), "--corpus", str(a.corpus), "--keys", str(a.keys)]
    if zsm:
        argv = [a.zsm_run, *shlex.split(a.zsm_args), "--"] + argv
    log = work / f"{name}-{'zsm' if zsm else 'plain'}.log"
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(as_user(argv, a.user), cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    series = RssSeries(proc.pid, work / f"{name}-{'zsm' if zsm else 'plain'}.rss.csv")
    try:
        if not wait_ready(port, proc, 600):
            raise Failed("it did not start")
        if name == "redis" and client(a, port, "--load", timeout=600)["wrong"]:
            raise Failed("a SET was refused")
        load_s = time.monotonic() - start
        client(a, port, "--seconds", str(a.seconds / 4), timeout=a.seconds + 60)  # the warm-up
        r = measure(a, proc.pid, port)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"SHUTDOWN NOSAVE\r\n")
        if proc.wait(timeout=120) != 0:
            raise Failed("it did not exit cleanly")
    except (Failed, OSError, subprocess.TimeoutExpired) as e:
        ended = proc.poll()
        return f"{e}" + ("" if ended is None else f"; the service's exit status {ended}: {tail(log)}")
    finally:
        series.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    r["load_s"] = load_s
    r["region"] = region_line(log.read_text(errors="replace"))
    return r


def tail(path):
    lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    return lines[-1][:150] if lines else "(nothing on its output)"


def region_line(log):
    """zsm-run's --stats line at exit, shortened to what the table needs: the cold age, the memory
    saved now and on average, the stall and promotions, what is stored in what; else its line at
    start (the mode and budget)."""
    lines = [l for l in log.splitlines() if l.startswith("zsm-run: ")]
    exit_line = next((l for l in lines if " at exit: " in l), None)
    if exit_line is None:
        return re.sub(r"^zsm-run: \S+: ", "", lines[0]).split(";")[0] if lines else "-"
    parts = [re.search(p, exit_line) for p in (r"cold age [\d.]+ s", r"saved now [^;]*", r"stalled [^;]*",
                                                 r"stored [\d.]+ MiB in [\d.]+ MiB")]
    return "; ".join(m.group(0) for m in parts if m) or "-"


def times(r, plain, key):
    """r's key over the plain run's ("-" where the plain run failed)."""
    return "-" if plain is None else f"{r[key] / plain[key]:.2f}"


def run_pair(a, name, round_, work, failures):
    """One round of a service: plain, then under zsm-run (the order swapped in even rounds, so
    that neither always runs on a machine the other warmed). Prints a row each; returns the
    zsm-run run's (RSS, ops/s, p99) over the plain run's, or None when either failed."""
    order = (False, True) if round_ % 2 else (True, False)
    results = {}
    for zsm in order:
        run = ("zsm-run" if zsm else "plain") + (f" {round_}" if a.rounds > 1 else "")
        r = run_service(a, name, zsm, work)
        if isinstance(r, str):
            print(f"| {name} | {run} | failed: {r.replace('|', '/')} | | | | | | | | | | | |", flush=True)
            failures.append(f"{name} {run}: {r}")
            continue
        r["ops_s"] = r["ops"] / r["seconds"]
        results[zsm] = r
        plain = results.get(False)
        print(f"| {name} | {run} | {r['load_s']:.1f} | {r['rss']:.1f} | {r['peak']:.1f} | "
              f"{times(r, plain, 'rss')} | {r['ops_s']:.0f} | {times(r, plain, 'ops_s')} | {r['p99_us']:.0f} | "
              f"{times(r, plain, 'p99_us')} | {r['wrong']:.0f} | {r['service_cpu']:.0%} | "
              f"{r['cpu_s'] / r['seconds']:.0%} | {r['region'] if zsm else '-'} |", flush=True)
        if r["wrong"]:
            failures.append(f"{name} {run}: {r['wrong']:.0f} wrong values")
    if len(results) < 2:
        return None
    zsm, plain = results[True], results[False]
    if not plain["p99_us"]:
        return None
    if order[0]:  # zsm-run ran first: its row had no plain run to divide by
        print(f"| {name} | zsm-run {round_} over plain {round_} | | | | {zsm['rss'] / plain['rss']:.2f} | | "
              f"{zsm['ops_s'] / plain['ops_s']:.2f} | | {zsm['p99_us'] / plain['p99_us']:.2f} | | | | |", flush=True)
    return (zsm["rss"] / plain["rss"], zsm["ops_s"] / plain["ops_s"], zsm["p99_us"] / plain["p99_us"])


def main():
    if sys.argv[1:2] == ["--serve"]:
        ap = argparse.ArgumentParser()
        ap.add_argument("--serve", choices=["dict", "sqlite"])
        ap.add_argument("--port", type=int)
        ap.add_argument("--corpus")
        ap.add_argument("--keys", type=int)
        s = ap.parse_args()
        return serve(s.serve, s.port, s.corpus, s.keys)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zsm-run", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--services", default="redis,python,sqlite")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs per service, alternated; medians")
    ap.add_argument("--zsm-args", default="")
    ap.add_argument("--dir", default="build/region-services")
    ap.add_argument("--user", type=int, help="run every service as this uid (setpriv; needs root)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    a.module, a.zsm_run = str(Path(__file__).resolve()), str(Path(a.zsm_run).resolve())
    a.keys = max(100, int(a.scale * (256 << 20) / VALUE))
    work = Path(a.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if a.user is not None:
        if not reachable_by_others(work):
            work = Path(tempfile.mkdtemp(prefix="zsm-region-services-"))
            atexit.register(shutil.rmtree, work, True)
        work.chmod(0o1777)
    a.corpus = work / "corpus.bin"
    files, ratio = make_corpus(a.corpus, a.keys)
    setting = (f"{a.keys * VALUE / 2**20:.0f} MiB of values, {a.seconds:g} s measured, "
               f"zsm-run {a.zsm_args or '(no flags)'}" + (f", as uid {a.user}" if a.user is not None else ""))
    (work / "title.txt").write_text(f"{cpu_line()}; {setting}\n")  # the plot's (tools/run-plots.sh services)
    print(f"# {cpu_line()}")
    print(f"# {a.keys} values of {VALUE} bytes ({a.keys * VALUE / 2**20:.0f} MiB) from {files} files, "
          f"zlib -1 to {ratio:.0%}; measured {a.seconds:g} s after {a.seconds / 4:g} s of warm-up; "
          f"zsm-run {a.zsm_args or '(no flags)'}" + (f"; as uid {a.user}" if a.user is not None else "") +
          f"; load average {os.getloadavg()[0]:.1f} at start")
    print("| service | run | load s | avg RSS MiB | peak RSS MiB | RSS x plain | ops/s | x plain | p99 us | x plain "
          "| wrong | service CPU % | client CPU % | region stats |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    failures = []
    for name in a.services.split(","):
        binary = "redis-server" if name == "redis" else "/usr/bin/python3"
        if shutil.which(binary) is None:
            print(f"| {name} | - | not installed | | | | | | | | | | | |", flush=True)
            continue
        ratios = []
        for round_ in range(1, a.rounds + 1):
            ratios.append(run_pair(a, name, round_, work, failures))
        ratios = [r for r in ratios if r]
        if a.rounds > 1 and ratios:
            print(f"| {name} | median of {len(ratios)} | | | | {median(r[0] for r in ratios):.2f} | | "
                  f"{median(r[1] for r in ratios):.2f} | | {median(r[2] for r in ratios):.2f} | | | | |", flush=True)
    for f in failures:
        print("FAILED:", f)
    return 1 if a.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
