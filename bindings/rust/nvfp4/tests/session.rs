//! Sessions, linears, mutable tensors and snapshots.
mod common;
use common::*;
use nvfp4::*;

const N: usize = 32;
const K: usize = 64;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn handle_types_are_send_and_sync_where_the_c_contract_allows() {
    assert_send_sync::<Session>();
    assert_send_sync::<Linear<'static>>();
    assert_send_sync::<MutableTensor<'static>>();
    assert_send_sync::<Snapshot<'static>>();
    assert_send_sync::<Checkpoint>();
    fn assert_send<T: Send>() {}
    assert_send::<CheckpointWriter>();
    assert_send::<WriteGuard<'static, 'static>>();
}

#[test]
fn linears_forward_match_the_stateless_op_and_stats_return_to_zero() {
    let session = Session::new(&SessionConfig { diagnostics: true, ..SessionConfig::default() }).unwrap();
    let w = randoms(N * K, 11, 1.0);
    let bias = randoms(N, 12, 0.1);
    let x = randoms(4 * K, 13, 1.0);
    let q = Nvfp4Matrix::quantize(&w, N, K, ScaleLayout::Linear, 0.0).unwrap();
    let want = q.linear(&x, 4, Some(&bias)).unwrap();
    {
        let packed = WeightBundle::nvfp4_packed(
            q.qdata_view(),
            q.scale_view(),
            ScaleLayout::Linear,
            q.global_scale,
            N as i64,
            K as i64,
        )
        .with_bias(TensorView::from_slice(&bias));
        let l1 = session.create_linear(&packed).unwrap();
        let wv = TensorView::new(&w, &[N as i64, K as i64]).unwrap();
        let l2 = session
            .create_linear(&WeightBundle::nvfp4_from_float(wv.clone(), 0.0).with_bias(TensorView::from_slice(&bias)))
            .unwrap();
        let l3 = session.create_linear(&WeightBundle::nf4_from_float(wv, 64)).unwrap();
        assert_eq!(l1.forward_f32(&x, 4).unwrap(), want);
        assert_eq!(l2.forward_f32(&x, 4).unwrap(), want);
        let y3 = l3.forward_f32(&x, 4).unwrap();
        let (yr, _) = ref_matmul(&x, &w, 4, N, K);
        for i in 0..4 * N {
            assert!((y3[i] as f64 - yr[i]).abs() < 0.2 * (1.0 + yr[i].abs()) * K as f64 / 8.0);
        }

        let info = l1.info().unwrap();
        assert_eq!(info.format, Some(Format::Nvfp4));
        assert_eq!((info.out_features, info.in_features), (N as i64, K as i64));
        assert_eq!(info.weight_version, 1);
        assert_eq!(l3.info().unwrap().format, Some(Format::Nf4));
        let diag = l1.diagnostics().unwrap();
        assert!(diag.starts_with('{') && diag.contains("format"), "{diag}");
        assert!(session.diagnostics().unwrap().starts_with('{'));

        // update_weight: same shape, new values, version + 1.
        let w2: Vec<f32> = w.iter().map(|v| -v).collect();
        let wv2 = TensorView::new(&w2, &[N as i64, K as i64]).unwrap();
        l1.update_weight(&WeightBundle::nvfp4_from_float(wv2, 0.0).with_bias(TensorView::from_slice(&bias))).unwrap();
        assert_eq!(l1.info().unwrap().weight_version, 2);
        let y = l1.forward_f32(&x, 4).unwrap();
        assert!((y[0] + want[0] - 2.0 * bias[0]).abs() < 1e-4 * (1.0 + want[0].abs()));
        // Shape change is refused with a status and the argument.
        let w3 = vec![0f32; 16 * K];
        let e = l1
            .update_weight(&WeightBundle::nvfp4_from_float(TensorView::new(&w3, &[16, K as i64]).unwrap(), 0.0))
            .unwrap_err();
        assert_eq!(e.status, Status::Shape, "{e}");
        // A forward with the wrong K.
        let mut y_bad = vec![0f32; 4 * N];
        let e = l1
            .forward(
                &TensorView::new(&x[..4 * 32], &[4, 32]).unwrap(),
                &mut TensorViewMut::new(&mut y_bad, &[4, N as i64]).unwrap(),
            )
            .unwrap_err();
        assert_eq!(e.status, Status::Shape, "{e}");
        assert!(e.message.contains("Q4_linear_forward"), "{e}");

        let st = session.stats().unwrap();
        assert_eq!(st.live_linears, 3);
        assert!(st.live_bytes > 0);
        assert!(st.forwards >= 4);
    }
    let st = session.stats().unwrap();
    assert_eq!((st.live_linears, st.live_mutables, st.live_snapshots), (0, 0, 0));
    assert_eq!((st.live_buffers, st.live_bytes), (0, 0));
    session.close().unwrap();
}

