#!/usr/bin/env bash
# ctest plots_smoke: draws the waste and utilization plots with tools/run-plots.sh, using the
# zsm_stats given, into a scratch directory, and checks that each is a non-empty PNG file.
# Usage: plots_smoke_test.sh ZSM_STATS SCRATCH_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stats="$1" scratch="$2"
rm -rf "$scratch"
for plot in waste utilization; do
  ZSM_STATS="$stats" "$here/../run-plots.sh" "$plot" "$scratch"
done
for png in waste.png utilization.png; do
  [ -s "$scratch/$png" ] || { echo "no $png or empty"; exit 1; }
  magic="$(head -c 8 "$scratch/$png" | od -An -tx1 | tr -d ' \n')"
  [ "$magic" = "89504e470d0a1a0a" ] || { echo "$png is not a PNG (starts $magic)"; exit 1; }
done
echo "plots: waste.png utilization.png are PNG files in $scratch"
