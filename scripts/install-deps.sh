#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need. Idempotent and
# quiet; uses sudo only when not already root.
set -euo pipefail
packages=(cmake g++ clang make pkg-config catch2 nlohmann-json3-dev binutils valgrind abigail-tools libcli11-dev
  clang-format clang-tidy libopenblas-dev
  python3-numpy python3-pytest python3-torch  # the Python binding's tests (Debian's python3)
  mono-mcs mono-runtime)                      # the .NET binding, built with mcs, tested with mono
# rustc/cargo usually come with the machine image (rustup); when no `cargo` is
# on PATH, Debian's cargo (with rustc) is installed for the Rust binding, which
# needs no crates. (Note: the workspace declares rust-version 1.77; an older
# Debian rustc makes rust_binding fail visibly, it is not skipped.)
if ! command -v cargo >/dev/null 2>&1; then
  packages+=(cargo)
fi
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
