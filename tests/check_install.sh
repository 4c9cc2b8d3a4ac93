#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a consumer
# through the CMake package (NVFP4::NVFP4) and through pkg-config (nvfp4).
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(find "$tmp/prefix" -name 'libNVFP4.so' -printf '%h\n' | head -n1)
test -L "$libdir/libNVFP4.so"
soname=$(readelf -d "$libdir/libNVFP4.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "installed SONAME: $soname"
case "$soname" in libNVFP4.so.[0-9]*) ;; *) echo "unexpected SONAME $soname"; exit 1 ;; esac
cmake -S "$src/tests/consumer" -B "$tmp/cmake-consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cmake-consumer/consumer"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$src/tests/consumer/consumer.c" $(pkg-config --cflags --libs nvfp4) -o "$tmp/pc-consumer"
LD_LIBRARY_PATH="$libdir" "$tmp/pc-consumer"
# The installed CLI starts without LD_LIBRARY_PATH (install RPATH).
if [ -x "$tmp/prefix/bin/nvfp4" ]; then
  env -u LD_LIBRARY_PATH "$tmp/prefix/bin/nvfp4" info >/dev/null
  echo "installed nvfp4 CLI runs"
fi
echo "install ok: CMake package and pkg-config consumers built and ran"
