#!/usr/bin/env bash
# The programs' command lines: --help prints a usage line and exits 0; a value that is not a
# number, or an unknown option, exits 2 with an error naming the flag and the usage.
# Usage: cli_test.sh DEMO PAGESTORE STATS [MEMORY_BENCH]
set -uo pipefail
failed=0
expect() {  # expect STATUS PATTERN COMMAND...: exit status and a line of stdout+stderr
  local status="$1" pattern="$2"; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* exited $rc (want $status), output:"; echo "$out" | head -5
    failed=1
  else
    echo "ok: $* -> $rc"
  fi
}
demo="$1" pagestore="$2" stats="$3" memory="${4:-}"
expect 0 '^usage: zsm_demo' "$demo" --help
expect 2 "OBJECTS: 'abc' is not a count" "$demo" abc
expect 2 'OBJECTS: 0 is out of range' "$demo" 0
expect 0 '^usage: zsm_pagestore' "$pagestore" --help
expect 2 "^zsm_pagestore: --pages: 'abc' is not a count" "$pagestore" --pages=abc
expect 2 '^zsm_pagestore: unknown option --bogus' "$pagestore" --bogus
expect 2 "^zsm_pagestore: --level: 'x' is not an integer" "$pagestore" --level=x
expect 0 '^usage: zsm_stats' "$stats" --help
expect 2 "^zsm_stats: --pages: '12x' is not a count" "$stats" --files=/usr/share --pages=12x
if [ -n "$memory" ]; then
  expect 0 '^usage: zsm_memory_bench' "$memory" --help
  expect 2 '^zsm_memory_bench: --chain: 3 is out of range 4..16' "$memory" --chain=3
fi
[ "$failed" -eq 0 ] && echo "cli: all passed"
exit "$failed"
