#!/usr/bin/env python3
"""Which vector pipes ymm operations share (x86-64 with AVX2, FMA, F16C).

Generates, compiles (g++) and runs a program that times loops of
independent ymm operations of one or more kinds, interleaved, and prints
how many of them a core cycle issues. Two kinds that together issue as
many a cycle as each alone share their pipes; two that add up use
different ones (docs/performance.md, fifty-ninth session, has this Zen 4's
map). Each mix is timed against a dependent vpaddd chain (one cycle a
link) measured right before and right after it, so that a clock that
moves during the run does not skew the ratio; on a shared VM, run it more
than once (a busy neighbour lowers every figure).

    python3 tools/ab/pipe_pairs.py mul mul+and mul+shufb shufb+slld
    N=20 python3 tools/ab/pipe_pairs.py mul+unpck+slld+and+mul+shufb

A mix is kinds joined by '+'; the loop holds N operations (default 8)
taking the kinds in turn. Kinds: see KINDS below. Every kind but fma is
independent of the others; an FMA always reads its destination, so fma
forms one chain per destination register and, in a mix with fewer than
about 8 of them per loop, measures its latency (4 cycles) instead of its
pipes: use mul for the FMA pipes.
"""
import os
import subprocess
import sys
import tempfile

# Each kind writes ymm{d}; sources are ymm14 / ymm15 (or the stack for the
# memory forms), so no operation waits for another.
KINDS = {
    "fma": "vfmadd231ps %ymm14, %ymm15, %ymm{d}",  # (accumulates into d: a chain per register)
    "mul": "vmulps %ymm14, %ymm15, %ymm{d}",
    "addps": "vaddps %ymm14, %ymm15, %ymm{d}",
    "mubs": "vpmaddubsw %ymm14, %ymm15, %ymm{d}",
    "shufb": "vpshufb %ymm14, %ymm15, %ymm{d}",
    "slld": "vpslld $16, %ymm15, %ymm{d}",
    "srlw": "vpsrlw $4, %ymm15, %ymm{d}",
    "and": "vpand %ymm14, %ymm15, %ymm{d}",
    "addw": "vpaddw %ymm14, %ymm15, %ymm{d}",
    "addd": "vpaddd %ymm14, %ymm15, %ymm{d}",
    "madd": "vpmaddwd %ymm14, %ymm15, %ymm{d}",
    "mubsm": "vpmaddubsw (%rsp), %ymm15, %ymm{d}",
    "unpck": "vpunpcklbw %ymm14, %ymm15, %ymm{d}",
    "unpwd": "vpunpcklwd %ymm14, %ymm15, %ymm{d}",
    "permil": "vpermilps $0x55, %ymm15, %ymm{d}",
    "blendw": "vpblendw $0xaa, %ymm14, %ymm15, %ymm{d}",
    "blendd": "vpblendd $0xaa, %ymm14, %ymm15, %ymm{d}",
    "pmovzx": "vpmovzxbd %xmm15, %ymm{d}",
    "cvt": "vcvtdq2ps %ymm15, %ymm{d}",
    "cvtph": "vcvtph2ps %xmm15, %ymm{d}",
    "ld": "vmovdqu (%rsp), %ymm{d}",
    "bcstd": "vpbroadcastd (%rsp), %ymm{d}",
    "bcstss": "vbroadcastss (%rsp), %ymm{d}",
}

REGS = 12  # ymm0 .. ymm11 as destinations


def program(mixes, n):
    out = [
        "#include <x86intrin.h>",
        "#include <cstdint>",
        "#include <cstdio>",
        "template <class B> double ticks(B b, int ops) {",
        "  double best = 1e300;",
        "  for (int r = 0; r < 7; ++r) {",
        "    const uint64_t t0 = __rdtsc();",
        "    for (long i = 0; i < 200000; ++i) b();",
        "    const double t = double(__rdtsc() - t0) / (double(ops) * 200000);",
        "    if (t < best) best = t;",
        "  }",
        "  return best;",
        "}",
        "int main() {",
        "  _mm_setcsr(_mm_getcsr() | 0x8040u);  // (FTZ/DAZ: the operands are arbitrary bits)",
        '  auto cycle = [] { return ticks([] { asm volatile("'
        + "vpaddd %%ymm0, %%ymm0, %%ymm0\\n\\t" * 12
        + '" ::: "xmm0"); }, 12); };',
    ]
    clobbers = ", ".join('"xmm%d"' % r for r in range(REGS))
    for mix in mixes:
        kinds = mix.split("+")
        body = "\\n\\t".join(
            KINDS[kinds[i % len(kinds)]].replace("%", "%%").replace("{d}", str(i % REGS)) for i in range(n)
        )
        out.append(
            '  { const double c0 = cycle(); const double t = ticks([] { asm volatile("%s" ::: %s); }, %d);'
            ' std::printf("%%-40s %%.2f a cycle\\n", "%s", 0.5 * (c0 + cycle()) / t); }' % (body, clobbers, n, mix)
        )
    out.append("}")
    return "\n".join(out) + "\n"


def main():
    mixes = sys.argv[1:]
    if not mixes or any(k not in KINDS for m in mixes for k in m.split("+")):
        sys.exit(__doc__ + "\nkinds: " + " ".join(KINDS))
    n = int(os.environ.get("N", "8"))
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "pipes.cpp"), os.path.join(d, "pipes")
        with open(src, "w") as f:
            f.write(program(mixes, n))
        subprocess.run(["g++", "-O2", "-mavx2", "-mfma", "-mf16c", src, "-o", exe], check=True)
        subprocess.run([exe], check=True)


if __name__ == "__main__":
    main()
