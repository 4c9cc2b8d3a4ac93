"""safetensors writer/reader, schema detection, linears from checkpoints."""
import gc

import numpy as np
import pytest

import nvfp4
import nvfp4_reference as ref


def _write_modelopt(path, rng):
    w = (0.05 * rng.standard_normal((32, 64))).astype(np.float32)
    q, s, g = nvfp4.nvfp4_quantize(w)
    with nvfp4.CheckpointWriter() as wr:
        wr.add("l.weight", q)
        wr.add("l.weight_scale", s, "F8_E4M3")
        wr.add("l.weight_scale_2", np.array(g, np.float32))
        wr.add("l.bias", np.arange(32, dtype=np.float32))
        wr.add("other.bf16", nvfp4.bfloat16(nvfp4.to_bfloat16(np.ones((2, 3), np.float32))))
        wr.add("other.f4", nvfp4.float4(q[:2]))
        wr.metadata("format", "pt")
        wr.commit(path)
    return q, s, g


def test_write_read_detect_and_create_linear(tmp_path, rng, session):
    path = tmp_path / "model.safetensors"
    q, s, g = _write_modelopt(path, rng)
    with nvfp4.Checkpoint(path) as ck:
        assert len(ck) == 6
        assert set(ck.names()) == {"l.weight", "l.weight_scale", "l.weight_scale_2", "l.bias", "other.bf16",
                                   "other.f4"}
        info = ck.info("l.weight_scale")
        assert (info.dtype, info.shape, info.nbytes) == ("F8_E4M3", (32, 4), 128)
        assert ck.info("other.f4").shape == (2, 64) and ck.info("other.f4").dtype == "F4"
        assert ck.metadata("format") == "pt"
        with pytest.raises(nvfp4.NotFoundError):
            ck.metadata("missing")
        with pytest.raises(nvfp4.NotFoundError):
            ck.find("nope")
        view = ck.tensor("l.weight")
        assert not view.flags.writeable and np.array_equal(view, q)
        assert np.array_equal(ck.tensor(ck.find("l.weight_scale")), s)
        assert ck.tensor("l.weight_scale_2") == np.float32(g)
        assert np.array_equal(nvfp4.from_bfloat16(ck.tensor("other.bf16")), np.ones((2, 3)))
        assert np.array_equal(ck.tensor("other.f4"), q[:2])
        summary = ck.detect()
        assert summary.format == "nvfp4" and summary.num_linears == 1
        lin = ck.linear(session, "l")
        x = rng.standard_normal((3, 64)).astype(np.float32)
        wd = ref.nvfp4_dequantize(q, s, g, 32, 64).astype(np.float64)
        assert np.allclose(lin(x), x.astype(np.float64) @ wd.T + np.arange(32), rtol=1e-5, atol=1e-5)
        lin.close()
        with pytest.raises(nvfp4.NotFoundError):
            ck.linear(session, "nope")
    # close() was deferred while `view` lives; the data stays readable
    assert np.array_equal(view, q)
    del view
    gc.collect()


def test_checkpoint_errors(tmp_path):
    with pytest.raises(nvfp4.FileError) as e:
        nvfp4.Checkpoint(tmp_path / "missing.safetensors")
    assert isinstance(e.value, OSError)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    with pytest.raises(nvfp4.FormatError):
        nvfp4.Checkpoint(bad)
    with nvfp4.CheckpointWriter() as wr:
        wr.add("a", np.zeros(3, np.float32))
        with pytest.raises(nvfp4.InvalidArgumentError):
            wr.add("a", np.zeros(3, np.float32))  # duplicate name
        with pytest.raises(nvfp4.DtypeError):
            wr.add("b", np.zeros(3, np.float32), "F16")


def test_detect_schema_and_linears():
    tensors = [
        ("a.weight", "U8", (64, 32)), ("a.weight_scale", "F8_E4M3", (64, 4)), ("a.weight_scale_2", "F32", ()),
        "b.weight", "b.weight.absmax", "b.weight.quant_map",
        "c.norm.weight",
    ]
    summary = nvfp4.detect_schema(tensors)
    assert summary.format == nvfp4.format_name(nvfp4.FORMAT_MIXED) and summary.num_linears == 2
    assert sum(summary.family_counts.values()) == 2
    linears = nvfp4.detect_linears(tensors)
    assert [(l.prefix, l.format) for l in linears] == [("a", "nvfp4"), ("b", "nf4")]
    assert linears[0].roles["weight"] == "a.weight" and linears[0].roles["global_scale"] == "a.weight_scale_2"
    assert linears[1].roles["quant_map"] == "b.weight.quant_map"
    assert linears[0].family == nvfp4.schema_name(3)
    assert nvfp4.detect_schema(["x.weight"]).format == nvfp4.format_name(nvfp4.FORMAT_NONE)
    assert nvfp4.detect_linears({"x.weight": ("F32", (2, 2))}) == []
    with pytest.raises(nvfp4.SchemaError) as e:
        nvfp4.detect_schema(["m.weight", "m.weight_scale"])  # weight_scale_2 missing
    assert e.value.summary.num_incomplete == 1 and "m" in str(e.value)
    assert nvfp4.dtype_name("F8_E4M3") == "F8_E4M3" and nvfp4.dtype_name(1) == "F32"
