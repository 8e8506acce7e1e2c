#!/usr/bin/env python3
"""Real programs under zsm-run: each run plainly, then under the launcher at budgets of 1/2 and
1/4 of its plain peak RSS, with handler threads and in the SIGBUS mode. Each run's completion,
whether its output (or its output's checksum) is the plain run's, its peak RSS (wait4's
ru_maxrss), its wall time and the region's statistics at exit; one Markdown table. With --user
every run (plain too) is made as that user (setpriv, from root), as an unprivileged user would:
where vm.unprivileged_userfaultfd is 0 the region then serves user-mode faults only.

The peak target (issue 48): at most the budget plus 10 % plus what the program holds doing
nothing under the launcher (its idle run: binary, libraries, the library's own few MiB).
Fraction 0 is zsm-run's default, no budget (the automatic mode): its target is the plain peak.

  region_programs.py --zsm-run PATH [--programs a,b,...] [--fractions 2,4] [--modes threads,sigbus]
                     [--scale N] [--dir DIR] [--timeout-factor F] [--user UID] [--check] [--check-peak]

--scale multiplies every program's working set (docs/region-figures.md's table: 0.05, as ctest).
--check exits 1 when a run fails, times out or gives other output; --check-peak also when (at
fraction 2, handler threads) a run misses the peak target. ctest uses --check alone: at its
small scale the target's idle part (what `python3 -c pass` holds) misses the libraries a real
run loads, by 2-3 MiB where the region's own share is some 10. Programs missing on the machine are reported as such, not run.
"""
import argparse
import atexit
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(argv, env=None, stdin=None, timeout=None, cwd=None):
    """(exit status or None on timeout, stdout bytes, stderr text, peak RSS KiB, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = None
    seconds = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far
    return status, out, err.decode(errors="replace"), peak, seconds


def peak_of(argv, **kw):
    """Runs argv in a fresh child that reports its own children's peak RSS (ru_maxrss is the
    process tree's largest so far, so each measurement gets a process of its own)."""
    probe = [sys.executable, "-c",
             "import resource,subprocess,sys,time\n"
             "t=time.monotonic(); p=subprocess.run(sys.argv[1:], stdout=open('out.bin','wb'), stderr=open('err.txt','wb'))\n"
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.monotonic()-t)"]
    return probe + argv


class Program:
    """name, the argv to run (in `dir`), how to make its input, what its idle run is."""

    def __init__(self, name, binary, argv, prepare=None, idle=None, output=None):
        self.name, self.binary, self.argv, self.prepare, self.idle, self.output = name, binary, argv, prepare, idle, output


def reachable_by_others(path):
    """Whether another user can reach `path`: every folder above it searchable by others."""
    path = Path(path).resolve()
    return all(os.stat(p).st_mode & 0o001 for p in path.parents)


def launcher_for_others(zsm_run, stage):
    """zsm-run as another user can run it: itself where it is reachable, else a copy beside a copy
    of its preload library in `stage` (a clone under /root is not reachable by others)."""
    if reachable_by_others(zsm_run):
        return zsm_run
    here = Path(zsm_run).parent
    library = next((p for p in (here / "libzsm_region_preload.so", here.parent / "lib" / "libzsm_region_preload.so")
                    if p.exists()), None)
    if library is None:
        sys.exit(f"region_programs.py: no libzsm_region_preload.so beside {zsm_run} or in ../lib")
    for f in (Path(zsm_run), library):
        shutil.copy2(f, stage / f.name)
        (stage / f.name).chmod(0o755)
    return str(stage / Path(zsm_run).name)


def as_user(argv, user):
    """argv made as `user` (a uid), with no groups, when one is given."""
    if user is None:
        return argv
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"] + argv


