#!/usr/bin/env bash
# The programs' command lines (bench/cli.h, on CLI11): --help prints the usage and --version
# zsm's version (zsm/version.h), both exit 0; a bad value, an unknown flag or a missing input
# exits 2 with an error naming the flag (and its range) and a hint at --help; "--flag VALUE" and
# "--flag=VALUE" both work, and so do size suffixes (16M). Each program runs briefly.
# Usage: cli_test.sh NAME=PATH...  (NAME: demo pagestore stats memory_bench cold_tier_bench
# rocksdb_bench cache_bench pair_bench copy_bench; the bench ones only where bench/ is built)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version=$(sed -n 's/^#define ZSM_VERSION_STRING "\(.*\)"/\1/p' "$root/zsm/include/zsm/version.h")
scratch=$(mktemp -d) && trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/empty"
failed=0
expect() {  # expect STATUS PATTERN COMMAND...: exit status and a line of stdout+stderr
  local status="$1" pattern="$2"; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* exited $rc (want $status, and a line matching '$pattern'), output:"
    echo "$out" | head -8
    failed=1
  else
    echo "ok: $* -> $rc"
  fi
}
common() {  # common NAME PATH [FLAG]: --help, --version, an unknown flag, FLAG's value missing
  local name="$1" prog="$2" flag="${3:-}"
  expect 0 "^usage: $name" "$prog" --help
  expect 0 "^$name $version\$" "$prog" --version
  expect 2 "^$name: .*--bogus" "$prog" --bogus
  expect 2 "^Run '$name --help' for the flags" "$prog" --bogus
  [ -z "$flag" ] || expect 2 "^$name: $flag: 1 required" "$prog" "$flag"
}

