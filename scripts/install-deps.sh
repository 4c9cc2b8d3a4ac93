#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need. Idempotent and
# quiet; uses sudo only when not already root.
set -euo pipefail
packages=(cmake g++ clang make pkg-config catch2 nlohmann-json3-dev binutils valgrind abigail-tools python3-numpy libcli11-dev)
# --cross: the aarch64 cross toolchain and qemu-user for the NEON tests.
if [ "${1:-}" = "--cross" ]; then
  packages=(g++-aarch64-linux-gnu qemu-user)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
