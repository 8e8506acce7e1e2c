#!/usr/bin/env bash
# The A/B of the inline policies on the kernel's own mm/zsmalloc.c, one command: set up
# (compilers, valgrind, scipy, linux-source-6.1, the arm64 cross compilers and qemu-user), then
# tools/lib/kernel_ab.py with the arguments given: [TREE] [--arch x86_64|arm64]
# [--preset NAME | --config FILE] [--patch FILE] [--compilers gcc,clang,clang22] [--pgo] [--quick].
# Without TREE it measures Debian's linux-source-6.1. Results in build/kernel-ab/.
# Takes 12-19 minutes on 2 cores for x86-64 (three compilers), about 30 for --arch arm64
# (counted under qemu); --quick about 2 minutes. Every option: python3 tools/lib/kernel_ab.py --help.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
exec /usr/bin/python3 "$root/tools/lib/kernel_ab.py" "$@"
