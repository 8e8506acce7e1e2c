#!/usr/bin/env bash
# What ordinary memory gives a program and the preload library once broke (issue 55), each
# case of tests/region_preload/adversary.c (ctest region_preload_adversary): run plainly first
# (the verdict the kernel gives), then under zsm-run at a 4 MiB budget with handler threads and
# in the SIGBUS mode, as this user and, where this is root, as a user without privileges
# (setpriv to nobody: where vm.unprivileged_userfaultfd is 0, the user-mode-only mode). Every
# run must print "CASE: ok" and exit 0 within its limit. Skips (77) where no region can be
# made; the unprivileged runs are skipped, with a line, where setpriv cannot change user.
#
#   region_preload_adversary.sh <region_preload_adversary> <zsm-run> [ROUNDS]
set -euo pipefail
adversary="$1" launcher="$2" rounds="${3:-1}"
cases="madvise wipeonfork dontfork locks signals stack io kernel-args kernel-writes pthread-exit fork-threads"
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
failures=0

# run <label> <case> <command...>: one run, its verdict on one line.
run() {
  local label="$1" name="$2"
  shift 2
  local out rc=0
  out="$(cd /tmp && timeout -s KILL 120 "$@" "$adversary" "$name" 2>&1)" || rc=$?
  if [ "$rc" = 0 ] && grep -qx "$name: ok" <<< "$out"; then
    echo "ok      $label $name"
  else
    echo "FAILED  $label $name: exit $rc: $(tail -c 300 <<< "$out" | tr '\n' ' ')"
    failures=$((failures + 1))
  fi
}

if ! out="$("$launcher" --budget=4M --stats -- true 2>&1)" || grep -q "no region" <<< "$out"; then
  echo "skipped: $out"
  exit 77
fi
as_nobody=1
if ! "${nobody[@]}" true 2> /dev/null; then
  echo "skipped: the unprivileged runs (setpriv cannot change user here: not root)"
  as_nobody=0
fi
# The runs use copies in a folder every user can reach (a clone under /root is not): the
# adversary, zsm-run and, beside it, its preload library.
source "$(dirname "$0")/../lib/zsm_run.sh"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
stage_for_others "$stage" "$launcher" "$adversary"
adversary="$stage/$(basename "$adversary")" launcher="$stage/$(basename "$launcher")"

for round in $(seq "$rounds"); do
  for name in $cases; do
    run "plain" "$name"
    run "threads" "$name" "$launcher" --quiet --budget=4M --
    run "sigbus" "$name" "$launcher" --quiet --budget=4M --self-serve --
    if ((as_nobody)); then
      run "nobody,threads" "$name" "${nobody[@]}" "$launcher" --quiet --budget=4M --
      run "nobody,sigbus" "$name" "${nobody[@]}" "$launcher" --quiet --budget=4M --self-serve --
    fi
  done
done
echo "$failures failed"
[ "$failures" = 0 ]
