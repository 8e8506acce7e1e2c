#!/usr/bin/env bash
# The A/B of the inline policies on the kernel's own mm/zsmalloc.c, one command: set up
# (compilers, valgrind, scipy, linux-source-6.1, the arm64 cross compilers and qemu-user), then
# tools/lib/kernel_ab.py with the arguments given: [TREE] [--arch x86_64|arm64]
# [--preset NAME | --config FILE] [--patch FILE] [--compilers gcc,clang,clang22] [--pgo] [--quick].
# Without TREE it measures Debian's linux-source-6.1. Results in build/kernel-ab/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
exec /usr/bin/python3 "$root/tools/lib/kernel_ab.py" "$@"
