#!/usr/bin/env bash
# libzsm_region_preload.so on unmodified programs (ctest region_preload_programs):
# - the probe (tests/region_preload/probe.c) reads back every byte it wrote, with and without
#   the library; with it and a 4 MiB budget under 64 MiB of buffers, the region's statistics
#   at exit show evictions and faults, so the region really served them;
# - a bad ZSM_REGION_BUDGET or ZSM_REGION_SIZE, or one below the library's least: one line on
#   stderr naming it, and the program runs as without the library; no budget: silence;
# - zsm-run: one line at start naming the program, the budget and the mode (none with --quiet),
#   a budget below 1M refused by zsm-run itself (exit 2, one line);
# - aging: under zsm-run --cold-age=0.5 and a budget far above its use, python3's 32 MiB left
#   untouched for 3 s is compressed, as fast as 1 % of a CPU finds it (the statistics' cold pages) and reads back whole; a bad
#   ZSM_REGION_COLD_AGE is one line, a bad --cold-age zsm-run's exit 2;
# - the automatic mode: zsm-run without --budget and --cold-age says so at start;
#   --stats-interval writes its CSV lines; a stall target without a cold age is exit 2;
# - tools/run-region-programs.sh's bad arguments: one line each, exit 2;
# - sort, python3 (multiprocessing included), perl, sqlite3 and redis-server (BGSAVE's RDB
#   compared) under zsm-run at half their plain peak RSS, both modes, at a small scale
#   (tools/run-region-programs.sh --check): every run completes with the plain run's output.
#   Not xz, which thrashes at half its peak (39-77x its plain time, past the script's limit on
#   a fresh machine's other input), nor the peak target, whose idle part is too rough at this
#   scale (tools/lib/region_programs.py); docs/region-figures.md has both.
# Skips (77) where the region cannot be made (no userfaultfd), with the library's reason.
#
#   region_preload_test.sh <libzsm_region_preload.so> <region_preload_probe> <zsm-run> <dir>
set -euo pipefail
lib="$1" probe="$2" launcher="$3" dir="$4"
programs_script="$(dirname "$0")/../run-region-programs.sh"
mkdir -p "$dir"
fail() { echo "FAILED: $*"; exit 1; }

# run_probe <stderr file> [VAR=value...]: the probe under the library with that environment.
run_probe() {
  local err="$1"
  shift
  env LD_PRELOAD="$lib" "$@" "$probe" 2> "$err"
}

[ "$("$probe")" = "probe: ok" ] || fail "the probe without the library"

out="$(run_probe "$dir/on.err" ZSM_REGION_BUDGET=4M ZSM_REGION_STATS=1)" || true
if grep -q "no region" "$dir/on.err"; then
  echo "skipped: $(cat "$dir/on.err")"
  exit 77
fi
[ "$out" = "probe: ok" ] || fail "the probe under the library: $out $(cat "$dir/on.err")"
stats="$(grep "at exit: " "$dir/on.err")" || fail "no statistics at exit"
evictions="$(sed -n 's/.*evictions \([0-9]*\).*/\1/p' <<< "$stats")"
faults="$(sed -n 's/.*faults \([0-9]*\).*/\1/p' <<< "$stats")"
[ "$evictions" -gt 0 ] && [ "$faults" -gt 0 ] || fail "the region served nothing: $stats"
echo "probe under the library: ok; $stats"

# expect_one_line <what> <pattern> [VAR=value...]
expect_one_line() {
  local what="$1" pattern="$2"
  shift 2
  out="$(run_probe "$dir/line.err" "$@")" || fail "$what: the probe failed: $out"
  [ "$out" = "probe: ok" ] || fail "$what: $out"
  [ "$(wc -l < "$dir/line.err")" = 1 ] || fail "$what: not one line: $(cat "$dir/line.err")"
  grep -q "$pattern" "$dir/line.err" || fail "$what: $(cat "$dir/line.err")"
  echo "$what: $(cat "$dir/line.err")"
}
expect_one_line "bad budget" "ZSM_REGION_BUDGET='12Q' is not a size" ZSM_REGION_BUDGET=12Q
expect_one_line "empty budget" "ZSM_REGION_BUDGET='' is not a size" ZSM_REGION_BUDGET=
expect_one_line "budget too small" "ZSM_REGION_BUDGET='4K' is below the least the library takes, 1M" ZSM_REGION_BUDGET=4K
expect_one_line "region too small" "ZSM_REGION_SIZE='1M' is below the least the library takes, 256M" \
  ZSM_REGION_BUDGET=4M ZSM_REGION_SIZE=1M
expect_one_line "bad region size" "ZSM_REGION_SIZE='lots' is not a size" ZSM_REGION_BUDGET=4M \
  ZSM_REGION_SIZE=lots
expect_one_line "bad cold age" "ZSM_REGION_COLD_AGE='soon' is not 0 or seconds" ZSM_REGION_BUDGET=4M ZSM_REGION_COLD_AGE=soon

