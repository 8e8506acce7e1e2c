#!/usr/bin/env bash
# zsm's plots, each drawn by one command with gnuplot (scripts in tools/plots/):
#
#   tools/run-plots.sh waste|utilization|bench|ab|rocksdb|services|all [OUTDIR]
#   (default OUTDIR: build/plots)
#
#   waste        waste.png: each size class's zspage tail waste at chain 4, 8 and 16, and what
#                an object costs beyond its payload at chain 8; data from zsm_stats --class-table
#                (the pool's own classes, 4 KiB pages).
#   utilization  utilization.png: utilization and pages held along a workload, compactions
#                marked; data from zsm_stats --trace on tools/data/churn.sizes, or on the
#                workload given in $STATS_ARGS (e.g. STATS_ARGS='--files=/usr/share
#                --pages=20000 --capacity=20000000').
#   bench        bench.png: ns per pair per size, zsm patched/baseline against mimalloc and
#                glibc, from zsm_pair_bench's JSON: $BENCH_JSON, else the one tools/run-main.sh
#                leaves in build/bench/results/pair_bench.json, else a short run made here
#                (about a minute; its JSON stays in OUTDIR).
#   ab           ab.png: the A/B's instructions and ns per pair (tools/lib/ab_report.py's plot),
#                from $AB_RESULTS, else build/ab/results.json. Not run here when missing (the
#                full A/B takes about 9 minutes): the command says how to produce it and fails.
#   rocksdb      rocksdb.png: zsm as RocksDB's secondary cache against RocksDB's own, reads/s
#                and hit ratio per tier, from $ROCKSDB_DAT, else OUTDIR/rocksdb.dat, which
#                tools/run-rocksdb-bench.sh writes (and then draws this plot). Not in `all`.
#   services     services-rss.png: each service's RSS over its run, plain against zsm-run, from
#                the series tools/run-region-services.sh leaves in $SERVICES_DIR (default
#                build/region-services: <service>-plain.rss.csv, <service>-zsm.rss.csv). Not in
#                `all`; fails, saying how to make them, when there are none.
#   all          waste, utilization, bench and ab; a missing A/B is reported and skipped.
#
# Programs come from $ZSM_BUILD (default build/bench, the build of tools/run-main.sh), which is
# configured the same way if missing, and brought up to date; $ZSM_STATS names a zsm_stats to
# use instead. gnuplot (gnuplot-nox) is installed by tools/setup.sh when missing. PNGs are
# drawn with the pngcairo terminal, or png where gnuplot lacks it.
# Takes under a minute on 2 cores for waste, utilization and ab, about 2 for bench without a
# JSON to read, plus a build of build/bench when it is missing (about 3 minutes).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
what="${1:-}"
out="${2:-$root/build/plots}"
build="${ZSM_BUILD:-$root/build/bench}"
python=/usr/bin/python3

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

# Builds a target in $build, configuring it as tools/run-main.sh does the first time.
build_target() {
  if [ ! -f "$build/CMakeCache.txt" ]; then
    "$root/tools/setup.sh"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_BUILD_TESTS=OFF \
      > /dev/null
  fi
  cmake --build "$build" --target "$1" > /dev/null
}

stats_program() {
  if [ -n "${ZSM_STATS:-}" ]; then
    echo "$ZSM_STATS"
  else
    build_target zsm_stats_cli
    echo "$build/tools/zsm_stats"
  fi
}

# gnuplot -e "VARIABLES" SCRIPT, with the PNG terminal this gnuplot has.
draw() {
  local vars="$1" script="$2" png="$3"
  local term=png
  gnuplot -e "set terminal pngcairo" 2> /dev/null && term=pngcairo
  gnuplot -e "term='$term'; out='$png'; $vars" "$here/plots/$script"
  echo "plot: wrote $png"
}

plot_waste() {
  local stats chain
  stats="$(stats_program)"
  for chain in 4 8 16; do
    "$stats" --class-table --chain="$chain" > "$out/classes-chain$chain.dat"
  done
  draw "dir='$out'" waste.gp "$out/waste.png"
}

plot_utilization() {
  local stats args
  stats="$(stats_program)"
  args="${STATS_ARGS:---sizes=$root/tools/data/churn.sizes --sample-every=50}"
  # shellcheck disable=SC2086  # STATS_ARGS is a list of options
  "$stats" $args --trace="$out/utilization.dat" > "$out/utilization.txt"
  local shown="${args//$root\//}"
  draw "trace='$out/utilization.dat'; title='zsm_stats ${shown//\'/}'" utilization.gp \
    "$out/utilization.png"
}

plot_bench() {
  local json="${BENCH_JSON:-$root/build/bench/results/pair_bench.json}"
  if [ ! -f "$json" ]; then
    echo "plot: no $json (tools/run-main.sh writes it); a short zsm_pair_bench run instead" >&2
    build_target zsm_pair_bench
    json="$out/pair_bench.json"
    if ! "$build/bench/zsm_pair_bench" --benchmark_repetitions=3 --benchmark_min_time=0.05 \
        --benchmark_enable_random_interleaving=true \
        --benchmark_filter='^[a-z_+]+/[a-z]+/[0-9]+$' \
        --benchmark_out="$json" --benchmark_out_format=json > "$out/pair_bench.log" 2>&1; then
      cat "$out/pair_bench.log" >&2
      exit 1
    fi
  fi
  "$python" "$here/plots/bench_dat.py" "$json" "$out/bench.dat"
  draw "data='$out/bench.dat'" bench.gp "$out/bench.png"
}

plot_ab() {
  local results="${AB_RESULTS:-$root/build/ab/results.json}"
  if [ ! -f "$results" ]; then
    echo "plot: no A/B results in $results. Produce them with tools/run-ab.sh (g++ and" \
         "clang-19, 8 sizes: about 9 minutes on 2 cores) or tools/run-ab.sh --quick (one" \
         "size), then run tools/run-plots.sh ab again." >&2
    return 1
  fi
  "$python" "$here/plots/ab_png.py" "$results" "$out" > /dev/null
  echo "plot: wrote $out/ab.png"
}

plot_rocksdb() {
  local dat="${ROCKSDB_DAT:-$out/rocksdb.dat}"
  if [ ! -f "$dat" ]; then
    echo "plot: no $dat: tools/run-rocksdb-bench.sh writes it and draws this plot" >&2
    return 1
  fi
  draw "data='$dat'" rocksdb.gp "$out/rocksdb.png"
}

plot_services() {
  local dir="${SERVICES_DIR:-$root/build/region-services}" series=()
  local f
  for f in "$dir"/*-plain.rss.csv; do
    [ -f "$f" ] && [ -f "${f%-plain.rss.csv}-zsm.rss.csv" ] && series+=("$(basename "${f%-plain.rss.csv}")")
  done
  if [ "${#series[@]}" -eq 0 ]; then
    echo "plot: no RSS series in $dir: tools/run-region-services.sh writes them" >&2
    return 1
  fi
  draw "dir='$dir'; services='${series[*]}'; title='$(head -c 200 "$dir/title.txt" 2> /dev/null | tr -d "'")'" \
    services_rss.gp "$out/services-rss.png"
}

case "$what" in
  waste|utilization|bench|ab|rocksdb|services|all) ;;
  *) usage ;;
esac
command -v gnuplot > /dev/null || "$root/tools/setup.sh"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
case "$what" in
  all)
    plot_waste
    plot_utilization
    plot_bench
    plot_ab || echo "plot: ab skipped" >&2
    ;;
  *) "plot_$what" ;;
esac
