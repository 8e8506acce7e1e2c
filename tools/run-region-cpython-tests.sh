#!/usr/bin/env bash
# CPython's own regression tests under zsm-run: each test file plainly, then under the launcher
# at a budget that makes it evict, with handler threads and in the SIGBUS mode, as this user
# and (as root) as a user without privileges: what `python3 -m test` says of each, its time,
# and the region's faults and evictions at exit (summed over the test's processes). Prints one
# Markdown table; Debian's libpython3.11-testsuite holds the tests (installed when missing, root
# or sudo). The default set takes about 10-15 minutes on 2 cores (test_signal alone some 50
# seconds a run).
#
#   tools/run-region-cpython-tests.sh [--zsm-run=PATH] [--tests=a,b,...] [--budget=SIZE]
#                                     [--users=root,nobody] [--modes=threads,sigbus] [--check]
#
#   --zsm-run  the launcher (default: built in $ZSM_BUILD, or build/release)
#   --tests    test files (default test_threading,test_os,test_signal,test_mmap,test_fork1,test_wait4)
#   --budget   zsm-run's --budget (default 8M: these tests hold 10-25 MiB, so pages leave memory)
#   --users    root (this user) and nobody (setpriv to uid 65534; root only)
#   --check    exit 1 when a run's result is not the plain run's
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
zsm_run="" tests="test_threading,test_os,test_signal,test_mmap,test_fork1,test_wait4" budget=8M
users="root,nobody" modes="threads,sigbus" check=0
die() { echo "run-region-cpython-tests.sh: $*" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --zsm-run=*) zsm_run="${arg#*=}" ;;
    --tests=*) tests="${arg#*=}" ;;
    --budget=*) budget="${arg#*=}" ;;
    --users=*) users="${arg#*=}" ;;
    --modes=*) modes="${arg#*=}" ;;
    --check) check=1 ;;
    *) die "unknown argument '$arg' (see the top of $0)" ;;
  esac
done
python=/usr/bin/python3
if [ ! -f "$("$python" -c 'import sys; print(sys.prefix)')/lib/python3.11/test/test_os.py" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libpython3.11-testsuite
fi
source "$root/tools/lib/zsm_run.sh"
[ -n "$zsm_run" ] || zsm_run="$(default_zsm_run "$root")"
[ -x "$zsm_run" ] || die "no launcher at $zsm_run"

work="$(mktemp -d)"
chmod 1777 "$work"
trap 'rm -rf "$work"' EXIT
stage_for_others "$work/bin" "$zsm_run"  # every user runs these copies (a clone under /root)
zsm_run="$work/bin/$(basename "$zsm_run")"
failures=0

# one <user> <mode or plain> <test>: "result | seconds | faults | evictions"
one() {
  local user="$1" mode="$2" t="$3" cmd=() out="$work/$1-$2-$3.log"
  [ "$user" = nobody ] && cmd+=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
  [ "$mode" != plain ] && cmd+=("$zsm_run" --quiet "--budget=$budget" --stats)
  [ "$mode" = sigbus ] && cmd+=(--self-serve)
  [ "$mode" != plain ] && cmd+=(--)
  local start=$SECONDS rc=0
  (cd "$work" && HOME="$work" timeout -s KILL 1800 "${cmd[@]}" "$python" -m test "$t" > "$out" 2>&1) || rc=$?
  local result
  result="$(sed -n 's/^Tests result: //p' "$out" | tail -1)"
  [ -n "$result" ] || result="exit $rc"
  local stats faults evictions
  stats="$(grep ' at exit: ' "$out" || true)"  # a line of each process: their sums
  faults="$(sed -n 's/.*; faults \([0-9]*\).*/\1/p' <<< "$stats" | awk '{ n += $1 } END { if (NR) print n }')"
  evictions="$(sed -n 's/.*; evictions \([0-9]*\).*/\1/p' <<< "$stats" | awk '{ n += $1 } END { if (NR) print n }')"
  echo "$result | $((SECONDS - start)) | ${faults:--} | ${evictions:--}"
}

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, Linux $(uname -r), $("$python" --version); zsm-run --budget=$budget"
echo "| test | user | mode | result | s | faults | evictions |"
echo "|---|---|---|---|---|---|---|"
IFS=, read -ra test_list <<< "$tests"
IFS=, read -ra user_list <<< "$users"
IFS=, read -ra mode_list <<< "$modes"
for t in "${test_list[@]}"; do
  for user in "${user_list[@]}"; do
    if [ "$user" = nobody ] && ! setpriv --reuid=65534 --regid=65534 --clear-groups -- true 2>/dev/null; then
      echo "| $t | nobody | - | not run: setpriv cannot change user (not root) | | | |"
      continue
    fi
    plain="$(one "$user" plain "$t")"
    echo "| $t | $user | plain | $plain |"
    for mode in "${mode_list[@]}"; do
      row="$(one "$user" "$mode" "$t")"
      echo "| $t | $user | $mode | $row |"
      [ "${row%% |*}" = "${plain%% |*}" ] || failures=$((failures + 1))
    done
  done
done
if ((check && failures)); then
  echo "FAILED: $failures runs gave another result than the plain run's"
  exit 1
fi
