# Sourced first by every tools/*.sh: -h or --help among the arguments (before a lone --)
# prints the script's header comment, which says what it does, its options and how long it
# takes on 2 cores, and exits 0, before any set-up, build or file written.
usage_if_asked() {
  local script="$1" arg
  shift
  for arg in "$@"; do
    [ "$arg" = "--" ] && return 0
    if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script"
      exit 0
    fi
  done
}
