# Sourced by the scripts that install a test or bench tool from Debian/Ubuntu packages (install-wrk.sh,
# install-faketime.sh): one way to ask for root and to call apt-get.

# apt_install SCRIPT PACKAGE HINT: install PACKAGE quietly as root; otherwise say how (HINT) and exit 1.
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$1: run as root (or: $3)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}
