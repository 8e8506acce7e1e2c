#!/usr/bin/env bash
# The README's main job: set up, build (Release), run the demo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
cmake -S "$root" -B "$root/build/release" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZSM_BUILD_TESTS=OFF
cmake --build "$root/build/release" --target zsm_demo
"$root/build/release/tools/zsm_demo" "$@"
