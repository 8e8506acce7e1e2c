#!/usr/bin/env bash
# Every tools/*.sh answers --help and -h with its usage on stdout, exit 0, in under 2 s, and
# writes nothing: no set-up, no build, no file in the tree or directly under build/ (where the
# scripts' results go; build directories are left out, as other tests run there meanwhile).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
marker="$(mktemp)"
trap 'rm -f "$marker"' EXIT
failed=0
for script in "$root"/tools/*.sh; do
  for flag in --help -h; do
    start=$(date +%s%N)
    rc=0
    out="$("$script" "$flag" 2>&1)" || rc=$?
    if ((rc != 0)); then
      echo "FAIL $script $flag: exit status $rc"; failed=1; continue
    fi
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    ((ms < 2000)) || { echo "FAIL $script $flag: ${ms} ms"; failed=1; }
    [ -n "$out" ] || { echo "FAIL $script $flag: printed nothing"; failed=1; }
    grep -q -i -E 'takes|minutes|seconds' <<<"$out" ||
      { echo "FAIL $script $flag: does not say how long it takes"; failed=1; }
  done
done
written="$(find "$root" -newer "$marker" -type f -not -path '*/.git/*' -not -path "$root/build/*/*" | head -5)"
[ -z "$written" ] || { echo "FAIL files written by --help: $written"; failed=1; }
((failed == 0)) && echo "every tools/*.sh --help: usage, exit 0, under 2 s, nothing written"
exit "$failed"
