#!/usr/bin/env bash
# Fails when any C, C++ or CUDA source of the repository is not formatted per
# .clang-format. Usage: scripts/check-format.sh [CLANG_FORMAT]
# (default: clang-format-14, else clang-format). Nothing is modified; to fix,
# run the same file list through `clang-format -i`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cf="${1:-${CLANG_FORMAT:-}}"
if [[ -z "$cf" ]]; then
  if command -v clang-format-14 >/dev/null 2>&1; then cf=clang-format-14; else cf=clang-format; fi
fi
command -v "$cf" >/dev/null 2>&1 || { echo "check-format: $cf not found" >&2; exit 2; }

# Tracked and untracked-but-not-ignored sources; build trees and vendored
# corpora are not sources.
mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard -- \
  '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh' | grep -z -v -E '^(build|third_party)/|/corpus/')
if [[ ${#files[@]} -eq 0 ]]; then echo "check-format: no sources found" >&2; exit 2; fi

echo "check-format: $("$cf" --version | head -n1), ${#files[@]} files"
if ! printf '%s\0' "${files[@]}" | xargs -0 "$cf" --dry-run --Werror --style=file; then
  echo "check-format: FAILED (files above need clang-format -i)" >&2
  exit 1
fi
echo "check-format: OK"
