#!/usr/bin/env bash
# Installs the Debian packages a make target needs when they are missing and we are root; otherwise says
# which packages to install.
#   bash tools/ensure_system_packages.sh demo   espeak-ng (synthetic English speech: the recipes, test corpora)
#   bash tools/ensure_system_packages.sh test   espeak-ng, and for the headless browser test of the mmst-serve
#                                               page: chromium, chromium-driver and fonts-noto-cjk (the page's
#                                               Japanese and Chinese captions)
set -u
target="${1:-demo}"
case "$target" in
  demo|test) ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
installed() {  # installed PACKAGE: the Debian package is installed
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=()
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
if [ "$target" = "test" ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  # fonts-noto-cjk: Japanese/Chinese captions in that browser (else they render as boxes)
  if command -v fc-list >/dev/null 2>&1; then
    fc-list 2>/dev/null | grep -qi "Noto Sans CJK" || missing+=(fonts-noto-cjk)
  elif command -v dpkg-query >/dev/null 2>&1; then
    installed fonts-noto-cjk || missing+=(fonts-noto-cjk)
  elif [ ! -d /usr/share/fonts/opentype/noto ]; then
    missing+=(fonts-noto-cjk)
  fi
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing system packages for make $target: ${missing[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "setup: apt-get install ${missing[*]} failed" >&2; exit 1; }
else
  echo "setup: WARNING: missing system package(s) for make $target: ${missing[*]}." >&2
  echo "setup: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}); the synthetic recipes need" \
       "espeak-ng, the browser test of mmst-serve needs chromium, chromium-driver and fonts-noto-cjk (it skips" \
       "without the browser)." >&2
fi
