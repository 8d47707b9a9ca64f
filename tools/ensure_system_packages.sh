#!/usr/bin/env bash
# Installs the system packages that mmst needs when they are missing and we are root; otherwise says
# which package to install:
#   espeak-ng                  synthetic English speech (the synthetic recipes, test corpora)
#   chromium, chromium-driver  the headless browser test of the mmst-serve page (Selenium)
#   fonts-noto-cjk             Japanese/Chinese captions in that browser (else they render as boxes)
set -u
missing=()
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if command -v fc-list >/dev/null 2>&1; then
  fc-list 2>/dev/null | grep -qi "Noto Sans CJK" || missing+=(fonts-noto-cjk)
elif [ ! -d /usr/share/fonts/opentype/noto ]; then
  missing+=(fonts-noto-cjk)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing system packages: ${missing[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "setup: apt-get install ${missing[*]} failed" >&2; exit 1; }
else
  echo "setup: WARNING: missing system package(s): ${missing[*]}." >&2
  echo "setup: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}); the synthetic recipes need" \
       "espeak-ng, the browser test of mmst-serve needs chromium and chromium-driver (it skips without them)." >&2
fi
