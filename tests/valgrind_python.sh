#!/usr/bin/env bash
# Valgrind memcheck of the Python package's smoke test
# (tests/python/test_python_binding.py run as a script: it imports the nvfp4
# package from bindings/python and prints "python binding ok"). CPython and NumPy report
# their own (definite) leaks at exit; this fails only when an error or a
# definite leak has a libNVFP4 frame in its stack.
# Usage: valgrind_python.sh VALGRIND PYTHON TEST LIBRARY
set -uo pipefail
vg=$1 py=$2 test=$3 lib=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
PYTHONMALLOC=malloc NVFP4_LIBRARY=$lib "$vg" --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite --num-callers=40 "$py" "$test" >"$log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then echo "SKIPPED: numpy missing"; exit 77; fi
# Split the log into records and keep those that mention the library.
ours=$(awk 'BEGIN{RS="==[0-9]+== \n"} /libNVFP4|q4::|NVFP4_|NF4_|Q4_/ && /(Invalid|uninitialised|Conditional jump|definitely lost)/' "$log")
grep -E "ERROR SUMMARY|definitely lost:" "$log"
if [ -n "$ours" ]; then
  echo "valgrind found problems in libNVFP4:"; echo "$ours"; exit 1
fi
grep -q "python binding ok" "$log" || { echo "binding test did not pass"; cat "$log"; exit 1; }
echo "valgrind: no errors and no definite leaks in libNVFP4 frames"
