#!/usr/bin/env bash
# The CPU backend's memory figures where /proc/meminfo cannot be read (seen in
# a GPU machine's VM): the file is masked by an empty one in a mount
# namespace of this test's own, and the backend test case runs there.
#   without_meminfo.sh RUNTIME_TESTS
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: masking /proc/meminfo needs root (a mount namespace)"; exit 77; }
exec unshare --mount --propagation private -- bash -c '
  set -e
  mount --bind /dev/null /proc/meminfo
  if [ -n "$(head -c 1 /proc/meminfo)" ]; then echo "/proc/meminfo is still readable"; exit 1; fi
  exec "$1" "-tc=the CPU backend allocates*reports memory"' without_meminfo "$1"