def programs(scale, d):
    py = d / "work.py"
    awk = d / "work.awk"
    sql = d / "work.sql"
    cfile = d / "work.c"
    perl = d / "work.pl"
    nums = d / "nums.txt"
    text = d / "text.bin"

    def make_nums():
        import random
        rng = random.Random(12345)
        with open(nums, "w") as f:
            f.write("\n".join(str(rng.randrange(10**9)) for _ in range(int(1_500_000 * scale))) + "\n")

    def make_text():
        with open(text, "wb") as f:
            left = int(48 * scale) << 20
            for lib in sorted(Path("/usr/lib/x86_64-linux-gnu").glob("*.so*")):
                if left <= 0:
                    break
                if lib.is_file():
                    b = lib.read_bytes()[:left]
                    f.write(b)
                    left -= len(b)

    def make_py():
        n = int(1_000_000 * scale)
        make_nums()
        py.write_text(f"""import hashlib, multiprocessing as mp
def work(i): return sum(x * x for x in range(i * 1000, (i + 1) * 1000))
if __name__ == '__main__':
    L = [str(i) * 3 for i in range({n})]
    D = {{i: L[i] for i in range(0, {n}, 2)}}
    ba = bytearray(bytes(range(256)) * {n // 10})
    text = open({str(nums)!r}).read()
    try:
        import numpy
        a = numpy.array([int(x) for x in text.split()[:{n}]], dtype=numpy.int64)
        r2 = int((a % 1000003).sum())
    except ImportError:
        r2 = 0
    h = hashlib.sha256()
    h.update(''.join(L[::1000]).encode()); h.update(bytes(ba[::997])); h.update(str(len(D)).encode())
    h.update(text.encode())
    with mp.Pool(2) as p: r = sum(p.map(work, range(40)))
    print(h.hexdigest(), r, r2)
""")

    def make_awk():
        make_nums()
        awk.write_text("{ c[$1 % 100003]++; s += $1 % 1000 } END { n = 0; for (k in c) n++; print n, s }\n")

    def make_perl():
        n = int(800_000 * scale)
        perl.write_text(f"""my %h; for my $i (1..{n}) {{ $h{{"k$i"}} = ("v" x 40) . $i; }}
my @k = sort keys %h; my $s = 0; $s += length($h{{$_}}) for @k;
print scalar(@k), " ", $s, " ", $k[0], " ", $k[-1], "\\n";
""")

    def make_sql():
        n = int(600_000 * scale)
        sql.write_text(f"""CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INTEGER);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
INSERT INTO t SELECT x, printf('%.40c%d', 'x', x * 7919 % {n}), x * 31 % 1000 FROM c;
CREATE INDEX ta ON t(a);
SELECT count(*), sum(b), min(a), max(a) FROM t;
SELECT b, count(*) FROM t GROUP BY b ORDER BY b LIMIT 5;
""")

    def make_c():
        n = int(3000 * scale)
        with open(cfile, "w") as f:
            for i in range(n):
                f.write(f"int f{i}(int x) {{ int s = x; for (int j = 0; j < {i % 17 + 3}; j++) s = s * {i % 13 + 3} + j ^ (s >> 3); return s + {i}; }}\n")
            f.write("int main(void) { int s = 0;\n")
            for i in range(0, n, 7):
                f.write(f"  s += f{i}(s);\n")
            f.write("  return s & 1; }\n")

    return [
        Program("sort", "sort", ["sort", "-n", str(nums)], make_nums, ["sort", "--version"]),
        Program("xz", "xz", ["xz", "-6", "-T1", "-c", str(text)], make_text, ["xz", "--version"]),
        Program("zstd", "zstd", ["sh", "-c", f"zstd -q -3 -c {text} | zstd -q -d -c"], make_text,
                ["sh", "-c", "zstd --version"]),
        Program("mawk", "mawk", ["mawk", "-f", str(awk), str(nums)], make_awk, ["mawk", "-W", "version"]),
        Program("python3", "/usr/bin/python3", ["/usr/bin/python3", str(py)], make_py,
                ["/usr/bin/python3", "-c", "pass"]),
        Program("perl", "perl", ["perl", str(perl)], make_perl, ["perl", "-e", "1"]),
        Program("sqlite3", "sqlite3", ["sqlite3", ":memory:", f".read {sql}"], make_sql,
                ["sqlite3", ":memory:", "select 1"]),
        Program("gcc", "gcc", ["gcc", "-O2", "-c", "-o", "/dev/stdout", str(cfile)], make_c, ["gcc", "--version"]),
        Program("redis-server", "redis-server", None, None, ["redis-server", "--version"]),
        Program("java", "java", ["java", "-Xmx512m", "-cp", str(d), "Work"], None, ["java", "-version"]),
    ]


AT_EXIT = re.compile(r"zsm-run: \S+ at exit: ")


def stats_of(err):
    """The region's statistics at exit, over every process of the run (a pipeline's shell and
    both zstd's each print a line): faults, evictions and pages written back summed, the peak the
    largest of one process's."""
    lines = [l for l in err.splitlines() if AT_EXIT.match(l)]
    def total(key):
        return sum(int(m.group(1)) for l in lines for m in [re.search(key + r" (\d+)", l)] if m)
    peaks = [float(m.group(1)) for l in lines for m in [re.search(r"peak ([\d.]+) MiB", l)] if m]
    return {"faults": total("faults"), "evictions": total("evictions"), "written": total("written back"),
            "all": f"{max(peaks):.1f}" if peaks else "0"}


