#!/usr/bin/env bash
# zsm as RocksDB's secondary cache (lz4 admitting every block, lz4 on second eviction, zstd
# level 1 on second eviction) against RocksDB's CompressedSecondaryCache (lz4, with and without
# enable_custom_split_merge), against no secondary cache, and against RocksDB's lz4 tier at the
# capacity at which it adds as much RSS as zsm-2nd (rocksdb-lz4-rss), side by side in one run
# (bench/rocksdb_bench.cpp says how): prints the table and draws build/plots/rocksdb.png.
#
#   tools/run-rocksdb-bench.sh [rocksdb_bench options: --keys=N --primary=BYTES
#                               --secondary=BYTES --rocksdb-secondary=BYTES --reads=N
#                               --tiers=zsm,zsm-2nd,zsm-2nd-zstd,rocksdb-lz4,rocksdb-lz4-split,none,
#                                       rocksdb-lz4-rss (rocksdb-lz4 at zsm-2nd's RSS)
#                               --zsm-codec=SPEC (zsm-2nd-zstd's codec, e.g. lz4hc:4)
#                               --zsm-recompress=SPEC (zsm and zsm-2nd recompress with it)]
#
# Builds zsm_rocksdb_bench in $ZSM_BUILD (default build/bench, configured as tools/run-main.sh
# does when missing). About 80 seconds on 2 cores with the defaults (600,000 keys, 32 MiB tiers
# behind a 4 MiB primary cache).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${ZSM_BUILD:-$root/build/bench}"
out="$root/build/plots"

if [ ! -f "$build/CMakeCache.txt" ]; then
  "$root/tools/setup.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_BUILD_TESTS=OFF \
    > /dev/null
fi
cmake --build "$build" --target zsm_rocksdb_bench > /dev/null
mkdir -p "$out"
"$build/bench/zsm_rocksdb_bench" --out="$out/rocksdb.dat" "$@" | tee "$out/rocksdb.txt"
ROCKSDB_DAT="$out/rocksdb.dat" "$root/tools/run-plots.sh" rocksdb "$out"
