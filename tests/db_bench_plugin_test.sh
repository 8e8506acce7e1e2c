#!/usr/bin/env bash
# The plugin in RocksDB's own, unmodified db_bench (LD_PRELOAD): a small DB filled, then a few
# thousand random reads through a 1 MiB block cache over a zsm tier must be served from the
# tier (RocksDB's rocksdb.secondary.cache.hits > 0, and zsm's own exit line agrees), with the
# pool mostly payload; and a bad URI must stop db_bench with a message naming the bad part.
# Usage: db_bench_plugin_test.sh DB_BENCH PLUGIN SCRATCH_DIR
set -euo pipefail
db_bench="$1" plugin="$2" scratch="$3"
rm -rf "$scratch"
mkdir -p "$scratch"
common=(--db="$scratch/db" --num=20000 --value_size=400 --compression_type=none)
"$db_bench" --benchmarks=fillrandom "${common[@]}" > "$scratch/fill.log" 2>&1

out="$(LD_PRELOAD="$plugin" "$db_bench" --benchmarks=readrandom --use_existing_db=1 \
  "${common[@]}" --cache_size=1048576 --reads=5000 --seed=42 --statistics \
  --secondary_cache_uri='zsm://8M;codec=lz4' 2>&1)"
hits="$(grep -o 'rocksdb.secondary.cache.hits COUNT : [0-9]*' <<< "$out" | grep -o '[0-9]*$')"
zsm_hits="$(grep -o 'zsm tier zsm://8M;codec=lz4: hits [0-9]*' <<< "$out" | grep -o '[0-9]*$')"
grep -q 'zsm tier zsm://8M;codec=lz4: mm_stat' <<< "$out" || { echo "no mm_stat line"; exit 1; }
echo "secondary hits: RocksDB's ticker ${hits:-none}, zsm's count ${zsm_hits:-none}"
[ "${hits:-0}" -gt 0 ] || { echo "FAIL: no secondary hits"; exit 1; }
[ "$hits" = "$zsm_hits" ] || { echo "FAIL: RocksDB and zsm count different hits"; exit 1; }

if bad="$(LD_PRELOAD="$plugin" "$db_bench" --benchmarks=readrandom --use_existing_db=1 \
    "${common[@]}" --reads=10 --secondary_cache_uri='zsm://8M;codec=lz5' 2>&1)"; then
  echo "FAIL: db_bench ran with a bad URI"
  exit 1
fi
grep -q "unknown codec 'lz5'" <<< "$bad" || { echo "FAIL: the error does not name lz5: $bad"; exit 1; }
echo "db_bench plugin test passed"
