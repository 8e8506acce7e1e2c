#!/usr/bin/env bash
# Line coverage of the libraries (zsm/src, zsm/stats, compress/) from clang's source-based coverage:
# builds with -fprofile-instr-generate -fcoverage-mapping (clang-19, build/cov), replays the
# fuzz corpora (the committed seeds, plus build/fuzz-corpus/ when tools/run-fuzz.sh has filled
# it) through the fuzz targets, then runs the GoogleTest suite (ctest label zsm), and prints
# llvm-cov's table twice: the fuzz corpora alone, then corpora and suite together. An HTML
# report of the second goes to build/cov/html/index.html.
#
#   tools/run-coverage.sh [--fuzz-only]     (--fuzz-only: skip the GoogleTest suite)
# Takes about 15 minutes on 2 cores (the build, the corpora, then the suite); --fuzz-only
# about 5.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/cov"
profiles="$build/profiles"
with_suite=1
case "${1:-}" in
  --fuzz-only) with_suite=0 ;;
  "") ;;
  *) echo "usage: tools/run-coverage.sh [--fuzz-only]" >&2; exit 2 ;;
esac

"$root/tools/setup.sh"
flags="-fprofile-instr-generate -fcoverage-mapping"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DZSM_BUILD_FUZZ=ON -DZSM_BUILD_SHARED=OFF \
  -DZSM_BUILD_BENCH=OFF -DZSM_BUILD_TOOLS=OFF
cmake --build "$build" -j "$(nproc)"
rm -rf "$profiles"
mkdir -p "$profiles/fuzz" "$profiles/suite"

# Every input of a target's corpora, once (-runs=0 runs the corpus and stops).
for target in pool cache; do
  corpora=("$root/tests/fuzz/corpus/$target")
  [ -d "$root/build/fuzz-corpus/$target" ] && corpora+=("$root/build/fuzz-corpus/$target")
  echo "=== replaying ${corpora[*]}"
  LLVM_PROFILE_FILE="$profiles/fuzz/$target-%p.profraw" \
    "$build/tests/fuzz/${target}_fuzz" -runs=0 -rss_limit_mb=4096 "${corpora[@]}" 2>&1 | tail -1
done
if ((with_suite)); then
  echo "=== GoogleTest suite"
  LLVM_PROFILE_FILE="$profiles/suite/%p.profraw" \
    ctest --test-dir "$build" -L zsm -j "$(nproc)" --timeout 900 | tail -3
fi

mapfile -t binaries < <(find "$build/tests" -maxdepth 2 -type f -perm -u+x \
  \( -name '*_test' -o -name '*_fuzz' \) | sort)
objects=("${binaries[0]}")  # llvm-cov takes the first binary as is, the others with -object
for b in "${binaries[@]:1}"; do objects+=(-object "$b"); done
mapfile -t sources < <(find "$root/zsm/src" "$root/zsm/stats" "$root/compress/codec" \
  "$root/compress/cache" "$root/compress/rocksdb" -type f \( -name '*.cpp' -o -name '*.h' \) | sort)

# report <name> <profile directories...>: merges their profiles, prints the table.
report() {
  local name="$1"; shift
  llvm-profdata-19 merge -sparse -o "$build/$name.profdata" $(find "$@" -name '*.profraw')
  echo "=== line coverage: $name"
  llvm-cov-19 report "${objects[@]}" -instr-profile="$build/$name.profdata" "${sources[@]}" \
    | sed "s|$root/||"
}

report fuzz "$profiles/fuzz"
if ((with_suite)); then
  report all "$profiles/fuzz" "$profiles/suite"
  llvm-cov-19 show "${objects[@]}" -instr-profile="$build/all.profdata" -format=html \
    -output-dir="$build/html" "${sources[@]}"
  echo "HTML report: build/cov/html/index.html"
fi
