#!/usr/bin/env bash
# Installs what zsm needs from Debian's packages, if missing (root or sudo; no downloads
# outside apt). Sourced-free: run it, or let run-main.sh / run-tests.sh run it.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config python3
  libgtest-dev libgmock-dev libbenchmark-dev
  liblz4-dev libzstd-dev libmimalloc-dev
  valgrind clang-19
  llvm-19 python3-scipy gnuplot-nox binutils
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
