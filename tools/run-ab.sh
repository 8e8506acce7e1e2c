#!/usr/bin/env bash
# The A/B of the inline policies in one command: set up (compilers, valgrind, scipy, gnuplot,
# Google Benchmark's tools, the arm64 cross compilers and qemu-user), then tools/lib/ab.py with
# the arguments given, e.g. --pgo, --quick, --compilers gcc, --patched-defs ZSM_WRITE_HELPER=,
# --write-golden, --arch arm64 (cross-compiled, counted under qemu-aarch64). Results in build/ab/
# (build/ab-arm64/ with --arch arm64).
# Takes about 13 minutes on 2 cores (g++ 12, clang 19, clang 22, 8 sizes); --quick (one size)
# about 2 minutes; --pgo adds a third; --arch arm64 took 58-61 minutes at a load average of
# 20-30, its --quick 95 s. Every option: python3 tools/lib/ab.py --help.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
exec /usr/bin/python3 "$root/tools/lib/ab.py" "$@"
