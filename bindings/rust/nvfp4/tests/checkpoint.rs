//! Schema detection and safetensors checkpoints.
mod common;
use common::randoms;
use nvfp4::*;

fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("{name}-{}.safetensors", std::process::id()))
}

#[test]
fn schema_detection_from_names_dtypes_and_shapes() {
    let descs = vec![
        TensorDesc::new("a.weight.qdata", FileDtype::U8, &[64, 32]),
        TensorDesc::new("a.weight.scale", FileDtype::F8E4M3, &[64, 4]),
        TensorDesc::new("b.weight", FileDtype::U8, &[64, 32]),
        TensorDesc::new("b.weight_scale", FileDtype::F8E4M3, &[64, 4]),
        TensorDesc::new("b.weight_scale_2", FileDtype::F32, &[]),
        TensorDesc::new("b.input_scale", FileDtype::F32, &[]),
        TensorDesc::name_only("norm.weight"),
    ];
    let s = detect_schema(&descs).unwrap();
    assert_eq!(s.format, Some(Format::Nvfp4));
    assert_eq!(s.family, Some(Family::None)); // two families
    assert_eq!(s.num_linears, 2);
    assert_eq!(s.family_counts[Family::Nvfp4Legacy.raw() as usize], 1);
    assert_eq!(s.family_counts[Family::Nvfp4Modelopt.raw() as usize], 1);

    let ls = detect_linears(&descs).unwrap();
    assert_eq!(ls.len(), 2);
    let b = ls.iter().find(|l| l.family == Some(Family::Nvfp4Modelopt)).unwrap();
    assert_eq!(b.prefix, "b");
    assert_eq!(b.role(Role::Weight), Some(2));
    assert_eq!(b.role(Role::Scale), Some(3));
    assert_eq!(b.role(Role::GlobalScale), Some(4));
    assert_eq!(b.role(Role::InputScale), Some(5));
    assert_eq!(b.role(Role::Bias), None);
    let a = ls.iter().find(|l| l.family == Some(Family::Nvfp4Legacy)).unwrap();
    assert_eq!(a.role(Role::GlobalScale), None);

    // Incomplete linear: Schema status naming the prefix and missing key.
    let bad = vec![TensorDesc::name_only("m.weight"), TensorDesc::name_only("m.weight_scale")];
    let e = detect_schema(&bad).unwrap_err();
    assert_eq!(e.status, Status::Schema);
    assert!(e.message.contains("m.weight_scale_2"), "{e}");
    // Nothing 4-bit.
    assert_eq!(detect_schema(&[TensorDesc::name_only("x")]).unwrap().format, Some(Format::None));

    assert!(!schema_name(Family::BnbNf4).is_empty());
    assert!(!format_name(Format::Nf4).is_empty());
    assert_eq!(dtype_name(FileDtype::F32), "F32");
}

#[test]
fn write_open_read_and_create_linears_from_a_checkpoint() {
    let (n, k) = (32usize, 64usize);
    let w = randoms(n * k, 41, 1.0);
    let q = Nvfp4Matrix::quantize(&w, n, k, ScaleLayout::Linear, 0.0).unwrap();
    let g = [q.global_scale];
    let path = temp_file("modelopt");
    {
        let mut wr = CheckpointWriter::new().unwrap();
        wr.add("l.weight", FileDtype::U8, &TensorView::new(&q.qdata, &[n as i64, (k / 2) as i64]).unwrap()).unwrap();
        let sv = TensorView::with_dtype(&q.scale, DType::F8E4M3, &[n as i64, (k / 16) as i64]).unwrap();
        wr.add("l.weight_scale", FileDtype::F8E4M3, &sv).unwrap();
        wr.add("l.weight_scale_2", FileDtype::F32, &TensorView::new(&g, &[]).unwrap()).unwrap();
        wr.metadata("producer", "nvfp4-rust-test").unwrap();
        // Duplicate name and size mismatch are refused with statuses.
        let e = wr.add("l.weight", FileDtype::U8, &q.qdata_view()).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{e}");
        let e = wr.add("bad", FileDtype::F16, &TensorView::from_slice(&w[..3])).unwrap_err();
        assert_eq!(e.status, Status::Dtype, "{e}");
        wr.commit(&path).unwrap();
    }
    let ck = Checkpoint::open(&path).unwrap();
    assert_eq!(ck.len().unwrap(), 3);
    let i = ck.find("l.weight_scale").unwrap();
    let info = ck.tensor_info(i).unwrap();
    assert_eq!(info.name, "l.weight_scale");
    assert_eq!(info.dtype, FileDtype::F8E4M3);
    assert_eq!(info.shape, vec![n as i64, (k / 16) as i64]);
    assert_eq!(info.nbytes, (n * k / 16) as i64);
    let t = ck.tensor(i).unwrap();
    assert_eq!(t.dtype(), DType::F8E4M3);
    assert_eq!(t.as_bytes().unwrap(), q.scale.as_slice());
    let gi = ck.find("l.weight_scale_2").unwrap();
    assert_eq!(ck.tensor(gi).unwrap().as_slice::<f32>().unwrap(), &g);
    assert_eq!(ck.metadata("producer").unwrap(), "nvfp4-rust-test");
    assert_eq!(ck.metadata("nope").unwrap_err().status, Status::NotFound);
    assert_eq!(ck.find("nope").unwrap_err().status, Status::NotFound);

    let s = ck.detect().unwrap();
    assert_eq!((s.format, s.family, s.num_linears), (Some(Format::Nvfp4), Some(Family::Nvfp4Modelopt), 1));

    let session = Session::with_defaults().unwrap();
    {
        let l = ck.create_linear(&session, "l").unwrap();
        let x = randoms(2 * k, 42, 1.0);
        assert_eq!(l.forward_f32(&x, 2).unwrap(), q.linear(&x, 2, None).unwrap());
        let e = ck.create_linear(&session, "nope").unwrap_err();
        assert_eq!(e.status, Status::NotFound, "{e}");
        // The checkpoint's views and the linear live independently of each
        // other; the linear copied the weight.
        drop(ck);
        assert_eq!(l.forward_f32(&x, 2).unwrap(), q.linear(&x, 2, None).unwrap());
    }
    assert_eq!(session.stats().unwrap().live_linears, 0);
    std::fs::remove_file(&path).unwrap();

    // A malformed file is Format, a missing one Io.
    let junk = temp_file("junk");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    assert_eq!(Checkpoint::open(&junk).unwrap_err().status, Status::Format);
    std::fs::remove_file(&junk).unwrap();
    let e = Checkpoint::open(temp_file("missing")).unwrap_err();
    assert_eq!(e.status, Status::Io, "{e}");
}
