#!/usr/bin/env bash
# Runs cuda_probe three ways: as built (plugin next to the core, here with
# no GPU/driver), with the plugin hidden (the core copied alone into an empty
# directory), with NVFP4_CUDA_PLUGIN=off, through a symlinked core, and with
# NVFP4_CUDA_PLUGIN naming files that are not plugins (only that file tried,
# named in the load state). Every run must report a clear state and
# NOT_AVAILABLE from the CUDA entry points.
# Usage: cuda_absent.sh PROBE CORE_LIBRARY
# (Checks read the output from here-strings, not `echo | grep -q`: under
# pipefail grep -q's early exit can kill echo with SIGPIPE and fail the
# check although it matched — a CI run under load did.)
set -euo pipefail
probe=$1 core=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== as built"; "$probe"
cp -L "$core" "$tmp/$(basename "$(readlink -f "$core")")"
for link in libNVFP4.so libNVFP4.so.1; do ln -sf "$(basename "$(readlink -f "$core")")" "$tmp/$link"; done
echo "== plugin hidden"; out=$(LD_LIBRARY_PATH="$tmp" "$probe"); echo "$out"
grep -q "not found\|not built" <<<"$out" || { echo "expected the load state to say the plugin is missing"; exit 1; }
echo "== NVFP4_CUDA_PLUGIN=off"; out=$(NVFP4_CUDA_PLUGIN=off "$probe"); echo "$out"
grep -q "disabled" <<<"$out" || exit 1
# The plugin next to the real core file is found when the core is loaded
# through a symlink in another directory.
real=$(readlink -f "$core")
if [ -e "$(dirname "$real")/libNVFP4_cuda.so" ]; then
  mkdir "$tmp/linked"
  for link in libNVFP4.so libNVFP4.so.1; do ln -sf "$real" "$tmp/linked/$link"; done
  echo "== core through a symlink"; out=$(LD_LIBRARY_PATH="$tmp/linked" "$probe"); echo "$out"
  grep -q "loaded $(dirname "$real")/libNVFP4_cuda.so" <<<"$out" || {
    echo "expected the plugin next to the resolved core to be loaded"; exit 1; }
fi
# NVFP4_CUDA_PLUGIN=<file> overrides the search: that file is the only one
# tried (not the plugin next to the core), and its failure is reported in
# native_load_state (Q4_get_capabilities) and nativeLoadState (diagnostics).
printf 'not a shared library\n' > "$tmp/not_a_plugin.so"
cp -L "$core" "$tmp/elf_without_entry.so"   # a real library without the plugin entry point
for bogus in "$tmp/not_a_plugin.so" "$tmp/elf_without_entry.so"; do
  echo "== NVFP4_CUDA_PLUGIN=$bogus"; out=$(NVFP4_CUDA_PLUGIN="$bogus" "$probe"); echo "$out"
  state=$(echo "$out" | sed -n 's/^cuda_state=.*native_load_state: //p')
  grep -q "not found or not loadable: \[$bogus: " <<<"$state" || {
    echo "expected the load state to name $bogus"; exit 1; }
  tried=$(echo "$state" | grep -o '\[[^]:]*:' | sort -u)
  [ "$tried" = "[$bogus:" ] || { echo "expected $bogus to be the only file tried, got: $tried"; exit 1; }
  grep -q "^cuda_state=[01] " <<<"$out" || { echo "expected Q4_CUDA_NOT_LOADED (or NOT_BUILT)"; exit 1; }
done
# The same state through a session's JSON diagnostics (Python binding, when
# /usr/bin/python3 with numpy is there, and the library is not built with a
# sanitizer, whose runtime an uninstrumented interpreter cannot load).
src=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${NVFP4_SANITIZED:-}" ]; then
  echo "SKIPPED: session diagnostics check (sanitizer build: python3 cannot load the instrumented library)"
elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  bogus="$tmp/not_a_plugin.so"
  echo "== diagnostics with NVFP4_CUDA_PLUGIN=$bogus"
  NVFP4_CUDA_PLUGIN="$bogus" NVFP4_LIBRARY="$core" PYTHONPATH="$src/bindings/python" BOGUS="$bogus" \
    /usr/bin/python3 -c "
import os, re, nvfp4
bogus = os.environ['BOGUS']
for where, state in (('capabilities', nvfp4.capabilities().native_load_state),
                     ('session diagnostics', nvfp4.Session().diagnostics()['nativeLoadState'])):
    print(where + ':', state)
    assert ('[' + bogus + ': ') in state, state
    assert re.findall(r'\[([^]:]*):', state) == [bogus], state
"
else
  echo "SKIPPED: session diagnostics check (/usr/bin/python3 with numpy not found)"
fi
