#!/usr/bin/env bash
# Installs what zsm needs from Debian's packages, if missing (root or sudo; no downloads
# outside apt), then checks that every file and program the builds use is really there.
# Run it, or let run-main.sh / run-tests.sh run it. `setup.sh --check` only checks.
#
# The check exists because a package list can be right on a machine set up by hand and
# wrong on a new one (clang-19 without --install-recommends leaves out the sanitizer and
# libFuzzer runtimes): each required file is named with the package that provides it, and
# a missing one fails here in one line, not at a link step minutes into the tests.
# Takes a few seconds when everything is installed, 3-10 minutes on a new machine (apt).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"

packages=(
  g++ cmake ninja-build pkg-config python3
  make   # RocksDB's plugin build reads zsm.mk with make (ctest rocksdb_plugins_build)
  patch  # tools/run-kernel-ab.sh --patch, and the kernel A/B's variants
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev  # the programs' command line (bench/cli.h)
  liblz4-dev libzstd-dev libxxhash-dev libmimalloc-dev libjemalloc-dev libgoogle-perftools-dev
  librocksdb-dev
  rocksdb-tools  # db_bench, cache_bench: the ctest db_bench_plugin, tools/run-db-bench.sh
  valgrind clang-19 libclang-rt-19-dev
  llvm-19 python3-scipy gnuplot-nox binutils
  clang-22 llvm-22 libclang-rt-22-dev  # the A/B's third compiler, the mail's (bookworm-security)
  linux-source-6.1  # the kernel's own mm/zsmalloc.c (tools/run-kernel-ab.sh, kernel_diff_test)
  # arm64: the cross compilers and C/C++ libraries, and qemu-user to run and count what they
  # build (tools/run-kernel-ab.sh --arch arm64, tools/lib/qemu_count.py); each clang's own lld
  # links zsm's arm64 driver (tools/run-ab.sh --arch arm64: -fuse-ld=lld)
  qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross lld-19 lld-22
  # real programs under zsm-run, ctests region_preload_programs and region_preload_unprivileged
  # (tools/run-region-programs.sh; java, the slow one, is left to that script, which installs it
  # when asked for), and setpriv (util-linux) to run them as a user without privileges
  xz-utils zstd mawk sqlite3 perl redis-server redis-tools python3-numpy util-linux
)

install_missing() {
  local missing=() p sudo=""
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "setup: installing ${missing[*]}"
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# need PACKAGE WHAT: WHAT is a program on PATH, or an absolute path that must exist.
failed=0
need() {
  local package="$1" what="$2"
  if [[ "$what" == /* ]]; then [ -e "$what" ] && return 0
  else command -v "$what" >/dev/null && return 0; fi
  echo "setup: missing $what: install the Debian package $package (apt-get install $package)" >&2
  failed=1
}

# links COMPILER PACKAGE FLAGS...: a one-line program builds and links with FLAGS (the runtime
# libraries are found by the compiler's driver, in whatever layout the package uses).
links() {
  local cxx="$1" package="$2" tmp; shift 2
  command -v "$cxx" >/dev/null || return 0  # already reported as a missing program
  local program='int main() { return 0; }'
  [[ "$*" == *fuzzer* ]] &&
    program='extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }'
  tmp=$(mktemp -d)
  echo "$program" > "$tmp/t.cpp"
  "$cxx" "$@" "$tmp/t.cpp" -o "$tmp/t" 2>/dev/null ||
    { echo "setup: $cxx cannot link with $*: install the Debian package $package" >&2; failed=1; }
  rm -rf "$tmp"
}

check_prerequisites() {
  local p
  for p in g++ cmake ninja pkg-config python3 make patch valgrind gnuplot nm objdump; do
    case $p in ninja) need ninja-build ninja ;; gnuplot) need gnuplot-nox gnuplot ;;
      nm|objdump) need binutils "$p" ;; *) need "$p" "$p" ;; esac
  done
  need clang-19 clang++-19
  need llvm-19 llvm-profdata-19
  need gcc-12 gcc-12
  need clang-22 clang++-22
  need linux-source-6.1 /usr/src/linux-source-6.1.tar.xz
  need llvm-22 llvm-profdata-22
  need qemu-user qemu-aarch64
  need gcc-aarch64-linux-gnu aarch64-linux-gnu-gcc-12
  need g++-aarch64-linux-gnu aarch64-linux-gnu-g++-12
  need binutils-aarch64-linux-gnu aarch64-linux-gnu-objdump
  need libc6-dev-arm64-cross /usr/aarch64-linux-gnu/lib/libc.a
  need lld-19 /usr/lib/llvm-19/bin/ld.lld
  need lld-22 /usr/lib/llvm-22/bin/ld.lld
  need libgtest-dev /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake
  need libgmock-dev /usr/include/gmock/gmock.h
  need libbenchmark-dev /usr/lib/x86_64-linux-gnu/cmake/benchmark/benchmarkConfig.cmake
  need libcli11-dev /usr/share/cmake/CLI11/CLI11Config.cmake
  need liblz4-dev /usr/include/lz4.h
  need libzstd-dev /usr/include/zstd.h
  need libxxhash-dev /usr/include/xxhash.h
  need libmimalloc-dev /usr/include/mimalloc.h
  need libjemalloc-dev /usr/include/jemalloc/jemalloc.h
  need libgoogle-perftools-dev /usr/include/gperftools/tcmalloc.h
  need librocksdb-dev /usr/include/rocksdb/secondary_cache.h
  need rocksdb-tools db_bench
  need rocksdb-tools cache_bench
  need xz-utils xz
  need sqlite3 sqlite3
  need redis-server redis-server
  need redis-tools redis-benchmark
  need zstd zstd
  need mawk mawk
  need python3-numpy /usr/lib/python3/dist-packages/numpy
  need util-linux setpriv
  need python3-scipy /usr/lib/python3/dist-packages/scipy
  links g++ "libgcc-12-dev (g++'s sanitizer runtimes)" -fsanitize=address,undefined
  links clang++-19 libclang-rt-19-dev -fsanitize=address,undefined
  links clang++-19 libclang-rt-19-dev -fsanitize=thread
  links clang++-19 libclang-rt-19-dev -fsanitize=fuzzer
  links clang++-22 libclang-rt-22-dev -fprofile-instr-generate  # tools/run-ab.sh --pgo
  links clang++-22 "libc6-dev-arm64-cross and g++-aarch64-linux-gnu (arm64's C and C++ libraries)" \
    --target=aarch64-linux-gnu -static
  links clang++-22 lld-22 --target=aarch64-linux-gnu -static -fuse-ld=lld  # tools/run-ab.sh --arch arm64
  ((failed == 0))
}

[ "${1:-}" = "--check" ] || install_missing
check_prerequisites
