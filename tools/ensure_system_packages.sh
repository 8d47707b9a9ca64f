#!/usr/bin/env bash
# Installs the system packages that the recipes need (espeak-ng, for synthetic English speech)
# when they are missing and we are root; otherwise says which package to install.
set -u
missing=()
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing system packages: ${missing[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "setup: apt-get install ${missing[*]} failed" >&2; exit 1; }
else
  echo "setup: WARNING: missing system package(s): ${missing[*]}." >&2
  echo "setup: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}); the synthetic recipes need espeak-ng." >&2
fi
