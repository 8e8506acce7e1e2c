# zsm-run for the scripts that run programs under it (sourced): the launcher built where none
# is given, and copies of it and its preload library that every user can run.

# default_zsm_run ROOT: zsm-run and its library built in $ZSM_BUILD (default ROOT/build/release,
# configured when missing); prints the launcher's path.
default_zsm_run() {
  local build="${ZSM_BUILD:-$1/build/release}"
  cmake -S "$1" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target zsm_run zsm_region_preload >/dev/null
  echo "$build/tools/region_preload/zsm-run"
}

# stage_for_others DIR LAUNCHER [FILE...]: copies of the launcher, its library (beside it, or in
# ../lib when installed) and the files given, mode 755, into DIR (made mode 755): a clone
# under /root is out of another user's reach.
stage_for_others() {
  local dir="$1" launcher="$2"
  shift 2
  local library
  library="$(dirname "$launcher")/libzsm_region_preload.so"
  [ -f "$library" ] || library="$(dirname "$launcher")/../lib/libzsm_region_preload.so"
  mkdir -p "$dir"
  cp "$launcher" "$library" "$@" "$dir/"
  chmod 755 "$dir" "$dir"/*
}
