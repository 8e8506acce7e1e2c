#!/usr/bin/python3
"""Redraws the A/B plot of a saved run: ab.png (and its data, ab_plot.dat) in OUT_DIR from
tools/lib/ab.py's results.json, with the A/B report's own plot (tools/lib/ab_report.py), summaries
recomputed from the raw figures (ab_report.load), as `ab_report.py results.json` does.
Usage: ab_png.py RESULTS_JSON OUT_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ab_report  # noqa: E402


def main():
    results, out_dir = sys.argv[1], sys.argv[2]
    print(ab_report.plot(ab_report.load(results)["configs"], out_dir))


if __name__ == "__main__":
    main()
