#!/usr/bin/env bash
# Compares the dynamic symbols a shared library defines with the ABI list.
# Usage: check_exports.sh LIBRARY SYMBOL_LIST
set -euo pipefail
lib=$1
list=$2
actual=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
expected=$(grep -v '^#' "$list" | sed '/^$/d' | sort -u)
if [ "$actual" != "$expected" ]; then
  echo "exported symbols differ from $list (< expected, > actual):"
  diff <(echo "$expected") <(echo "$actual") || true
  exit 1
fi
bad=$(echo "$actual" | grep -Ev '^(NVFP4_|NF4_|MXFP4_|Q4_)' || true)
if [ -n "$bad" ]; then
  echo "symbols outside the public prefixes: $bad"
  exit 1
fi
echo "exports ok: $(echo "$actual" | wc -l) symbols, all NVFP4_/NF4_/MXFP4_/Q4_"
