# Debian packages a script needs (sourced): install_missing SCRIPT PKG... installs, with
# apt-get (as root, or through sudo), those of the packages not installed yet, and says which
# in one line headed by SCRIPT's name; with none missing it does nothing.
install_missing() {
  local script="$1" pkg sudo=""
  local -a missing=()
  shift
  for pkg in "$@"; do
    [[ " ${missing[*]} " == *" $pkg "* ]] && continue  # named twice: asked once
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  echo "$script: installing ${missing[*]}"
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
