#!/usr/bin/env bash
# The A/B of the inline policies in one command: set up (compilers, valgrind, scipy, gnuplot,
# Google Benchmark's tools, the arm64 cross compilers and qemu-user), then tools/lib/ab.py with
# the arguments given, e.g. --pgo, --quick, --compilers gcc, --patched-defs ZSM_WRITE_HELPER=,
# --write-golden, --arch arm64 (cross-compiled, counted under qemu-aarch64). Results in build/ab/
# (build/ab-arm64/ with --arch arm64).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
exec /usr/bin/python3 "$root/tools/lib/ab.py" "$@"
