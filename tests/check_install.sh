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
# The examples are a standalone CMake project against the installed package.
if [ -d "$src/examples" ] && [ -x "$tmp/prefix/bin/nvfp4" ]; then
  cmake -S "$src/examples" -B "$tmp/examples" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
  cmake --build "$tmp/examples" --target nvfp4-demo -j2 >/dev/null
  LD_LIBRARY_PATH="$libdir" "$tmp/examples/nvfp4-demo" >/dev/null
  echo "examples built and ran against the installed package"
fi
# Python: the installed package, no NVFP4_LIBRARY, the library by the loader.
pydir="$tmp/prefix/lib/python3/dist-packages"
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3  # Debian's, with python3-numpy
if [ -d "$pydir/nvfp4" ] && "$py" -c "import numpy" 2>/dev/null; then
  env -u NVFP4_LIBRARY PYTHONPATH="$pydir" LD_LIBRARY_PATH="$libdir" "$py" -c "
import numpy as np, nvfp4
x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
q, s, g = nvfp4.nvfp4_quantize(x)
assert nvfp4.abi_version() >= 1 and q.shape == (2, 16)
print('python consumer ok, libNVFP4', nvfp4.version_string())"
fi
# C#: the installed assembly finds the library next to itself (no LD path).
if [ -f "$libdir/NVFP4.dll" ] && command -v mcs >/dev/null && command -v mono >/dev/null; then
  cat > "$tmp/Consumer.cs" <<'CS'
public static class Consumer {
  public static int Main() {
    NVFP4.Library.Load();
    System.Console.WriteLine("C# consumer ok, libNVFP4 " + NVFP4.Library.VersionString);
    return NVFP4.Library.AbiVersion >= 1 ? 0 : 1;
  }
}
CS
  mcs -nologo -r:"$libdir/NVFP4.dll" -out:"$libdir/Consumer.exe" "$tmp/Consumer.cs"
  env -u LD_LIBRARY_PATH -u NVFP4_LIBRARY mono "$libdir/Consumer.exe"
fi
# Rust: the crates built against the installed library found by pkg-config.
if command -v cargo >/dev/null && [ -f "$src/bindings/rust/Cargo.toml" ]; then
  mkdir -p "$tmp/rust-consumer/src"
  cat > "$tmp/rust-consumer/Cargo.toml" <<TOML
[package]
name = "consumer"
version = "0.1.0"
edition = "2021"
[dependencies]
nvfp4 = { path = "$src/bindings/rust/nvfp4" }
[workspace]
TOML
  cat > "$tmp/rust-consumer/src/main.rs" <<'RS'
fn main() {
    assert!(nvfp4::abi_version() >= 1);
    println!("Rust consumer ok, libNVFP4 {}", nvfp4::version_string());
}
RS
  # (rpaths of a dependency do not reach the consumer binary: the loader path does)
  env -u NVFP4_LIB_DIR PKG_CONFIG_PATH="$libdir/pkgconfig" LD_LIBRARY_PATH="$libdir" CARGO_TARGET_DIR="$tmp/rust-target" \
    cargo run --offline -q -j2 --manifest-path "$tmp/rust-consumer/Cargo.toml"
fi
echo "install ok: CMake package and pkg-config consumers built and ran"
