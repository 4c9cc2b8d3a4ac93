#!/usr/bin/env python3
"""Turns the JSON of `nvfp4-bench` into the Markdown tables of
docs/performance.md: one table per shape (rows M, columns the product
variants, each cell the median figure and its fraction of the limit measured
in the same run), then the quantize/dequantize and hot-GEMV rows.

Usage: nvfp4-bench --threads 2 > run.json; scripts/bench-report.py run.json
"""
import json
import sys


# A case during which the hypervisor gave more than this share of the
# machine's CPU time to other guests (steal, /proc/stat) is marked "*".
STEAL_MARK_PERCENT = 2.0


def mark(r):
    return "*" if r.get("steal_percent", 0.0) > STEAL_MARK_PERCENT else ""


def cell(r):
    if r is None:
        return "—"
    if r["limit"] == "dram_read" or r["limit"] == "l3_read":
        fig = f"{r['gb_per_s']:.1f} GB/s"
    else:
        fig = f"{r['gflop_per_s']:.0f}"
    frac = r.get("fraction_of_limit")
    return (f"{fig} ({100 * frac:.0f} %)" if frac is not None else fig) + mark(r)


def icell(r):
    if r is None or "fraction_of_int8_dot" not in r:
        return "—"
    blk = r.get("fraction_of_int8_block")
    tail = f" / {100 * blk:.0f} %" if blk is not None else ""
    return f"{r['gflop_per_s']:.0f} ({100 * r['fraction_of_int8_dot']:.0f} %{tail}){mark(r)}"