for arg in "$@"; do
  name="${arg%%=*}" prog="${arg#*=}"
  case "$name" in
  demo)
    # Positional arguments only: OBJECTS and SEED.
    common zsm_demo "$prog"
    expect 2 "^zsm_demo: OBJECTS: 'abc' is not a count \(1\.\.10000000\)" "$prog" abc
    expect 2 '^zsm_demo: OBJECTS: 0 is out of range 1\.\.10000000' "$prog" 0
    expect 2 "^zsm_demo: unexpected argument '3'" "$prog" 1 2 3
    expect 0 'verified 50 objects after compaction: 0 mismatches' "$prog" 100 7
    ;;
  pagestore)
    common zsm_pagestore "$prog" --pages
    expect 2 "^zsm_pagestore: --pages: 'abc' is not a count \(1\.\.4294967295\)" "$prog" --pages=abc
    expect 2 "^zsm_pagestore: --level: 'x' is not an integer" "$prog" --level=x
    expect 2 "^zsm_pagestore: --level: level 99 out of range" "$prog" --codec=lz4hc --level=99
    expect 2 "^zsm_pagestore: --codec: unknown codec 'brotli'" "$prog" --codec brotli
    expect 2 "^zsm_pagestore: --capacity: '1X' is not a size \(bytes, or with K, M or G: 0\.\.1024G\)" \
      "$prog" --capacity=1X
    expect 2 "^zsm_pagestore: DIR: '/nonexistent' does not exist" "$prog" /nonexistent
    expect 1 "^zsm_pagestore: no page to read in the files under $scratch/empty" "$prog" "$scratch/empty"
    expect 0 'bytes held [0-9]+ of 1048576$' "$prog" --pages 40 --capacity 1M /usr/share
    expect 0 'bytes held [0-9]+ of 1048576$' "$prog" --pages=40 --capacity=1024K /usr/share
    ;;
  stats)
    common zsm_stats "$prog" --chain
    expect 2 '^zsm_stats: --chain: 3 is out of range 4\.\.16' "$prog" --class-table --chain=3
    expect 2 "^zsm_stats: --pages: '12x' is not a count" "$prog" --files=/usr/share --pages=12x
    expect 2 '^zsm_stats: --page-size: 8K is not one of 4K, 16K, 64K' "$prog" --class-table --page-size=8K
    expect 2 '^zsm_stats: --shards: 3 is not a power of two' "$prog" --class-table --shards 3
    expect 2 "^zsm_stats: --files: '/nonexistent' does not exist" "$prog" --files=/nonexistent
    expect 2 "^zsm_stats: --files: '/nonexistent' does not exist" "$prog" --files=/usr/share,/nonexistent
    expect 2 "^zsm_stats: --sizes: '/nonexistent' does not exist" "$prog" --sizes /nonexistent
    expect 2 "^zsm_stats: --files: no page to read" "$prog" --files="$scratch/empty"
    expect 2 '^zsm_stats: give exactly one of' "$prog" --chain=8
    expect 0 'chain 4' "$prog" --class-table --chain 4
    expect 0 'chain 4' "$prog" --class-table --chain=4
    expect 0 '16384-byte pages, chain 8' "$prog" --class-table --page-size 16K
    ;;
  memory_bench)
    common zsm_memory_bench "$prog" --chain
    expect 2 '^zsm_memory_bench: --chain: 3 is out of range 4\.\.16' "$prog" --chain=3
    expect 2 "^zsm_memory_bench: DIR: '/nonexistent' does not exist" "$prog" /nonexistent
    expect 0 '^zsm ' "$prog" --pages 30 --chain 4 /usr/share
    expect 0 '^zsm ' "$prog" --pages=30 --chain=4 /usr/share
    ;;
  cold_tier_bench)
    common zsm_cold_tier_bench "$prog" --memory
    expect 2 "^zsm_cold_tier_bench: --memory: '16X' is not a size \(bytes, or with K, M or G: 4M\.\.16G\)" \
      "$prog" --memory=16X
    expect 2 '^zsm_cold_tier_bench: --memory: 1M is out of range 4M\.\.16G' "$prog" --memory 1M
    expect 2 "^zsm_cold_tier_bench: --keys: unknown 'zipfian' \(zipf, uniform\)" "$prog" --keys=zipfian
    expect 2 "^zsm_cold_tier_bench: --file's folder: '/nonexistent' does not exist" \
      "$prog" --file=/nonexistent/file
    expect 0 'values read back that differ: 0' "$prog" --memory 4M --ratios 1 --gets 200 \
      --keys uniform --file "$scratch"
    expect 0 'values read back that differ: 0' "$prog" --memory=4M --ratios=1 --gets=200 \
      --keys=uniform --file="$scratch/cold.file"
    ;;
  rocksdb_bench)
    common zsm_rocksdb_bench "$prog" --keys
    expect 2 "^zsm_rocksdb_bench: --keys: 'abc' is not a count \(1\.\.100000000\)" "$prog" --keys=abc
    expect 2 "^zsm_rocksdb_bench: --tiers: unknown tier 'foo' \(the tiers: zsm, zsm-2nd," "$prog" --tiers=foo
    expect 2 "^zsm_rocksdb_bench: --secondary: 1K is out of range 64K\.\.64G" "$prog" --secondary 1K
    expect 2 "^zsm_rocksdb_bench: --zsm-codec: unknown codec 'x'" "$prog" --zsm-codec=x
    expect 0 'secondary tiers 0\.2 MiB' "$prog" --keys 1000 --reads 200 --primary 64K \
      --secondary 256K --tiers none
    expect 0 'values read back that differ: 0' "$prog" --keys=1000 --reads=200 --primary=64K \
      --secondary=256K --tiers=zsm
    ;;
  cache_bench)
    # Its own flags and Google Benchmark's, which it hands on (--help lists both).
    expect 0 '^usage: zsm_cache_bench' "$prog" --help
    expect 0 'benchmark_filter' "$prog" --help
    expect 0 "^zsm_cache_bench $version\$" "$prog" --version
    expect 2 "^zsm_cache_bench: --pages: 'x' is not a count" "$prog" --pages x
    expect 2 'unrecognized command-line flag.*--benchmark_bogus' "$prog" --benchmark_bogus=1
    expect 0 '^memory/none' "$prog" --pages 20 --benchmark_list_tests=true
    expect 0 '^codec_compress/lz4 ' "$prog" --pages=20 --benchmark_filter=codec_compress/lz4$ \
      --benchmark_min_time=0.001
    ;;
  pair_bench | copy_bench)
    # Google Benchmark's command line, and zsm's --version.
    expect 0 "^zsm_$name $version\$" "$prog" --version
    expect 0 'benchmark_filter' "$prog" --help
    expect 1 'unrecognized command-line flag.*--benchmark_bogus' "$prog" --benchmark_bogus=1
    ;;
  *) echo "cli_test.sh: unknown program name '$name'"; exit 2 ;;
  esac
done
[ "$failed" -eq 0 ] && echo "cli: all passed"
exit "$failed"