out="$(run_probe "$dir/off.err")" || fail "no budget: $out"
[ "$out" = "probe: ok" ] && [ ! -s "$dir/off.err" ] || fail "no budget: $out $(cat "$dir/off.err")"
echo "no budget: the library stays silent"

# zsm-run's line at start, and its refusal of a budget below the library's least.
start_line="$("$launcher" --budget=8M -- "$probe" 2>&1 >/dev/null)"
[[ "$start_line" == "zsm-run: "*"budget 8.0 MiB for this process"* ]] || fail "zsm-run's line at start: '$start_line'"
[ -z "$("$launcher" --quiet --budget=8M -- "$probe" 2>&1 >/dev/null)" ] || fail "zsm-run --quiet printed something"
rc=0
err="$("$launcher" --budget=100K -- true 2>&1)" || rc=$?
[ "$rc" = 2 ] && grep -q "budget" <<< "$err" || fail "zsm-run --budget=100K: exit $rc, '$err'"
echo "zsm-run: '$start_line'; --budget=100K refused: $(head -1 <<< "$err")"

# Aging: memory left alone for six cold ages is compressed though the budget has room.
rc=0
err="$("$launcher" --cold-age=0.01 -- true 2>&1)" || rc=$?
[ "$rc" = 2 ] && grep -q "cold-age" <<< "$err" || fail "zsm-run --cold-age=0.01: exit $rc, '$err'"
out="$("$launcher" --budget=512M --cold-age=0.5 --stats -- python3 -c '
import time
pattern = (bytes(range(251)) * ((32 << 20) // 251 + 1))[:32 << 20]
a = bytearray(pattern)
time.sleep(3)
print("intact" if a == pattern else "changed")' 2> "$dir/aging.err")" || true
[ "$out" = intact ] || fail "aging: python3 said '$out': $(cat "$dir/aging.err")"
stats="$(grep "python3.* at exit: " "$dir/aging.err")" || fail "aging: no statistics: $(cat "$dir/aging.err")"
cold="$(sed -n 's/.*, cold \([0-9]*\)[,;].*/\1/p' <<< "$stats")"
[ "${cold:-0}" -gt 1024 ] || fail "aging: $cold pages compressed for their age, of 16384 left alone (the pattern and its copy): $stats"
echo "aging: $cold pages left alone for 3 s compressed; --cold-age=0.01 refused: $(head -1 <<< "$err")"

# The automatic mode (no --budget, no --cold-age): its line at start says so; the CSV lines
# come every interval, from the launched process alone; a stall target without a cold age is
# refused.
start_line="$("$launcher" -- "$probe" 2>&1 >/dev/null)"
[[ "$start_line" == "zsm-run: "*"automatic: pages untouched for a cold age (10.0 s to start) are compressed"* ]] ||
  fail "zsm-run's automatic line at start: '$start_line'"
"$launcher" --quiet --stats-interval=0.3 --stats-file="$dir/auto.csv" -- sh -c 'sleep 1.5; true' ||
  fail "zsm-run --stats-interval: exit $?"
lines="$(wc -l < "$dir/auto.csv")"
header="$(head -1 "$dir/auto.csv")"
[[ "$header" == seconds,rss_mib,*,cold_age_s ]] && [ "$lines" -ge 3 ] &&
  awk -F, 'NR > 1 && (NF != 11 || $11 <= 0 || $11 > 10) { bad = 1 } END { exit bad }' "$dir/auto.csv" ||
  fail "zsm-run --stats-interval=0.3 over 1.5 s: $(cat "$dir/auto.csv")"
rc=0
err="$("$launcher" --cold-age=0 --stall-target=1 -- true 2>&1)" || rc=$?
[ "$rc" = 2 ] && grep -q "stall-target" <<< "$err" || fail "zsm-run --cold-age=0 --stall-target=1: exit $rc, '$err'"
rc=0
err2="$("$launcher" --stats-file="$dir/auto.csv" -- true 2>&1)" || rc=$?
[ "$rc" = 2 ] && grep -q "stats-interval" <<< "$err2" || fail "zsm-run --stats-file alone: exit $rc, '$err2'"
echo "automatic: '$start_line'; $((lines - 1)) CSV lines in 1.5 s; $(head -1 <<< "$err")"

# The programs script's own bad arguments: one line, exit 2.
for bad in --programs=emacs --zsm-run=/nonexistent --bogus; do
  rc=0
  err="$("$programs_script" --no-install --zsm-run="$launcher" "$bad" 2>&1 > /dev/null)" || rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <<< "$err")" = 1 ] || fail "programs script $bad: exit $rc, '$err'"
  echo "programs script $bad: $err"
done

"$programs_script" --no-install --zsm-run="$launcher" --programs=sort,python3,perl,sqlite3,redis-server \
  --fractions=2 --scale=0.05 --dir="$dir/programs" --check
