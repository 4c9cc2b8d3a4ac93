#!/usr/bin/env bash
# Runs cuda_probe three ways: as built (plugin next to the core, here with
# no GPU/driver), with the plugin hidden (the core copied alone into an empty
# directory), and with NVFP4_CUDA_PLUGIN=off. Every run must report a clear
# state and NOT_AVAILABLE from the CUDA entry points.
# Usage: cuda_absent.sh PROBE CORE_LIBRARY
set -euo pipefail
probe=$1 core=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== as built"; "$probe"
cp -L "$core" "$tmp/$(basename "$(readlink -f "$core")")"
for link in libNVFP4.so libNVFP4.so.1; do ln -sf "$(basename "$(readlink -f "$core")")" "$tmp/$link"; done
echo "== plugin hidden"; out=$(LD_LIBRARY_PATH="$tmp" "$probe"); echo "$out"
echo "$out" | grep -q "not found\|not built" || { echo "expected the load state to say the plugin is missing"; exit 1; }
echo "== NVFP4_CUDA_PLUGIN=off"; out=$(NVFP4_CUDA_PLUGIN=off "$probe"); echo "$out"
echo "$out" | grep -q "disabled" || exit 1
# The plugin next to the real core file is found when the core is loaded
# through a symlink in another directory.
real=$(readlink -f "$core")
if [ -e "$(dirname "$real")/libNVFP4_cuda.so" ]; then
  mkdir "$tmp/linked"
  for link in libNVFP4.so libNVFP4.so.1; do ln -sf "$real" "$tmp/linked/$link"; done
  echo "== core through a symlink"; out=$(LD_LIBRARY_PATH="$tmp/linked" "$probe"); echo "$out"
  echo "$out" | grep -q "loaded $(dirname "$real")/libNVFP4_cuda.so" || {
    echo "expected the plugin next to the resolved core to be loaded"; exit 1; }
fi