def measure(argv, cwd, env, timeout, user=None):
    """One run in a process of its own: (status or None, output digest, stderr, peak MiB, s)."""
    status, out, err, _, secs = run(peak_of(as_user(argv, user)), env=env, cwd=cwd, timeout=timeout)
    if status is None:
        return None, "", "", 0.0, secs
    fields = out.decode().split()
    if len(fields) != 3:
        return -1, "", err, 0.0, secs
    code, peak_kib, inner = int(fields[0]), int(fields[1]), float(fields[2])
    digest = hashlib.sha256((Path(cwd) / "out.bin").read_bytes()).hexdigest()[:16]
    errtext = (Path(cwd) / "err.txt").read_text(errors="replace")
    return code, digest, errtext, peak_kib / 1024, inner


def redis_run(zsm_run, budget, mode, d, scale, timeout, user=None):
    """redis-server (plain when budget is None): deterministic keys, redis-benchmark, BGSAVE;
    its peak RSS, and the saved data's digest as a plain server loading the RDB reports it."""
    port = free_port()
    work = d / f"redis-{budget or 'plain'}-{mode}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    work.chmod(0o1777)
    server = ["redis-server", "--port", port, "--save", "", "--appendonly", "no", "--dir", str(work),
              "--enable-debug-command", "yes", "--daemonize", "no"]
    argv = server if budget is None else [zsm_run, *([f"--budget={budget}"] if budget != "default" else []), "--stats"] + \
        (["--self-serve"] if mode == "sigbus" else []) + ["--"] + server
    start = time.monotonic()
    probe = peak_of(as_user(argv, user))
    proc = subprocess.Popen(probe, cwd=work, stdout=subprocess.PIPE, start_new_session=True)
    cli = ["redis-cli", "-p", port]
    try:
        for _ in range(200):
            if subprocess.run(cli + ["ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        n = int(300_000 * scale)
        cmds = "".join(f"SET key:{i} {'v' * 200}{i}\r\n" for i in range(n)).encode()
        subprocess.run(cli + ["--pipe"], input=cmds, capture_output=True, timeout=timeout)
        subprocess.run(["redis-benchmark", "-p", port, "-q", "-t", "get", "-n", str(n), "-r", str(n)],
                       capture_output=True, timeout=timeout)
        subprocess.run(cli + ["bgsave"], capture_output=True)
        for _ in range(int(timeout * 10)):
            info = subprocess.run(cli + ["info", "persistence"], capture_output=True).stdout.decode()
            if "rdb_bgsave_in_progress:0" in info and "rdb_last_bgsave_status:ok" in info and (work / "dump.rdb").exists():
                break
            if "rdb_last_bgsave_status:err" in info:
                break
            time.sleep(0.1)
        saved_ok = "rdb_last_bgsave_status:ok" in info
        subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
        out, _ = proc.communicate(timeout=timeout)
        secs = time.monotonic() - start
        code, peak_kib, _ = out.decode().split()
    except Exception:
        os.killpg(proc.pid, signal.SIGKILL)
        return None, "", "", 0.0, time.monotonic() - start
    err = (work / "err.txt").read_text(errors="replace")
    digest = ""
    if saved_ok:  # the RDB as a plain server loads it
        port2 = free_port()
        loader = subprocess.Popen(["redis-server", "--port", port2, "--dir", str(work), "--dbfilename", "dump.rdb",
                                   "--save", "", "--enable-debug-command", "yes"], stdout=subprocess.DEVNULL)
        cli2 = ["redis-cli", "-p", port2]
        for _ in range(400):
            info2 = subprocess.run(cli2 + ["info", "persistence"], capture_output=True).stdout.decode()
            if "loading:0" in info2:
                digest = subprocess.run(cli2 + ["debug", "digest"], capture_output=True).stdout.decode().strip()[:16]
                break
            time.sleep(0.05)
        subprocess.run(cli2 + ["shutdown", "nosave"], capture_output=True)
        loader.wait()
    return int(code), digest, err, int(peak_kib) / 1024, secs


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def java_class(d):
    """Work.class, written here (a JRE has no compiler): main() fills a long[] of 24 M entries
    (192 MB), sums it and prints the sum. None when the JVM's classfile cannot be written."""
    cp = []
    def utf8(s):
        cp.append(b"\x01" + len(s).to_bytes(2, "big") + s.encode()); return len(cp)
    def cls(name_idx):
        cp.append(b"\x07" + name_idx.to_bytes(2, "big")); return len(cp)
    def nat(n, t):
        cp.append(b"\x0c" + n.to_bytes(2, "big") + t.to_bytes(2, "big")); return len(cp)
    def ref(tag, c, nt):
        cp.append(bytes([tag]) + c.to_bytes(2, "big") + nt.to_bytes(2, "big")); return len(cp)
    this = cls(utf8("Work")); sup = cls(utf8("java/lang/Object"))
    system = cls(utf8("java/lang/System")); stream = cls(utf8("java/io/PrintStream"))
    out = ref(9, system, nat(utf8("out"), utf8("Ljava/io/PrintStream;")))
    println = ref(10, stream, nat(utf8("println"), utf8("(J)V")))
    main_name, main_type, code_name = utf8("main"), utf8("([Ljava/lang/String;)V"), utf8("Code")
    n = 24_000_000
    cp.append(b"\x03" + n.to_bytes(4, "big")); n_idx = len(cp)
    # locals: 0 args, 1 array, 2 i, 3-4 sum
    code = bytes([0x12, n_idx, 0xbc, 11, 0x4c,              # ldc n; newarray long; astore_1
                  0x03, 0x3d,                               # iconst_0; istore_2
                  0x1c, 0x12, n_idx, 0xa2, 0x00, 0x11,      # L1: iload_2; ldc n; if_icmpge +17
                  0x2b, 0x1c, 0x1c, 0x85, 0x06, 0x85, 0x69, 0x50,  # aload_1 iload_2 iload_2 i2l iconst_3 i2l lmul lastore
                  0x84, 0x02, 0x01, 0xa7, 0xff, 0xef,       # iinc 2 1; goto L1
                  0x09, 0x42, 0x03, 0x3d,                   # lconst_0; lstore_3; iconst_0; istore_2
                  0x1c, 0x12, n_idx, 0xa2, 0x00, 0x0f,      # L2: iload_2; ldc n; if_icmpge +15
                  0x21, 0x2b, 0x1c, 0x2f, 0x61, 0x42,       # lload_3 aload_1 iload_2 laload ladd lstore_3
                  0x84, 0x02, 0x01, 0xa7, 0xff, 0xf1,       # iinc 2 1; goto L2
                  0xb2, out >> 8, out & 0xff, 0x21,         # getstatic out; lload_3
                  0xb6, println >> 8, println & 0xff, 0xb1])  # invokevirtual println; return
    code_attr = (6).to_bytes(2, "big") + (5).to_bytes(2, "big") + len(code).to_bytes(4, "big") + code + b"\0\0\0\0"
    method = (0x0009).to_bytes(2, "big") + main_name.to_bytes(2, "big") + main_type.to_bytes(2, "big") + \
        (1).to_bytes(2, "big") + code_name.to_bytes(2, "big") + len(code_attr).to_bytes(4, "big") + code_attr
    body = b"\xca\xfe\xba\xbe" + (0).to_bytes(2, "big") + (49).to_bytes(2, "big") + \
        (len(cp) + 1).to_bytes(2, "big") + b"".join(cp) + (0x0021).to_bytes(2, "big") + \
        this.to_bytes(2, "big") + sup.to_bytes(2, "big") + b"\0\0" + b"\0\0" + (1).to_bytes(2, "big") + method + b"\0\0"
    (d / "Work.class").write_bytes(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zsm-run", required=True)
    ap.add_argument("--programs", default="sort,xz,zstd,mawk,python3,perl,sqlite3,redis-server,gcc,java")
    ap.add_argument("--fractions", default="2,4")
    ap.add_argument("--modes", default="threads,sigbus")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dir", default="build/region-programs")
    ap.add_argument("--timeout-factor", type=float, default=40.0)
    ap.add_argument("--user", type=int, help="make every run as this uid (setpriv; needs root)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--check-peak", action="store_true")
    a = ap.parse_args()
    d = Path(a.dir).resolve()
    a.zsm_run = str(Path(a.zsm_run).resolve())
    d.mkdir(parents=True, exist_ok=True)
    if a.user is not None:
        if not reachable_by_others(d):  # the user could not read its input there
            d = Path(tempfile.mkdtemp(prefix="zsm-region-programs-"))
            atexit.register(shutil.rmtree, d, True)
            print(f"region_programs.py: {a.dir} is not reachable by uid {a.user}: working in {d}", file=sys.stderr)
        d.chmod(0o1777)  # the user's TMPDIR and backing files
        stage = Path(tempfile.mkdtemp(prefix="zsm-run-"))
        stage.chmod(0o755)
        atexit.register(shutil.rmtree, stage, True)
        a.zsm_run = launcher_for_others(a.zsm_run, stage)
    wanted = a.programs.split(",")
    env = dict(os.environ, LC_ALL="C", TMPDIR=str(d))
    if a.user is not None:
        env["HOME"] = str(d)  # the user's own, as a login would give (root's is not its to read)
    failures, compared = [], 0
    print(f"# {cpu_line()}", flush=True)
    print("| program | mode | budget | completed | output | peak RSS MiB | target MiB | wall s | x plain | faults | evictions | to file | region's peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for prog in programs(a.scale, d):
        if prog.name not in wanted:
            continue
        if shutil.which(prog.binary) is None or (prog.name == "redis-server" and shutil.which("redis-benchmark") is None):
            print(f"| {prog.name} | - | - | not installed | | | | | | | | | |", flush=True)
            continue
        if prog.prepare:
            prog.prepare()
        if prog.name == "java":
            java_class(d)
        cwd = d / f"run-{prog.name}"
        cwd.mkdir(exist_ok=True)
        if a.user is not None:
            cwd.chmod(0o1777)
        if prog.name == "redis-server":
            p_code, p_digest, p_err, p_peak, p_secs = redis_run(a.zsm_run, None, "", d, a.scale, 600, a.user)
        else:
            p_code, p_digest, p_err, p_peak, p_secs = measure(prog.argv, cwd, env, 600, a.user)
        print(f"| {prog.name} | plain | - | {'yes' if p_code == 0 else f'exit {p_code}'} | {p_digest} | {p_peak:.1f} | | {p_secs:.2f} | 1.0 | | | | |", flush=True)
        if p_code != 0:  # nothing to compare with: the machine's, not the region's (a root without /dev/shm)
            reason = next((l for l in reversed(p_err.splitlines()) if l.strip()), "")
            print(f"|  | | | not run under zsm-run: the plain run failed: {reason[:100]} | | | | | | | | | |", flush=True)
            continue
        compared += 1
        for mode in a.modes.split(","):
            for frac in [int(f) for f in a.fractions.split(",")]:
                budget_mib = max(int(p_peak / frac), 4) if frac else 0  # 0: zsm-run's default, no budget
                budget = f"{budget_mib}M" if frac else "default"
                flags = ([f"--budget={budget}"] if frac else []) + ["--stats"] + (["--self-serve"] if mode == "sigbus" else [])
                idle = measure([a.zsm_run] + flags + ["--"] + prog.idle, cwd, env, 120, a.user)[3]
                timeout = max(60.0, p_secs * a.timeout_factor)
                if prog.name == "redis-server":
                    code, digest, err, peak, secs = redis_run(a.zsm_run, budget, mode, d, a.scale, timeout, a.user)
                else:
                    code, digest, err, peak, secs = measure([a.zsm_run] + flags + ["--"] + prog.argv, cwd, env, timeout,
                                                            a.user)
                st = stats_of(err)
                target = budget_mib * 1.1 + idle if frac else p_peak  # the default: the plain peak
                done = "yes" if code == 0 else ("timed out" if code is None else f"exit {code}")
                same = "same" if digest == p_digest and code == 0 else ("-" if code is None else "DIFFERS")
                shown = f"{budget} (1/{frac})" if frac else "default"
                print(f"| {prog.name} | {mode} | {shown} | {done} | {same} | {peak:.1f} | {target:.1f} | "
                      f"{secs:.2f} | {secs / p_secs:.1f} | {st['faults']} | {st['evictions']} | {st['written']} | {st['all']} |", flush=True)
                if code != 0 and code is not None:
                    reason = next((l for l in err.splitlines() if l and not l.startswith("zsm-run:")), "")
                    print(f"|  | | | {reason[:120]} | | | | | | | | | |", flush=True)
                missed = a.check_peak and frac == 2 and mode == "threads" and peak > target
                if (a.check or a.check_peak) and (code != 0 or same != "same" or missed):
                    failures.append(f"{prog.name} {mode} {shown}: {done}, output {same}, peak {peak:.1f} MiB (target {target:.1f})")
    if (a.check or a.check_peak) and compared == 0:  # a set-up that fails every plain run hides everything
        failures.append("no program ran plainly, so none was run under zsm-run")
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


def cpu_line():
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return f"{model}, {os.cpu_count()} CPUs, Linux {os.uname().release}"


if __name__ == "__main__":
    sys.exit(main())
