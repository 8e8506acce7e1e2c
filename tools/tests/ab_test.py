#!/usr/bin/python3
"""Unit tests of the A/B driver's parsing, statistics and report (ab_analysis, ab_report)
of the golden-count comparison (golden) and of the progress lines (progress), on small
hand-made inputs. ctest runs this;
tools/tests/ab_smoke_test.py runs the whole driver.
"""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import ab_analysis as an  # noqa: E402
import ab_report  # noqa: E402
import golden  # noqa: E402
import progress  # noqa: E402

P = "zsm::bench_patched::"
B = "zsm::bench_baseline::"
ANON = "(anonymous namespace)::"


def gbench_run(name, cpu, real=None, unit="ns", run_type="iteration", **extra):
    return {"run_name": name, "name": name, "run_type": run_type, "cpu_time": cpu,
            "real_time": real if real is not None else cpu, "time_unit": unit, **extra}


class TimeTest(unittest.TestCase):
    def test_bench_samples_keeps_iterations_in_ns(self):
        data = {"benchmarks": [
            gbench_run("a/1", 10.0), gbench_run("a/1", 0.012, unit="us"),
            gbench_run("a/1", 99.0, run_type="aggregate"),
            gbench_run("b/1", 5.0, error_occurred=True)]}
        self.assertEqual(an.bench_samples(data), {"a/1": {"cpu_ns": [10.0, 12.0],
                                                          "real_ns": [10.0, 12.0]}})

    def test_merge_samples_concatenates_runs(self):
        one = {"a": {"cpu_ns": [1.0], "real_ns": [2.0]}}
        two = {"a": {"cpu_ns": [3.0], "real_ns": [4.0]}, "b": {"cpu_ns": [5.0], "real_ns": [6.0]}}
        self.assertEqual(an.merge_samples([one, two]),
                         {"a": {"cpu_ns": [1.0, 3.0], "real_ns": [2.0, 4.0]},
                          "b": {"cpu_ns": [5.0], "real_ns": [6.0]}})

    def test_u_test(self):
        self.assertEqual(an.u_test([5.0] * 9, [5.0] * 9), 1.0)
        self.assertEqual(an.u_test([1.0], [2.0]), 1.0)
        apart = an.u_test([float(x) for x in range(9)], [float(x) for x in range(100, 109)])
        self.assertLess(apart, 0.001)
        overlap = an.u_test([float(x) for x in range(1, 10)], [float(x) for x in range(2, 11)])
        self.assertAlmostEqual(overlap, 0.478, places=3)  # scipy's value for this pair
        # Three against three can never reach p < 0.05, however far apart: the quick run's
        # timings are always "within noise".
        self.assertGreaterEqual(an.u_test([1.0, 2.0, 3.0], [10.0, 11.0, 12.0]), 0.05)

    def test_compare_times(self):
        c = an.compare_times([90.0 + i for i in range(9)], [100.0 + i for i in range(9)])
        self.assertEqual((c["patched_ns"], c["baseline_ns"]), (94.0, 104.0))
        self.assertAlmostEqual(c["delta_pct"], 100.0 * (94.0 / 104.0 - 1.0))
        self.assertTrue(c["significant"])
        self.assertEqual(c["n"], [9, 9])

    def test_time_summary(self):
        rows = [{"delta_pct": -10.0, "p": 0.01, "significant": True},
                {"delta_pct": 10.0, "p": 0.5, "significant": False}]
        t = an.time_summary(rows)
        self.assertAlmostEqual(t["delta_pct"], 100.0 * ((0.9 * 1.1) ** 0.5 - 1.0))
        self.assertEqual((t["sizes"], t["significant"], t["faster"], t["slower"], t["min_p"]),
                         (2, 1, 1, 0, 0.01))
        self.assertAlmostEqual(t["chance_p"], 1 - 0.95 ** 2)
        self.assertTrue(t["within_noise"])

    def test_one_size_in_eight_is_chance(self):
        rows = [{"delta_pct": -1.0, "p": 0.5, "significant": False}] * 7 + \
            [{"delta_pct": -5.0, "p": 0.01, "significant": True}]
        self.assertTrue(an.time_summary(rows)["within_noise"])
        rows[:3] = [{"delta_pct": -5.0, "p": 0.01, "significant": True}] * 3
        self.assertFalse(an.time_summary(rows)["within_noise"])


