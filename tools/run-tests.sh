#!/usr/bin/env bash
# The README's test command (and CI's): set up (tools/setup.sh installs what is missing, then
# checks every compiler, runtime and library the four builds use, and names the package of
# anything missing before a build starts), then build and run every test in each
# configuration: a normal optimised build (g++), one under AddressSanitizer + UBSan (g++)
# that also checks the pool's invariants after every call (ZSM_DEBUG_INVARIANTS),
# one under ThreadSanitizer (clang-19, which also checks -Wthread-safety), and the libFuzzer
# targets alone for a fixed number of inputs each (clang-19, ASan + UBSan; tests/fuzz).
#
#   tools/run-tests.sh [--quick | --config NAME]...
#
# --quick runs the release configuration alone; --config NAME (release, asan, tsan, fuzz; may
# be given more than once) runs the ones named, in the order above. Takes about 45 minutes on
# 2 cores for all four (set-up excepted), the release configuration alone about 8.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"

all_configs="release asan tsan fuzz"
wanted=""
while (($#)); do
  case "$1" in
    --quick) wanted+=" release" ;;
    --config)
      [[ " $all_configs " == *" ${2:-} "* ]] ||
        { echo "run-tests.sh: --config wants one of: $all_configs (got '${2:-}')" >&2; exit 2; }
      wanted+=" $2"; shift ;;
    --config=*)
      [[ " $all_configs " == *" ${1#--config=} "* ]] ||
        { echo "run-tests.sh: --config wants one of: $all_configs (got '${1#--config=}')" >&2; exit 2; }
      wanted+=" ${1#--config=}" ;;
    *) echo "run-tests.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
wanted="${wanted:-$all_configs}"
wants() { [[ " $wanted " == *" $1 "* ]]; }

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
wants release && run_config release -DCMAKE_BUILD_TYPE=RelWithDebInfo
wants asan && run_config asan -DCMAKE_BUILD_TYPE=Debug -DZSM_SANITIZE=address,undefined -DZSM_DEBUG_INVARIANTS=ON
# Without zsm::rocksdb under TSan and in the fuzz build: librocksdb is not instrumented, so
# TSan would report its own synchronisation as races, and no fuzz target uses it.
wants tsan && run_config tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_SANITIZE=thread -DZSM_BUILD_BENCH=OFF \
  -DZSM_BUILD_ROCKSDB=OFF -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
wants fuzz && targets="pool_fuzz cache_fuzz" labels=fuzz run_config fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZSM_SANITIZE=address,undefined -DZSM_BUILD_FUZZ=ON -DZSM_BUILD_BENCH=OFF -DZSM_BUILD_TOOLS=OFF \
  -DZSM_BUILD_ROCKSDB=OFF \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
echo "configurations passed ($wanted ) in $((SECONDS - start)) s"
