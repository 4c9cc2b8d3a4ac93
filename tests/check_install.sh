#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a consumer
# through the CMake package (NVFP4::NVFP4) and through pkg-config (nvfp4),
# and one consumer per binding (Python, C#, Rust).
# Usage: check_install.sh BUILD_DIR SOURCE_DIR [CUDA_PLUGIN_BUILT (1|0)]
# Exit 77 (SKIPPED) when a binding's consumer could not run because its tool
# is missing: a skipped consumer is reported, never counted as passed.
set -euo pipefail
build=$1
src=$2
cuda_plugin_built=${3:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=() skipped=()
skip() { echo "SKIPPED: $1"; skipped+=("$1"); }
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(find "$tmp/prefix" -name 'libNVFP4.so' -printf '%h\n' | head -n1)
test -L "$libdir/libNVFP4.so"
# The CUDA plugin is installed next to the core whenever it was built.
case "$cuda_plugin_built" in
  1 | ON | TRUE | true)
    test -f "$libdir/libNVFP4_cuda.so" || { echo "CUDA plugin was built but $libdir/libNVFP4_cuda.so is not installed"; exit 1; }
    echo "installed CUDA plugin: $libdir/libNVFP4_cuda.so"
    passed+=("CUDA plugin installed") ;;
  *) echo "CUDA plugin not built: not expected in the prefix" ;;
esac
soname=$(readelf -d "$libdir/libNVFP4.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "installed SONAME: $soname"
case "$soname" in libNVFP4.so.[0-9]*) ;; *) echo "unexpected SONAME $soname"; exit 1 ;; esac
cmake -S "$src/tests/consumer" -B "$tmp/cmake-consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cmake-consumer/consumer"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$src/tests/consumer/consumer.c" $(pkg-config --cflags --libs nvfp4) -o "$tmp/pc-consumer"
LD_LIBRARY_PATH="$libdir" "$tmp/pc-consumer"
passed+=("C (CMake package)" "C (pkg-config)")
# The installed CLI starts without LD_LIBRARY_PATH (install RPATH).
if [ -x "$tmp/prefix/bin/nvfp4" ]; then
  env -u LD_LIBRARY_PATH "$tmp/prefix/bin/nvfp4" info >/dev/null
  echo "installed nvfp4 CLI runs"
  passed+=("CLI")
fi
# The examples are a standalone CMake project against the installed package.
if [ -d "$src/examples" ] && [ -x "$tmp/prefix/bin/nvfp4" ]; then
  cmake -S "$src/examples" -B "$tmp/examples" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
  cmake --build "$tmp/examples" --target nvfp4-demo -j2 >/dev/null
  LD_LIBRARY_PATH="$libdir" "$tmp/examples/nvfp4-demo" >/dev/null
  echo "examples built and ran against the installed package"
  passed+=("examples")
fi
# Python: the installed package finds <prefix>/lib/libNVFP4.so.1 relative to
# itself: no NVFP4_LIBRARY, no LD_LIBRARY_PATH.
pydir="$tmp/prefix/lib/python3/dist-packages"
test -d "$pydir/nvfp4" || { echo "Python package not installed in $pydir"; exit 1; }
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3  # Debian's, with python3-numpy
if ! command -v "$py" >/dev/null || ! "$py" -c "import numpy" 2>/dev/null; then
  skip "Python consumer ($py with numpy not found; scripts/install-deps.sh installs python3-numpy)"
else
  env -u NVFP4_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$pydir" NVFP4_PREFIX="$tmp/prefix" "$py" -c "
import os, numpy as np, nvfp4
from nvfp4 import _capi
x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
q, s, g = nvfp4.nvfp4_quantize(x)
assert nvfp4.abi_version() >= 1 and q.shape == (2, 16)
path = os.path.realpath(_capi.get()._nvfp4_path)
prefix = os.path.realpath(os.environ['NVFP4_PREFIX'])
assert path.startswith(prefix + os.sep), (path, prefix)
print('python consumer ok, libNVFP4', nvfp4.version_string(), 'from', path)"
  passed+=("Python")
fi
# C#: the installed assembly finds the library next to itself (no LD path).
if ! command -v mcs >/dev/null || ! command -v mono >/dev/null; then
  skip "C# consumer (mcs/mono not found; scripts/install-deps.sh installs mono-mcs mono-runtime)"
elif [ ! -f "$libdir/NVFP4.dll" ]; then
  skip "C# consumer (NVFP4.dll not installed: the build was configured without mcs/mono; reconfigure)"
else
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
  passed+=("C#")
fi
# Rust: the crates built against the installed library found by pkg-config.
if ! command -v cargo >/dev/null; then
  skip "Rust consumer (cargo not found; scripts/install-deps.sh installs Debian cargo)"
else
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
  passed+=("Rust")
fi
echo "passed: $(IFS=,; echo "${passed[*]}")"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "SKIPPED ${#skipped[@]} consumer(s): $(IFS=';'; echo "${skipped[*]}")"
  exit 77
fi
echo "install ok: every consumer built and ran"