class SymbolTest(unittest.TestCase):
    def test_parse_symbol(self):
        self.assertEqual(an.parse_symbol(P + "zs_store(zsm::bench_patched::ZsPool*, void const*, "
                                         "unsigned long)"), ("patched", "zs_store", ""))
        self.assertEqual(an.parse_symbol(B + ANON + "obj_write(zsm::bench_baseline::"
                                         "ClassGeometry, unsigned long) [clone .isra.0] "
                                         "[clone .cold]"),
                         ("baseline", "obj_write", ".isra.0 .cold"))
        clang_lambda = (P + "zs_store(zsm::bench_patched::ZsPool*, void const*, unsigned long)"
                        "::$_0::operator()(zsm::bench_patched::ClassGeometry, unsigned long) "
                        "const")
        gcc_lambda = (B + "zs_store(zsm::bench_baseline::Pool*, void const*, unsigned long)"
                      "::{lambda(zsm::bench_baseline::ClassGeometry, unsigned long)#1}"
                      "::operator()(zsm::bench_baseline::ClassGeometry, unsigned long) const")
        self.assertEqual(an.parse_symbol(clang_lambda), ("patched", "zs_store::lambda", ""))
        self.assertEqual(an.parse_symbol(gcc_lambda), ("baseline", "zs_store::lambda", ""))
        self.assertIsNone(an.parse_symbol("zsm::patched::zs_store(zsm::patched::Pool*)"))
        self.assertIsNone(an.parse_symbol("main"))

    def test_parse_nm_and_code_sizes(self):
        text = "\n".join([
            f"0000000000005220 00000000000006ae T {P}zs_store(ZsPool*, void const*, unsigned long)",
            f"00000000000026d1 0000000000000083 t {P}zs_store(ZsPool*, void const*, unsigned long)"
            " [clone .cold]",
            f"0000000000009ba0 000000000000053f T {B}zs_store(ZsPool*, void const*, unsigned long)",
            f"0000000000008f80 00000000000000bf t {B}{ANON}obj_write(ClassGeometry, unsigned "
            "long, void const*, unsigned long)",
            f"0000000000010000 0000000000000008 b {P}{ANON}shard_hint",
            "0000000000002030 T main"])
        symbols = an.parse_nm(text)
        self.assertEqual(len(symbols), 4)
        sizes = an.code_sizes(symbols, ["zs_store"])
        self.assertEqual(sizes["zs_store"]["patched"], {"bytes": 0x6ae, "clone_bytes": 0x83})
        self.assertEqual(sizes["zs_store"]["baseline"], {"bytes": 0x53f, "clone_bytes": 0})
        ool = an.out_of_line(symbols, ["obj_write", "obj_malloc"])
        self.assertEqual(ool["patched"], [])
        self.assertEqual([(s["function"], s["bytes"]) for s in ool["baseline"]],
                         [("obj_write", 0xbf)])

    def test_parse_calls_and_callees(self):
        store_b = f"{B}zs_store(ZsPool*, void const*, unsigned long)"
        store_p = f"{P}zs_store(ZsPool*, void const*, unsigned long)"
        write_b = (f"{B}{ANON}obj_write(ClassGeometry, unsigned long, void const*, unsigned long)"
                   " [clone .isra.0]")
        text = "\n".join([
            f"0000000000009ba0 <{store_b}>:",
            f"    9ccd:\tcall   8f80 <{write_b}>",
            f"    9d10:\tcall   8f80 <{write_b}>",
            "    9da0:\tcall   2030 <__errno_location@plt>",
            f"    9e00:\tjmp    9ba0 <{store_b}>",
            f"    9e10:\tcall   9470 <{P}{ANON}alloc_zspage(ZsPool*, ClassShard*)>",
            "",
            f"0000000000002add <{store_b} [clone .cold]>:",
            f"    2add:\tcall   2817 <{B}{ANON}move_to_next_shard(ZsPool const*, ClassShard*)>",
            f"    2ae5:\tjmp    9dee <{store_b}+0x24e>",
            "",
            f"0000000000005220 <{store_p}>:",
            f"    5300:\tjmp    8f80 <{P}{ANON}remove_zspage(ClassShard*, ZsPage*)>"])
        calls = an.parse_calls(text)
        self.assertEqual(set(calls[store_b]), {write_b, "__errno_location@plt",
                                               f"{P}{ANON}alloc_zspage(ZsPool*, ClassShard*)"})
        self.assertEqual(set(calls[f"{store_b} [clone .cold]"]),
                         {f"{B}{ANON}move_to_next_shard(ZsPool const*, ClassShard*)"})
        # Only the body's calls into its own variant count: not libc, not the other
        # variant, not the .cold part's.
        got = an.callees(calls, ["zs_store", "zs_free"])
        # Two call sites of obj_write, as the mail's GCC 15 and Clang 22 builds had.
        self.assertEqual(calls[store_b][write_b], 2)
        self.assertEqual(got["baseline"], {"zs_store": ["obj_write.isra.0 x2"], "zs_free": []})
        self.assertEqual(got["patched"], {"zs_store": ["remove_zspage"], "zs_free": []})