#[test]
fn concurrent_forwards_and_updates_share_one_linear() {
    let session = Session::with_defaults().unwrap();
    let w = randoms(N * K, 21, 1.0);
    let q = Nvfp4Matrix::quantize(&w, N, K, ScaleLayout::Linear, 0.0).unwrap();
    let w_neg: Vec<f32> = w.iter().map(|v| -v).collect();
    let linear = session
        .create_linear(&WeightBundle::nvfp4_from_float(TensorView::new(&w, &[N as i64, K as i64]).unwrap(), 0.0))
        .unwrap();
    let x = randoms(3 * K, 22, 1.0);
    let want = q.linear(&x, 3, None).unwrap();
    let want_neg: Vec<f32> = want.iter().map(|v| -v).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    let y = linear.forward_f32(&x, 3).unwrap();
                    // Entirely the old or entirely the new weight.
                    assert!(y == want || y == want_neg, "a forward mixed two weights");
                }
            });
        }
        s.spawn(|| {
            for i in 0..20 {
                let src = if i % 2 == 0 { &w_neg } else { &w };
                linear
                    .update_weight(&WeightBundle::nvfp4_from_float(
                        TensorView::new(src, &[N as i64, K as i64]).unwrap(),
                        0.0,
                    ))
                    .unwrap();
            }
        });
    });
    assert_eq!(linear.info().unwrap().weight_version, 21);
    assert_eq!(session.stats().unwrap().forwards, 200);
    drop(linear);
    assert_eq!(session.stats().unwrap().live_linears, 0);
}

#[test]
fn mutable_tensor_single_writer_and_stable_snapshots() {
    let session = Session::with_defaults().unwrap();
    {
        let t = session.create_mutable(&[4, 8], DType::F32).unwrap();
        assert_eq!(t.version().unwrap(), 0);
        let s0 = t.acquire().unwrap();
        assert_eq!(s0.version(), 0);
        assert!(s0.as_slice::<f32>().unwrap().iter().all(|&v| v == 0.0));
        assert_ne!(s0.flags() & sys::DLPACK_FLAG_BITMASK_READ_ONLY, 0);
        assert_eq!(s0.as_view().shape(), &[4, 8]);

        let mut w = t.begin_write(WriteMode::Keep).unwrap();
        // Single writer: a second begin_write is Busy, naming the tensor.
        let e = t.begin_write(WriteMode::Discard).unwrap_err();
        assert_eq!(e.status, Status::Busy);
        assert!(e.message.contains("tensor"), "{e}");
        w.as_mut_slice::<f32>().unwrap().iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
        assert_eq!(w.as_mut_slice::<u8>().unwrap_err().status, Status::Dtype);
        assert_eq!(w.commit().unwrap(), 1);

        let s1 = t.acquire().unwrap();
        assert_eq!(s1.version(), 1);
        assert_eq!(s1.as_slice::<f32>().unwrap()[5], 5.0);

        // A writer dropped without commit aborts; the version stays.
        {
            let mut w = t.begin_write(WriteMode::Discard).unwrap();
            w.as_bytes_mut().fill(0xFF);
        }
        assert_eq!(t.version().unwrap(), 1);

        // Write straight into the buffer with a library op (fake_quantize
        // into the private buffer), across several commits.
        let src = randoms(32, 31, 1.0);
        for round in 0..3 {
            let mut w = t.begin_write(WriteMode::Keep).unwrap();
            let mut out = w.view_mut().reshape(&[2, 16]).unwrap();
            let xin = TensorView::new(&src, &[4, 8]).unwrap().reshape(&[2, 16]).unwrap();
            nvfp4_fake_quantize(&xin, &mut out, 0.0, None).unwrap();
            drop(out);
            assert_eq!(w.commit().unwrap(), 2 + round);
        }
        // Snapshots never change, whatever was committed.
        assert!(s0.as_slice::<f32>().unwrap().iter().all(|&v| v == 0.0));
        assert_eq!(s1.as_slice::<f32>().unwrap(), (0..32).map(|i| i as f32).collect::<Vec<_>>().as_slice());
        let st = session.stats().unwrap();
        assert_eq!((st.live_mutables, st.live_snapshots), (1, 2));

        // A snapshot may outlive its tensor (but not the session).
        drop(t);
        assert_eq!(s1.as_slice::<f32>().unwrap()[31], 31.0);
        let st = session.stats().unwrap();
        assert_eq!((st.live_mutables, st.live_snapshots), (0, 2));
        drop((s0, s1));
    }
    let st = session.stats().unwrap();
    assert_eq!((st.live_linears, st.live_mutables, st.live_snapshots, st.live_bytes), (0, 0, 0, 0));
    session.close().unwrap();
}

