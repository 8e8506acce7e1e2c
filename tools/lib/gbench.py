"""Google Benchmark, for every script that runs a benchmark binary or reads its JSON: one way
to run a binary into a JSON file, and one reading of that file.

A clock is named at every read: "cpu" (cpu_time: the A/B compares CPU time per pair) or
"real" (real_time: the main job, the overhead table and the plots report wall time, and the
multi-threaded families are timed in real time). Every read keeps the iteration runs only
(aggregates are recomputed by the caller), drops runs that reported an error, and converts
each run's time_unit to nanoseconds.
"""
import json
import statistics
import subprocess

CLOCKS = {"cpu": "cpu_time", "real": "real_time"}
NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def run(binary, flags, out_json):
    """Runs `binary flags...` with its JSON written to out_json (stdout discarded) and returns
    the parsed JSON; raises RuntimeError with the command and its stderr's tail on failure."""
    cmd = [binary, *flags, f"--benchmark_out={out_json}", "--benchmark_out_format=json"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    with open(out_json) as fh:
        return json.load(fh)


def iterations(data):
    """{run_name: [run, ...]}: the iteration runs without an error, in file order."""
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred"):
            runs.setdefault(b["run_name"], []).append(b)
    return runs


def ns(run, clock):
    """One run's time on `clock` ("cpu" or "real"), in nanoseconds."""
    return run[CLOCKS[clock]] * NS_PER_UNIT[run.get("time_unit", "ns")]


def samples(data, clock):
    """{run_name: [ns, ...]}: every repetition's time on `clock`."""
    return {name: [ns(r, clock) for r in runs] for name, runs in iterations(data).items()}


def medians(data, clock):
    """{run_name: median ns over the repetitions} on `clock`."""
    return {name: statistics.median(v) for name, v in samples(data, clock).items()}