def synthetic_raw(sizes, memcpy=100.0):
    """Raw figures of one configuration: patched saves 20 instructions per pair at every
    size on the locked path (1 with caches on) and is 10 % faster in one binary (clearly
    apart), the same across two binaries."""
    counts = []
    for fam in an.FAMILIES:
        for size in sizes:
            for v, alloc in (("patched", 230.0), ("baseline", 250.0), ("cached", 99.0),
                             ("cached_baseline", 100.0)):
                counts.append({"allocator": v, "family": fam, "size": size,
                               "allocator_only": alloc + size / 100,
                               "total": alloc + size / 100 + 100.0, "memcpy": memcpy})
    one, sep = {}, {}
    for fam in an.FAMILIES:
        for size in sizes:
            one[an.bench_name(fam, "patched", size)] = {"cpu_ns": [90.0 + i for i in range(9)]}
            one[an.bench_name(fam, "baseline", size)] = {"cpu_ns": [100.0 + i for i in range(9)]}
            sep[an.bench_name(fam, "patched", size)] = {"cpu_ns": [50.0] * 9}
            sep[an.bench_name(fam, "baseline", size)] = {"cpu_ns": [50.0] * 9}
    symbols = [{"variant": "patched", "function": "zs_store", "clone": "", "bytes": 1710},
               {"variant": "baseline", "function": "zs_store", "clone": "", "bytes": 1343},
               {"variant": "baseline", "function": "obj_write", "clone": "", "bytes": 191}]
    callees = {"patched": {"zs_store": []}, "baseline": {"zs_store": ["obj_write"]}}
    return {"instructions": counts, "symbols": symbols, "callees": callees,
            "time": {"one_binary": one, "separate": sep}}


