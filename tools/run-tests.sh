#!/usr/bin/env bash
# The README's test command (and CI's): set up (tools/setup.sh installs what is missing, then
# checks every compiler, runtime and library the four builds use, and names the package of
# anything missing before a build starts), then build and run every test in each
# configuration: a normal optimised build (g++), one under AddressSanitizer + UBSan (g++)
# that also checks the pool's invariants after every call (ZSM_DEBUG_INVARIANTS),
# one under ThreadSanitizer (clang-19, which also checks -Wthread-safety), and the libFuzzer
# targets alone for a fixed number of inputs each (clang-19, ASan + UBSan; tests/fuzz).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
jobs="$(nproc)"

run_config() {  # name, cmake args...; $targets and $labels, when set, narrow build and tests
  local name="$1"; shift
  local dir="$root/build/$name"
  echo "=== $name: configure and build"
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_COMPILE_WARNING_AS_ERROR=ON "$@"
  cmake --build "$dir" -j "$jobs" ${targets:+--target $targets}
  echo "=== $name: test"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 ${labels:+-L "$labels"}
}

start=$SECONDS
run_config release -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_config asan -DCMAKE_BUILD_TYPE=Debug -DZSM_SANITIZE=address,undefined -DZSM_DEBUG_INVARIANTS=ON
# Without zsm::rocksdb under TSan and in the fuzz build: librocksdb is not instrumented, so
# TSan would report its own synchronisation as races, and no fuzz target uses it.
run_config tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_SANITIZE=thread -DZSM_BUILD_BENCH=OFF \
  -DZSM_BUILD_ROCKSDB=OFF -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
targets="pool_fuzz cache_fuzz" labels=fuzz run_config fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZSM_SANITIZE=address,undefined -DZSM_BUILD_FUZZ=ON -DZSM_BUILD_BENCH=OFF -DZSM_BUILD_TOOLS=OFF \
  -DZSM_BUILD_ROCKSDB=OFF \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
echo "all configurations passed in $((SECONDS - start)) s"
