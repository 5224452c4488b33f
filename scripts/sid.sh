#!/usr/bin/env bash
# Usage: scripts/sid.sh COMMAND...   (as root; `make sid-test`, `make sid-wheel-check`, `make sid-cpython-suite`)
#
# Runs COMMAND with the Pythons pyenv does not give us (Debian sid's python3.14 and python3.15, their
# venv modules and CPython's own test suites), in a Debian sid root made once with debootstrap and
# kept at $SID_ROOT between runs; the checkout is at /nbmp there and COMMAND starts in it.
#
# Every mount lives in a private mount namespace (unshare) that ends with the command however it
# ends -- an error, a signal, a SIGKILL -- so none is ever left behind, and none is visible outside,
# so removing the root (`make sid-clean`) can never reach the checkout or /dev through one.
set -euo pipefail

ROOT=${SID_ROOT:-/var/cache/nbmp-sid}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=http://deb.debian.org/debian
# make for `make test` inside; ca-certificates for pip's HTTPS.
PACKAGES=python3.14,python3.14-venv,libpython3.14-testsuite,python3.15,python3.15-venv,libpython3.15-testsuite,make,ca-certificates

die() { echo "scripts/sid.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot): run it as root"
[ $# -gt 0 ] || die "no command given (usage: scripts/sid.sh COMMAND...)"

# A directory is removed only when nothing is mounted at or under it in this namespace.
remove() {
  if findmnt -rn -o TARGET | grep -q -e "^$1\$" -e "^$1/"; then
    die "$1 has something mounted in it; unmount it first (not removing it)"
  fi
  rm -rf --one-file-system "$1"
}

build() {
  command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }
  remove "$ROOT.new"
  echo "scripts/sid.sh: building a Debian sid root in $ROOT (once; a few minutes)" >&2
  # debootstrap mounts /proc and /sys in the root while it configures; its own namespace ends those too.
  unshare --mount --propagation private \
    debootstrap --variant=minbase --include="$PACKAGES" sid "$ROOT.new" "$MIRROR"
  echo "$PACKAGES" > "$ROOT.new/.nbmp-packages"
  if [ -e "$ROOT" ]; then mv "$ROOT" "$ROOT.old" && remove "$ROOT.old"; fi
  mv "$ROOT.new" "$ROOT"  # a half-built root is never taken for a finished one
}

if [ "${1-}" = --clean ]; then remove "$ROOT"; exit 0; fi
[ "$(cat "$ROOT/.nbmp-packages" 2>/dev/null)" = "$PACKAGES" ] || build
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

# Only what the command needs crosses into the root: the host's PATH and pyenv mean nothing there.
# OPENBLAS_* are set on processors where older OpenBLAS builds crash without them.
env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
     TERM="${TERM:-dumb}" CI="${CI:-}" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
     PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
for var in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE MAKEFLAGS PYTEST_ADDOPTS; do
  [ -z "${!var+x}" ] || env+=("$var=${!var}")
done

exec unshare --mount --propagation private -- bash -euc '
  root=$1; checkout=$2; shift 2
  mkdir -p "$root/nbmp"
  mount --bind /proc "$root/proc"
  mount --bind /sys "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/shm "$root/dev/shm"  # the leak guard counts segments where the host keeps them
  mount --bind /dev/pts "$root/dev/pts"
  mount -t tmpfs tmpfs "$root/tmp"
  mount --bind "$checkout" "$root/nbmp"
  # the machine trust store: where HTTPS to the registries is relayed, it holds the relay CA
  mount --bind -o ro /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  exec chroot "$root" /usr/bin/env -i "$@"
' sid "$ROOT" "$CHECKOUT" "${env[@]}" /bin/sh -c 'cd /nbmp && exec "$@"' sh "$@"
