#!/usr/bin/env bash
# The plugin in RocksDB's own, unmodified db_bench (LD_PRELOAD): a small DB filled, then a few
# thousand random reads through a 1 MiB block cache over a zsm tier must be served from the
# tier (RocksDB's rocksdb.secondary.cache.hits > 0, and zsm's own exit line agrees), with the
# pool mostly payload; with a backing file, some reads are served from the file; and a bad URI
# must stop db_bench with a message naming the bad part.
# Usage: db_bench_plugin_test.sh DB_BENCH PLUGIN SCRATCH_DIR
set -euo pipefail
db_bench="$1" plugin="$2" scratch="$3"
rm -rf "$scratch"
mkdir -p "$scratch"
common=(--db="$scratch/db" --num=40000 --value_size=400 --compression_type=none)
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

# With a backing file (the cold tier): blocks the tier's 4 MiB evicts are read back from it.
rm -f "$scratch/cold"  # the tier creates its file: a path left by an earlier run is refused
cold="$(LD_PRELOAD="$plugin" "$db_bench" --benchmarks=readrandom --use_existing_db=1 \
  "${common[@]}" --cache_size=1048576 --reads=20000 --seed=42 \
  --secondary_cache_uri="zsm://4M;file=$scratch/cold;file_size=64M" 2>&1)"
file_hits="$(grep -o 'bd_stat .* file_hits [0-9]*' <<< "$cold" | grep -o '[0-9]*$')"
echo "with a backing file: ${file_hits:-no} hits from the file"
[ "${file_hits:-0}" -gt 0 ] || { echo "FAIL: no hits from the backing file"; exit 1; }
[ ! -e "$scratch/cold" ] || { echo "FAIL: the backing file outlived db_bench"; exit 1; }

if bad="$(LD_PRELOAD="$plugin" "$db_bench" --benchmarks=readrandom --use_existing_db=1 \
    "${common[@]}" --reads=10 --secondary_cache_uri='zsm://8M;codec=lz5' 2>&1)"; then
  echo "FAIL: db_bench ran with a bad URI"
  exit 1
fi
grep -q "unknown codec 'lz5'" <<< "$bad" || { echo "FAIL: the error does not name lz5: $bad"; exit 1; }
echo "db_bench plugin test passed"