class SummaryTest(unittest.TestCase):
    def setUp(self):
        self.sizes = [384, 784]
        raw = synthetic_raw(self.sizes)
        self.config = {"label": "g++ 12 -O2", "compiler": "gcc", "pgo": False, "raw": raw,
                       "summary": an.summarize(raw, self.sizes, ["zs_store"], ["obj_write"])}

    def test_summary_figures(self):
        store = self.config["summary"]["families"]["store"]
        self.assertAlmostEqual(store["instr_delta"], -20.0)
        self.assertAlmostEqual(store["instr_baseline"], 250.0 + (3.84 + 7.84) / 2)
        self.assertAlmostEqual(store["instr_delta_pct"], -20.0 / (350.0 + 5.84) * 100)
        self.assertEqual(store["time"]["one_binary"]["significant"], 2)
        self.assertEqual(store["time"]["separate"]["significant"], 0)
        self.assertEqual(self.config["summary"]["code_size"]["zs_store"]["patched"]["bytes"],
                         1710)

    def test_mail_lines(self):
        text = "\n".join(ab_report.mail_lines(self.config))
        self.assertIn("g++ 12 -O2: patched vs baseline, 2 sizes 384..784 B", text)
        self.assertIn("-20.0 retired instructions per pair", text)
        self.assertIn("(geomean of the medians): 2 of 2 sizes at p < 0.05 (2 faster, 0 slower); "
                      "chance alone: binomial p = 0.0025", text)
        self.assertIn("0.0 % time per pair across two binaries: within noise", text)
        self.assertIn("zs_store() from 1,343 B to 1,710 B (+27.3 %)", text)
        self.assertIn("baseline: named helpers with their own copy: obj_write (191 B)", text)
        self.assertIn("patched: calls from the API bodies: nothing (everything inlined)", text)
        self.assertNotIn("the policy changes nothing", text)
        self.assertNotIn("inlined memcpy", text)

    def test_cached_and_obj_write_lines(self):
        text = "\n".join(ab_report.mail_lines(self.config))
        self.assertIn("with per-thread caches on (the default pool, whose steady pair calls "
                      "none of these helpers): zs_store() + zs_free() -1.0 instructions per "
                      "pair (of 106)", text)
        self.assertIn("obj_write() in the baseline: out of line: obj_write (191 B), called "
                      "from zs_store() as obj_write; the mail: GCC 15", text)

    def test_mail_comparison_sets_each_mail_row_beside_ours(self):
        md = ab_report.mail_comparison([self.config])
        self.assertIn("| zs_store+zs_free | mail: GCC 15 -O2 | -37.1 | -5.3 % latency (-5.5 % "
                      "cycles) | 1,997 -> 1,943 | - | LKML 2026-11-05, \"Re: [PATCH] mm/zsmalloc: "
                      "inline obj_malloc() and obj_free()\" (Jenhao Chen), lines 53-55 | |", md)
        self.assertIn("| | ours: g++ 12 -O2 | -20.0 |", md)
        self.assertIn("| 1,343 -> 1,710 | - | results.json | same direction, 54 % of the "
                      "mail's size |", md)
        self.assertIn("| | ours: not run (--compilers) |", md)  # no clang 22 in this run
        self.assertIn("| | ours: not run (--pgo) |", md)
        self.assertEqual(ab_report.verdict(-26.6, 0.4), "no effect here (within one instruction)")
        self.assertEqual(ab_report.verdict(-26.6, 5.0), "opposite direction")

    def test_an_inlined_copy_is_said(self):
        raw = synthetic_raw(self.sizes, memcpy=0.0)
        config = {"label": "g++ 12 -O2 +PGO", "raw": raw,
                  "summary": an.summarize(raw, self.sizes, ["zs_store"], ["obj_write"])}
        self.assertTrue(config["summary"]["families"]["store"]["copy_inlined"])
        self.assertIn("which includes the copy: the compiler inlined memcpy",
                      "\n".join(ab_report.mail_lines(config)))

    def test_no_negative_zero(self):
        self.assertEqual(ab_report.fmt_signed(-1e-12), "0.0")
        self.assertEqual(ab_report.fmt_pct(-0.04), "0.0 %")
        self.assertEqual(ab_report.fmt_pct(2.35), "+2.4 %")

    def test_same_code_is_said(self):
        symbols = [{"variant": v, "function": "zs_store", "clone": "", "bytes": 1300}
                   for v in an.VARIANTS]
        self.assertTrue(ab_report.same_code(symbols))
        symbols[0]["bytes"] = 1301
        self.assertFalse(ab_report.same_code(symbols))

    def test_markdown_has_a_row_per_pair_and_size(self):
        md = ab_report.markdown([self.config])
        rows = [line for line in md.splitlines() if line.startswith("| g++ 12 -O2 |")]
        self.assertEqual(len(rows), 2 * len(self.sizes) + 1)  # pairs x sizes, one function
        self.assertIn("| 384 | 253.8 | 233.8 | -20.0 |", md)
        self.assertIn("| zs_store | 1343 | 1710 | +27.3 % | obj_write | - |", md)


class GoldenTest(unittest.TestCase):
    def test_key_normalizes(self):
        self.assertEqual(golden.key("GNU", "12.2.0", " -O2  -g -DNDEBUG "),
                         ("GNU 12", "-O2 -g -DNDEBUG"))

    def test_compare_tolerance(self):
        want = {"patched": {"store": {"784": 250.0, "2352": 260.0}}}
        inside = {"patched": {"store": {"784": 254.9, "2352": 255.0}}}
        outside = {"patched": {"store": {"784": 255.1, "2352": 260.0}}}
        self.assertEqual(golden.compare(want, inside), [])
        moved = golden.compare(want, outside)
        self.assertEqual(len(moved), 1)
        self.assertIn("patched store 784 B: 250.00 -> 255.10", moved[0])


class ProgressTest(unittest.TestCase):
    """Into a file that is not a terminal, progress is whole lines: a tenth each, and the end."""

    def test_lines_into_a_log(self):
        log = io.StringIO()
        counter = progress.Counter("[t]", 25, "runs", file=log)
        for _ in range(25):
            counter.step()
        counter.close()
        text = log.getvalue()
        self.assertNotIn("\r", text)
        lines = text.splitlines()
        self.assertEqual([line.split(",")[0] for line in lines],
                         [f"[t] {n}/25 runs" for n in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                       24, 25)])
        self.assertTrue(text.endswith("\n"))


if __name__ == "__main__":
    unittest.main()