def main(path):
    j = json.load(open(path))
    lim = j["limits"]
    m = j["machine"]
    sig = (f" ({m['cpu_vendor']} family {m['cpu_family']} model {m['cpu_model']})"
           if m.get("cpu_family") else "")
    print(f"CPU: {m['cpu']}{sig}, {m['cpus']} CPUs, kernel table {m['isa']}, {m['threads']} threads; "
          f"BLAS {j.get('blas', 'none')}.")
    print(f"Limits measured in the run: DRAM read {lim['dram_read_gb_per_s']:.1f} GB/s, "
          f"L3 read {lim['l3_read_gb_per_s']:.1f} GB/s, fp32 FMA roof {lim['fp32_fma_gflop_per_s']:.0f} GFLOP/s, "
          f"int8 roof {lim['int8_dot_gop_per_s']:.0f} GOP/s ({lim['int8_dot_note'].split(',')[0]}), "
          f"block-scaled int8 roof {lim.get('int8_block_gop_per_s', 0):.0f} GOP/s; "
          f"load average {j.get('load_average_at_start', '?')} at start, {j.get('load_average_at_end', '?')} at end.")
    end = j.get("limits_at_end")
    if end is not None:
        print(f"At the end: DRAM read {end['dram_read_gb_per_s']:.1f} GB/s, fp32 FMA roof "
              f"{end['fp32_fma_gflop_per_s']:.0f} GFLOP/s, int8 roof {end['int8_dot_gop_per_s']:.0f} GOP/s, "
              f"block-scaled {end['int8_block_gop_per_s']:.0f} GOP/s; steal over the run "
              f"{j.get('steal_percent', 0.0):.1f} % of the CPU time.")
    if any(r.get("steal_percent", 0.0) > STEAL_MARK_PERCENT for r in j["results"]):
        print(f"Cells marked * ran while other guests took more than {STEAL_MARK_PERCENT:.0f} % of this "
              "machine's CPU time (steal).")
    print()
    cols = [("gemv/gemm", "nvfp4", "exact"), ("gemv/gemm", "nvfp4", "fast"), ("gemv/gemm", "nvfp4", "fast-linear"),
            ("scaled_mm", "nvfp4-w4a4", "exact"), ("gemv/gemm", "nf4", "exact"), ("gemv/gemm", "nf4", "fast"),
            ("gemv/gemm", "nf4", "fast-linear"), ("gemv/gemm", "mxfp4", "exact"), ("gemv/gemm", "mxfp4", "fast"),
            ("scaled_mm", "mxfp4-w4a4", "exact"), ("sgemm", "fp32", None)]
    names = ["NVFP4 exact", "NVFP4 fast", "NVFP4 fast linear", "NVFP4 W4A4", "NF4 exact", "NF4 fast",
             "NF4 fast linear", "MXFP4 exact", "MXFP4 fast", "MXFP4 W4A4", "OpenBLAS sgemm"]
    rs = j["results"]
    shapes = []
    for r in rs:
        if r["case"] in ("gemv", "gemm", "scaled_mm", "sgemm") and (r["n"], r["k"]) not in shapes:
            shapes.append((r["n"], r["k"]))

    def find(case, fmt, mode, n, k, mm):
        for r in rs:
            if r["n"] != n or r["k"] != k or r["m"] != mm or r.get("format") != fmt:
                continue
            if case == "gemv/gemm" and r["case"] not in ("gemv", "gemm"):
                continue
            if case != "gemv/gemm" and r["case"] != case:
                continue
            if mode is not None and r.get("mode") != mode:
                continue
            return r
        return None

    for n, k in shapes:
        ms = sorted({r["m"] for r in rs if r["n"] == n and r["k"] == k and r["case"] in ("gemv", "gemm")})
        print(f"N×K = {n}×{k}: GEMV (M ≤ 8) in GB/s of weights read from memory (fraction of DRAM read "
              "bandwidth); M > 8 in GFLOP/s (fraction of the fp32 FMA roof; fast and W4A4: of the int8 roof).")
        print()
        print("| M | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for mm in ms:
            print(f"| {mm} | " + " | ".join(cell(find(c, f, mo, n, k, mm)) for c, f, mo in cols) + " |")
        print()
        icols = [(c, f, mo, nm) for (c, f, mo), nm in zip(cols, names)
                 if (mo or "").startswith("fast") or "w4a4" in f]
        if any("fraction_of_int8_dot" in (find(c, f, mo, n, k, mm) or {}) for c, f, mo, _ in icols for mm in ms):
            print(f"N×K = {n}×{k}, integer cases: GOP/s (fraction of the int8 roof / of the block-scaled int8 "
                  "roof), GEMV included.")
            print()
            print("| M | " + " | ".join(nm for _, _, _, nm in icols) + " |")
            print("|---" * (len(icols) + 1) + "|")
            for mm in ms:
                print(f"| {mm} | " + " | ".join(icell(find(c, f, mo, n, k, mm)) for c, f, mo, _ in icols) + " |")
            print()
    print("| other case | median ms | figure |")
    print("|---|---|---|")
    for r in rs:
        if r["case"] in ("quantize", "dequantize", "gemv-l3"):
            rows = r["n"] if r["n"] else r["m"]  # quantize/dequantize: M rows of K
            print(f"| {r['case']} {r['format']} {r.get('mode', '')} {rows}×{r['k']} | {r['median_ms']:.2f} "
                  f"| {cell(r)} |")
    gaps = [r for r in rs if r["case"] == "pool_gap"]
    if gaps:
        print()
        print(f"Products separated by the caller's own work ({gaps[0]['format']} {gaps[0]['mode']} GEMV "
              f"{gaps[0]['n']}×{gaps[0]['k']}, M = 1): the pool's watch of {gaps[0]['spin_us']} µs against "
              f"{gaps[0]['reference_spin_us']} µs, calls alternating in one process.")
        print()
        print("| gap between calls | ms per call | with the reference watch | speed |")
        print("|---|---|---|---|")
        for r in gaps:
            print(f"| {r['gap_us']} µs {r['gap']} | {r['median_ms']:.3f} | {r['reference_median_ms']:.3f} "
                  f"| {r['speed_vs_reference']:.2f}× |")
    upd = [r for r in rs if r["case"] in ("linear_update", "mutable_keep")]
    if upd:
        print()
        print(f"Weight updates (NVFP4 from packed bytes, {upd[0]['threads']} threads) and Q4_WRITE_KEEP writes of "
              "mutable tensors: median ms per update or write; GB/s: the bytes it must move at least (read and "
              "written; fast mode writes its tiles too) per second, as a fraction of the DRAM read probe.")
        print()
        print("| case | size | mode | in turn | median ms | GB/s moved |")
        print("|---|---|---|---|---|---|")
        for r in upd:
            if r["case"] == "linear_update":
                print(f"| Q4_linear_update_weight | {r['n']}×{r['k']} | {r['mode']} | {r['linears']} "
                      f"| {r['median_ms']:.3f} | {cell(r)} |")
            else:
                print(f"| Q4_mutable_begin_write KEEP + commit | {r['k'] / 1048576:g} MiB | — | {r['tensors']} "
                      f"| {r['median_ms']:.3f} | {cell(r)} |")
    calls = [r for r in rs if r["case"] == "small_call"]
    if calls:
        print()
        print(f"Small products call by call (NVFP4, the weight in cache, {calls[0]['threads']} threads; the "
              "reference: the same calls with one thread, alternating batch by batch; % of the roof: the "
              "product's own work at the FMA or int8 roof over the call's time).")
        print()
        print("| N×K | M | mode | Q4_linear_forward µs | one thread | NVFP4_linear µs | one thread | % of the roof |")
        print("|---|---|---|---|---|---|---|---|")
        seen = []
        for r in calls:
            key = (r["n"], r["k"], r["m"], r["mode"])
            if key in seen:
                continue
            seen.append(key)
            fw = next((c for c in calls if (c["n"], c["k"], c["m"], c["mode"]) == key
                       and c["api"] == "Q4_linear_forward"), None)
            st = next((c for c in calls if (c["n"], c["k"], c["m"], c["mode"]) == key
                       and c["api"] == "NVFP4_linear"), None)
            if fw is None or st is None:
                continue
            print(f"| {r['n']}×{r['k']} | {r['m']} | {r['mode']} | {fw['us_per_call']:.2f} "
                  f"| {fw['reference_us_per_call']:.2f} | {st['us_per_call']:.2f} "
                  f"| {st['reference_us_per_call']:.2f} | {100 * fw['fraction_of_limit']:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1])
