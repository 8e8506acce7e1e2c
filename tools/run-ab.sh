#!/usr/bin/env bash
# The A/B of the inline policies in one command: set up (compilers, valgrind, scipy, gnuplot,
# Google Benchmark's tools), then tools/lib/ab.py with the arguments given, e.g. --pgo, --quick,
# --compilers gcc, --patched-defs ZSM_WRITE_HELPER=, --write-golden. Results in build/ab/.
# Takes about 13 minutes on 2 cores (g++ 12, clang 19, clang 22, 8 sizes); --quick (one size)
# about 2 minutes; --pgo adds a third. Every option: python3 tools/lib/ab.py --help.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
exec /usr/bin/python3 "$root/tools/lib/ab.py" "$@"
