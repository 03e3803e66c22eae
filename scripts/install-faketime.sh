#!/usr/bin/env bash
# Install libfaketime (Debian/Ubuntu's `faketime`), which the quota's clock test preloads into one webhook replica
# to move its clocks (tests/realkube/test_quota_clock.py), when it is missing (needs root); print the library's path.
set -euo pipefail
# shellcheck source=scripts/lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
lib=/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1
if [ ! -f "$lib" ]; then
  apt_install install-faketime faketime "sudo apt-get install faketime"
fi
echo "$lib"