#[test]
fn session_config_errors_and_cuda_target() {
    let e = Session::new(&SessionConfig { num_threads: -5, ..SessionConfig::default() });
    if let Err(e) = e {
        assert_eq!(e.status, Status::InvalidArgument, "{e}");
    }
    let caps = capabilities().unwrap();
    let r = Session::new(&SessionConfig { target: Target::Cuda, ..SessionConfig::default() });
    if caps.cuda_state != Some(CudaState::Ready) {
        let e = r.unwrap_err();
        assert_eq!(e.status, Status::NotAvailable, "{e}");
    }
}

#[test]
fn set_stream_on_a_cpu_session_is_refused() {
    let session = Session::new(&SessionConfig { target: Target::Cpu, ..SessionConfig::default() }).unwrap();
    let e = session.set_stream(std::ptr::null_mut()).unwrap_err();
    assert_eq!(e.status, Status::Unsupported, "{e}");
}

#[test]
fn packed_nf4_and_swizzled_nvfp4_linears() {
    let session = Session::with_defaults().unwrap();
    let w = randoms(N * K, 51, 1.0);
    let x = randoms(2 * K, 52, 1.0);
    // NF4 packed with its statistics: same result as the stateless product.
    let t = Nf4Tensor::quantize(&w, 64).unwrap();
    let mut want = vec![0f32; 2 * N];
    nf4_scaled_mm(
        &TensorView::new(&x, &[2, K as i64]).unwrap(),
        &TensorView::from_slice(&t.qdata),
        &t.state(),
        None,
        &mut TensorViewMut::new(&mut want, &[2, N as i64]).unwrap(),
        None,
    )
    .unwrap();
    let l = session
        .create_linear(&WeightBundle::nf4_packed(TensorView::from_slice(&t.qdata), t.state(), N as i64, K as i64))
        .unwrap();
    assert_eq!(l.info().unwrap().format, Some(Format::Nf4));
    let y = l.forward_f32(&x, 2).unwrap();
    let (_, abs) = ref_matmul(&x, &t.dequantize().unwrap(), 2, N, K);
    for i in 0..2 * N {
        assert!(((y[i] - want[i]) as f64).abs() <= 2.0 * exact_bound(K, abs[i]) + 1e-6);
    }
    // NVFP4 packed with swizzled scales equals the linear-layout result.
    let q = Nvfp4Matrix::quantize(&w, N, K, ScaleLayout::Swizzled, 0.0).unwrap();
    let l2 = session
        .create_linear(&WeightBundle::nvfp4_packed(
            q.qdata_view(),
            q.scale_view(),
            ScaleLayout::Swizzled,
            q.global_scale,
            N as i64,
            K as i64,
        ))
        .unwrap();
    let ql = Nvfp4Matrix::quantize(&w, N, K, ScaleLayout::Linear, 0.0).unwrap();
    assert_eq!(l2.forward_f32(&x, 2).unwrap(), ql.linear(&x, 2, None).unwrap());
    // A packed bundle with a missing global scale is refused, naming it.
    let e = session
        .create_linear(&WeightBundle::nvfp4_packed(
            ql.qdata_view(),
            ql.scale_view(),
            ScaleLayout::Linear,
            0.0,
            N as i64,
            K as i64,
        ))
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    assert!(e.message.contains("global_scale"), "{e}");
    drop((l, l2));
    assert_eq!(session.stats().unwrap().live_linears, 0);
}
