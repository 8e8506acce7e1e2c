#!/usr/bin/env bash
# RocksDB's own db_bench and cache_bench (Debian's rocksdb-tools, 7.8) with no secondary tier,
# RocksDB's compressed tier and zsm's (libzsm_rocksdb_plugin.so through LD_PRELOAD, the tools
# unmodified), repeated and interleaved, two ways: at equal capacity, and at equal peak RSS
# (zsm's capacity raised to the largest whose RSS stays at or below RocksDB's lz4 tier's);
# tools/lib/db_bench_side_by_side.py says what each column is and where it comes from:
#
#   tools/run-db-bench.sh [db_bench_side_by_side.py options: --reps=N --reads=N --num=N
#                          --value-size=N --capacity=BYTES --cache-size=BYTES --exp-range=N
#                          --no-equal-rss --cb-ops=N --cb-threads=N --no-cache-bench]
#
# Installs rocksdb-tools when db_bench is missing (apt-get, as tools/setup.sh does), builds the
# plugin in $ZSM_BUILD (default build/release, configured when missing), fills a DB of 200,000
# keys of 1000 B in $ZSM_DB_DIR (default build/db-bench/db) once and reuses it, then runs
# db_bench readrandom uniform and skewed (--read_random_exp_range=5) with each tier behind a
# 4 MiB primary, 16 MiB tiers, and cache_bench. Prints Markdown tables and writes them to
# build/db-bench/results.md, every run to results.csv and the hits to results.png. Takes about
# 10 minutes on 2 cores with the defaults (3 repetitions).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${ZSM_BUILD:-$root/build/release}"
out="$root/build/db-bench"
db="${ZSM_DB_DIR:-$out/db}"

if ! command -v db_bench > /dev/null || ! command -v cache_bench > /dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "run-db-bench: installing rocksdb-tools"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends rocksdb-tools
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$build" --target zsm_rocksdb_plugin > /dev/null
plugin="$(find "$build" -name libzsm_rocksdb_plugin.so -print -quit)"
[ -n "$plugin" ] || { echo "run-db-bench: no libzsm_rocksdb_plugin.so in $build" >&2; exit 1; }
mkdir -p "$out"
python3 "$root/tools/lib/db_bench_side_by_side.py" --plugin="$plugin" --db="$db" \
  --out="$out/results.md" "$@"
