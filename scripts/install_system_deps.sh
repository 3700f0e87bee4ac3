#!/usr/bin/env bash
# Debian libraries for offscreen MuJoCo rendering (EGL, with OSMesa as fallback).
# Installs only what is missing; needs root (or sudo) the first time.
set -euo pipefail
pkgs=(libegl1 libgl1-mesa-dri libosmesa6)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "robolearn setup: please install ${missing[*]} (offscreen rendering); no apt-get here" >&2
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "robolearn setup: installing ${missing[*]} for offscreen rendering"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
