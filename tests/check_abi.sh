#!/usr/bin/env bash
# Compares the built library with the ABI baseline (abidw dump in abi/).
# Fails on any incompatible change (removed/changed function, changed type
# layout); additions are allowed. Usage: check_abi.sh ABIDIFF BASELINE LIB HEADERS
set -uo pipefail
abidiff=$1 baseline=$2 lib=$3 headers=$4
out=$("$abidiff" --no-added-syms --exported-interfaces-only --headers-dir2 "$headers" "$baseline" "$lib" 2>&1)
rc=$?
# abidiff exit status bits: 1 error, 2 usage, 4 ABI change, 8 incompatible change.
if [ $((rc & 11)) -ne 0 ] || { [ $((rc & 4)) -ne 0 ] && grep -qE "(function|variable)s? (removed|changed)|[1-9][0-9]* Changed" <<<"$out"; }; then
  echo "ABI differs from $baseline (exit $rc):"
  echo "$out"
  exit 1
fi
echo "ABI matches the baseline $(basename "$baseline") (abidiff exit $rc)"
