#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy over src/, the host C++
# of cuda/ (.cpp) and tools/, using BUILD_DIR/compile_commands.json
# (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; every preset does).
#
# .cu files are not analysed: clang 14 cannot parse the CUDA 13 headers. The
# CUDA plugin's host logic (lt_objects.h, workspace_pool.h, managed_copy.h,
# seams.h) is header-only in src/plugin/ for that reason, included only by
# the .cu files and by tests/test_cuda_seams.cpp; that test is analysed as
# the carrier of those headers. Only findings located in src/, cuda/ or
# tools/ are reported (the carrier's own code is test code and is not
# linted); a compiler error is reported wherever it is, since it means a
# file was not analysed.
#
# Two files at a time. Prints each finding once (a header seen from several
# translation units is reported once), then a count per check, and fails on
# any finding.
#
# --only PATHSPEC (repeatable) restricts the files to those git pathspecs:
# .ci/run lints the aarch64 cross build's NEON translation units this way
# (the x86 database does not compile them; clang-tidy takes the target from
# the cross compiler's name in that database).
#
# Usage: scripts/run-clang-tidy.sh BUILD_DIR [--only PATHSPEC]... [CLANG_TIDY]
set -euo pipefail

usage="usage: $0 BUILD_DIR [--only PATHSPEC]... [CLANG_TIDY]"
if [[ $# -lt 1 ]]; then echo "$usage" >&2; exit 2; fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "$1" && pwd)"
shift
only=()
ct=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) [[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }; only+=("$2"); shift 2 ;;
    *) ct="$1"; shift ;;
  esac
done
ct="${ct:-${CLANG_TIDY:-}}"
if [[ -z "$ct" ]]; then
  if command -v clang-tidy-14 >/dev/null 2>&1; then ct=clang-tidy-14; else ct=clang-tidy; fi
fi
command -v "$ct" >/dev/null 2>&1 || { echo "run-clang-tidy: $ct not found" >&2; exit 2; }
db="$build/compile_commands.json"
[[ -f "$db" ]] || { echo "run-clang-tidy: $db missing (configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 2; }

cd "$root"
# tests/test_cuda_seams.cpp: the carrier of the header-only src/plugin/*.h.
if [[ ${#only[@]} -eq 0 ]]; then only=('src/*.cpp' 'cuda/*.cpp' 'tools/*.cpp' tests/test_cuda_seams.cpp); fi
mapfile -t wanted < <(git ls-files --cached --others --exclude-standard -- "${only[@]}" | sort)
# Only files the build compiles have flags; list the others (e.g. an ISA
# variant this machine's build leaves out) instead of guessing flags.
mapfile -t files < <(python3 - "$db" "$root" "${wanted[@]}" <<'PY'
import json, os, sys
db, root, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
known = {os.path.realpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}
for f in wanted:
    p = os.path.realpath(os.path.join(root, f))
    print(p if p in known else "SKIP " + f)
PY
)
todo=()
for f in "${files[@]}"; do
  if [[ "$f" == SKIP\ * ]]; then echo "run-clang-tidy: not in compile_commands.json, skipped: ${f#SKIP }"; else todo+=("$f"); fi
done
[[ ${#todo[@]} -gt 0 ]] || { echo "run-clang-tidy: nothing to check" >&2; exit 2; }
# Largest files first (size as a proxy for analysis time: the CLI, the
# AVX-512 kernels and the seams test take 60-90 s each), so that the two
# workers do not end on one long file while the other idles.
mapfile -t todo < <(for f in "${todo[@]}"; do printf '%s\t%s\n' "$(stat -c %s "$f")" "$f"; done | sort -rn | cut -f2-)

# The ISA kernel files (src/kernels/<level>/) get the static analyzer's
# shallow mode (less inlining across calls, fewer paths): in its deep
# default, kernels_avx512.cpp alone took 208 s of the 913 s of CPU time
# the whole set took (its unrolled intrinsic templates), 30 s shallow, and
# 16 s with no analyzer at all; every other check runs on them as on any
# file. The tools (tools/: the CLI and the benchmark, which are not the
# library) get it too: the CLI took 95 s deep and 56 s shallow, the
# benchmark 41 s and 25 s, mostly the analyzer inlining CLI11 and the
# benchmark's probes. The library's other files and the plugin carrier test
# keep the deep mode.
shallow='/src/kernels/(avx2|avx_vnni|avx512|avx512_vnni|neon|neon_dotprod|neon_i8mm)/|/tools/'

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "run-clang-tidy: $("$ct" --version | grep -m1 -o 'version [0-9.]*'), ${#todo[@]} files, -j2"
# GCC-only warning flags in the database are not clang's business.
printf '%s\0' "${todo[@]}" | xargs -0 -P2 -I{} sh -c '
  mode=""
  if echo "$3" | grep -Eq "$5"; then
    mode="--extra-arg=-Xclang --extra-arg=-analyzer-config --extra-arg=-Xclang --extra-arg=mode=shallow"
  fi
  "$1" -p "$2" --quiet --extra-arg=-Wno-unknown-warning-option $mode "$3" >"$4/$(echo "$3" | tr / _).log" 2>&1 || true' \
  _ "$ct" "$build" {} "$out" "$shallow"

# A finding is "path:line:col: warning|error: text [check]"; deduplicate.
# Warnings count only in the repository's src/, cuda/ and tools/ (not in the
# carrier test's own code); errors count wherever they are.
cat "$out"/*.log | grep -E '^/.*:[0-9]+:[0-9]+: (warning|error): ' | sort -u >"$out/all" || true
awk -v r="$root/" -v f="$out/findings" -v o="$out/other" '
  index($0, r "src/") == 1 || index($0, r "cuda/") == 1 || index($0, r "tools/") == 1 || /:[0-9]+:[0-9]+: error: / { print > f; next }
  { print > o }' "$out/all"
if [[ -s "$out/other" ]]; then
  echo "run-clang-tidy: $(wc -l <"$out/other") findings outside src/, cuda/ and tools/ not reported"
fi
if [[ -s "$out/findings" ]]; then
  sed "s|^$root/||" "$out/findings"
  echo
  echo "findings per check:"
  sed -E 's/.*\[([^]]+)\]$/\1/; t; s/.*/(compiler error)/' "$out/findings" | sort | uniq -c | sort -rn
  echo "run-clang-tidy: FAILED, $(wc -l <"$out/findings") findings"
  exit 1
fi
echo "run-clang-tidy: OK, no findings"
