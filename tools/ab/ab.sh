#!/usr/bin/env bash
# In-process A/B of one kernel table: a base revision's table against the
# working tree's, in one program (tools/ab/ab_kernels.cpp says what it runs
# and prints).
#
#   tools/ab/ab.sh build [--table avx2] [--base HEAD] [--build-dir build/release] [-- FLAGS...]
#   tools/ab/ab.sh run N OP M N K hot|dram [reps] [threads]
#   tools/ab/ab.sh rate
#
# build: compiles the table's source file (src/kernels/T/kernels_T.cpp) twice
# with the flags the build directory used for it: from a snapshot of src/ at
# --base (its T_table() renamed T_table_old(), other T_table*() likewise)
# and from the working tree
# (FLAGS after -- are added there only, e.g. -DEXPERIMENT), and links both
# with the harness and the build directory's other kernel and common
# objects (build the library first). kernel_table.h is the working tree's on
# both sides: KernelTable's layout must be one in a program, so a base whose
# table sets a field that no longer exists does not build. Everything else
# the base's table file includes is the base's.
# run: runs the harness N times and prints each run's JSON and the median
# speed (new / old; above 1: the working tree is faster), with whether
# every run gave the same bits.
# rate: builds and runs tools/ab/issue_rate.cpp (x86-64, AVX2): the ymm
# operations a cycle the core issues now, to tell a quiet host from a busy
# one before measuring.
#
# Work files go to $AB_DIR (default /tmp/nvfp4-ab). Example, the NVFP4 GEMV
# at M = 1 from DRAM, 5 runs:
#   tools/ab/ab.sh build && tools/ab/ab.sh run 5 gemv-nvfp4 1 11008 4096 dram
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${AB_DIR:-/tmp/nvfp4-ab}

usage() {
  sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift

if [ "$cmd" = build ]; then
  table=avx2 base=HEAD build="$root/build/release"
  extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --table) table=$2; shift 2 ;;
      --base) base=$2; shift 2 ;;
      --build-dir) build=$(cd "$2" && pwd); shift 2 ;;
      --) shift; extra=("$@"); break ;;
      *) usage ;;
    esac
  done
  src="src/kernels/$table/kernels_$table.cpp"
  [ -f "$root/$src" ] || { echo "ab.sh: no $src" >&2; exit 2; }
  [ -f "$build/compile_commands.json" ] || { echo "ab.sh: no $build/compile_commands.json (configure and build first)" >&2; exit 2; }
  # The compiler and the flags the build used for the table's file (without
  # -o/-c, the file and -Werror), one per line, the compiler first.
  cmdline=$(/usr/bin/python3 - "$build/compile_commands.json" "$root/$src" <<'EOF2'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        args = e.get("arguments") or shlex.split(e["command"])
        out, skip = [args[0]], False
        for a in args[1:]:
            if skip:
                skip = False
            elif a in ("-o", "-c"):
                skip = True
            elif a not in (sys.argv[2], "-Werror"):
                out.append(a)
        print("\n".join(out))
        break
else:
    sys.exit("ab.sh: the table's file is not in compile_commands.json")
EOF2
  )
  mapfile -t flags <<<"$cmdline"
  cxx=${flags[0]}
  flags=("${flags[@]:1}")
  rm -rf "$dir/base" && mkdir -p "$dir/base"
  (cd "$root" && git archive "$base" src) | tar -x -C "$dir/base"
  cp "$root/src/kernels/kernel_table.h" "$dir/base/src/kernels/kernel_table.h"
  # (every T_table*() of the snapshot gets _old: T_table() and any variant
  # accessor such as avx512_vnni_table_decode(), which the working tree's
  # file defines too)
  sed "s/\b\(${table}_table[A-Za-z0-9_]*\)(/\1_old(/g" "$dir/base/$src" > "$dir/old.cpp"
  # (the base's headers first: its own "..." includes resolve there)
  "$cxx" -I"$dir/base/src" "${flags[@]}" -c "$dir/old.cpp" -o "$dir/old.o"
  "$cxx" "${flags[@]}" "${extra[@]}" -c "$root/$src" -o "$dir/new.o"
  "$cxx" "${flags[@]}" -DAB_TABLE="$table" -c "$root/tools/ab/ab_kernels.cpp" -o "$dir/ab_kernels.o"
  mapfile -t objs < <(find "$build/CMakeFiles/nvfp4_kernels.dir" "$build/CMakeFiles/nvfp4_common.dir" -name '*.o' |
    grep -v "/kernels_$table.cpp.o$" | sort)
  "$cxx" -o "$dir/ab_kernels" "$dir/ab_kernels.o" "$dir/old.o" "$dir/new.o" "${objs[@]}" -lpthread -ldl
  echo "ab.sh: built $dir/ab_kernels ($table table: $(cd "$root" && git rev-parse --short "$base") against the working tree)"
elif [ "$cmd" = run ]; then
  [ $# -ge 6 ] || usage
  runs=$1
  shift
  [ -x "$dir/ab_kernels" ] || { echo "ab.sh: build first" >&2; exit 2; }
  for _ in $(seq "$runs"); do "$dir/ab_kernels" "$@" || true; done | tee "$dir/last.jsonl" |
    /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
for r in rows: print(json.dumps(r))
if not rows: sys.exit("no run finished")
s = sorted(r["speed"] for r in rows)
print("median speed new/old %.3f (runs: %s); same bits: %s" % (s[len(s) // 2], " ".join("%.3f" % v for v in s),
      all(r["same_bits"] for r in rows)))'
elif [ "$cmd" = rate ]; then
  mkdir -p "$dir"
  g++ -O2 -mavx2 -mfma -o "$dir/issue_rate" "$root/tools/ab/issue_rate.cpp"
  "$dir/issue_rate"
else
  usage
fi
