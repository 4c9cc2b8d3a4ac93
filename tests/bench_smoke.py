#!/usr/bin/env python3
"""Smoke test of nvfp4-bench and scripts/bench-report.py (no timing is
checked: the figures only have to be there and be positive).

Runs the bench on a tiny shape, checks that the JSON carries every limit
(also measured again at the end) and the steal of the run and of each case,
that each result has its limit and fraction, that the integer cases carry
their fractions of the int8 roof and of the block-scaled int8 roof when the
CPU has an int8 probe, and that the report script turns it into tables;
then the same for --only gaps (the worker pool's watch between products),
--only calls (small products call by call) and --only updates (weight
updates and mutable-tensor writes).

Usage: bench_smoke.py NVFP4_BENCH REPO_ROOT
"""
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout


def report_of(root, out):
    """The Markdown scripts/bench-report.py prints for the JSON `out`."""
    spec = importlib.util.spec_from_file_location("bench_report", os.path.join(root, "scripts", "bench-report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        with open(path, "w") as f:
            f.write(out)
        buf = io.StringIO()
        with redirect_stdout(buf):
            report.main(path)
    return buf.getvalue()


def main(bench, root):
    out = subprocess.run([bench, "--quick", "--threads", "2", "--only", "products", "--shapes", "256x256",
                          "--ms", "1,16", "--working-set", "8", "--max-case-seconds", "0.2"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    lim = j["limits"]
    for key in ("dram_read_gb_per_s", "l3_read_gb_per_s", "fp32_fma_gflop_per_s", "int8_dot_gop_per_s",
                "int8_block_gop_per_s"):
        assert key in lim, f"limits.{key} missing"
    assert lim["fp32_fma_gflop_per_s"] > 0 and lim["dram_read_gb_per_s"] > 0
    has_int8 = lim["int8_dot_gop_per_s"] > 0
    assert (lim["int8_block_gop_per_s"] > 0) == has_int8, "the block-scaled probe goes with the int8 probe"
    end = j["limits_at_end"]
    for key in ("dram_read_gb_per_s", "fp32_fma_gflop_per_s", "int8_dot_gop_per_s", "int8_block_gop_per_s"):
        assert key in end, f"limits_at_end.{key} missing"
    assert end["fp32_fma_gflop_per_s"] > 0 and (end["int8_dot_gop_per_s"] > 0) == has_int8, end
    assert 0.0 <= j["steal_percent"] <= 100.0, j["steal_percent"]
    rs = j["results"]
    assert {r["m"] for r in rs} == {1, 16}, "one case per M asked for"
    assert all(0.0 <= r["steal_percent"] <= 100.0 for r in rs), "every case with its steal"
    integer = 0
    for r in rs:
        assert r["median_ms"] > 0 and r["fraction_of_limit"] > 0, r
        if r["mode"].startswith("fast") or "w4a4" in r["format"]:
            integer += 1
            if has_int8:
                # (no comparison between the two: both are timings, and a
                # disturbed probe may read either one low)
                assert r["fraction_of_int8_dot"] > 0 and r["fraction_of_int8_block"] > 0, r
        else:
            assert "fraction_of_int8_dot" not in r, r
    # fast: NVFP4, MXFP4, NF4; fast-linear (session linears): NVFP4, NF4; W4A4: NVFP4, MXFP4
    assert integer == 14, f"7 integer cases per M, got {integer}"

    text = report_of(root, out)
    assert "N×K = 256×256" in text and "block-scaled int8 roof" in text, text
    assert "At the end: DRAM read" in text, text
    # A case with steal above the mark is starred, with the note once; none
    # without.
    for r in rs:
        r["steal_percent"] = 0.0
    plain = report_of(root, json.dumps(j))
    assert "(steal)" not in plain and "%)*" not in plain, plain
    next(r for r in rs if r["format"] == "nvfp4" and r["mode"] == "exact")["steal_percent"] = 50.0  # one cell
    starred = report_of(root, json.dumps(j))
    assert starred.count("(steal)") == 1 and starred.count("%)*") == 1, starred
    if has_int8:
        assert "integer cases" in text and "NVFP4 fast linear" in text, text
    # --only gaps: the pool's watch against the former one, per gap.
    out = subprocess.run([bench, "--quick", "--threads", "2", "--only", "gaps"],
                         check=True, capture_output=True, text=True).stdout
    gaps = json.loads(out)["results"]
    assert [(r["gap"], r["gap_us"]) for r in gaps] == (
        [("busy", g) for g in (0, 200, 500, 1000, 2000)] + [("idle", g) for g in (200, 500, 1000, 2000)]), gaps
    for r in gaps:
        assert r["case"] == "pool_gap" and r["reference_spin_us"] == 100 and r["spin_us"] >= 0, r
        assert r["median_ms"] > 0 and r["reference_median_ms"] > 0 and r["speed_vs_reference"] > 0, r
        assert r["calls_timed"] >= 5, r
    text = report_of(root, out)
    assert "gap between calls" in text and "2000 µs idle" in text, text
    # --only calls: small products call by call, against one thread.
    out = subprocess.run([bench, "--quick", "--threads", "2", "--only", "calls"],
                         check=True, capture_output=True, text=True).stdout
    calls = json.loads(out)["results"]
    assert len(calls) == 5 * 2 * 2 * 2, len(calls)  # shapes x M x mode x API
    for r in calls:
        assert r["case"] == "small_call" and r["api"] in ("Q4_linear_forward", "NVFP4_linear"), r
        assert r["us_per_call"] > 0 and r["reference_us_per_call"] > 0 and r["calls_per_batch"] >= 1, r
        assert r["limit"] in ("fp32_fma", "int8_dot") and r["fraction_of_limit"] >= 0, r
    text = report_of(root, out)
    assert "Small products call by call" in text and "| 1024×1024 | 8 | fast |" in text, text
    # --only updates: weight updates and Q4_WRITE_KEEP writes (--quick: a
    # sixteenth of the bytes).
    out = subprocess.run([bench, "--quick", "--threads", "2", "--only", "updates"],
                         check=True, capture_output=True, text=True).stdout
    upd = json.loads(out)["results"]
    assert [(r["case"], r.get("mode"), r.get("linears", r.get("tensors"))) for r in upd] == (
        [("linear_update", mo, l) for l in (1, 8, 1) for mo in ("exact", "fast")]
        + [("mutable_keep", None, t) for t in (1, 1, 2, 1)]), upd
    for r in upd:
        assert r["median_ms"] > 0 and r["gb_per_s"] > 0 and r["limit"] == "dram_read", r
        assert r["fraction_of_limit"] > 0, r
    text = report_of(root, out)
    assert "Weight updates" in text and "| Q4_linear_update_weight | 1024×1024 | fast | 8 |" in text, text
    assert "| Q4_mutable_begin_write KEEP + commit | 4 MiB | — | 1 |" in text, text
    print("bench smoke: OK,", len(rs), "cases,", len(gaps), "gaps,", len(calls), "small calls,", len(upd),
          "updates")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
