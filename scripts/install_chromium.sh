#!/usr/bin/env bash
# Installs Debian's chromium for `make browser-test`, unless /usr/bin/chromium is there.
# Playwright drives this system browser: `playwright install` downloads a browser build
# of its own, which this project's machines cannot reach.
set -euo pipefail

chromium=/usr/bin/chromium
if [ -x "$chromium" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make browser-test needs $chromium and this is not a Debian-like system:" \
       "install Chromium with your package manager so that $chromium exists" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "installing Chromium needs root: run make browser-test as root, install sudo," \
       "or run 'apt-get install chromium fonts-liberation' as root first" >&2
  exit 1
fi

echo "installing Debian's chromium for the browser test (apt-get)"
"${as_root[@]}" apt-get update -q
# fonts-liberation: readable text in screenshots without chromium's other recommends.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends chromium fonts-liberation
