#!/usr/bin/env bash
# sort, python3 (a file read, numpy), zstd and mawk under zsm-run as a user without privileges
# (ctest region_preload_unprivileged): tools/run-region-programs.sh --user=65534 at half each
# program's plain peak, both modes, small scale, --check (each completes with its plain output).
# Where vm.unprivileged_userfaultfd is 0 (Debian's default) that user's region serves user-mode
# faults only. Skips (77), with a line, where setpriv cannot change user (not root).
#
#   region_preload_unprivileged.sh <zsm-run> <dir>
set -euo pipefail
launcher="$1" dir="$2"
if ! setpriv --reuid=65534 --regid=65534 --clear-groups -- true 2> /dev/null; then
  echo "skipped: setpriv cannot change user here (not root)"
  exit 77
fi
echo "vm.unprivileged_userfaultfd = $(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo '?')"
exec "$(dirname "$0")/../run-region-programs.sh" --no-install --zsm-run="$launcher" --user=65534 \
  --programs=sort,python3,zstd,mawk --fractions=2 --scale=0.05 --dir="$dir" --check
