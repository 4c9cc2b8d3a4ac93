//! Stateless operations against the Rust reference of the format.
mod common;
use common::*;
use nvfp4::*;

const ROWS: usize = 24;
const K: usize = 64;

#[test]
fn nvfp4_quantize_dequantize_matches_the_reference() {
    let x = randoms(ROWS * K, 1, 3.0);
    for g in [0.0f32, 0.01] {
        let q = Nvfp4Matrix::quantize(&x, ROWS, K, ScaleLayout::Linear, g).unwrap();
        if g == 0.0 {
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            assert_eq!(q.global_scale, amax / (6.0 * 448.0));
        } else {
            assert_eq!(q.global_scale, g);
        }
        let deq = q.dequantize().unwrap();
        let reference = ref_dequant(&q.qdata, &q.scale, q.global_scale, ROWS, K);
        assert_eq!(deq, reference, "library dequantize differs from the Rust reference");
        // Quantization error: at most half the largest E2M1 gap (1 unit) of
        // the block scale, with the scale rounded to E4M3 (< 1/16 relative).
        for (b, chunk) in x.chunks(16).enumerate() {
            let amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (j, &v) in chunk.iter().enumerate() {
                let err = (v - deq[b * 16 + j]).abs();
                assert!(err <= amax / 6.0 * 1.07 + 1e-6, "block {b} elem {j}: {v} vs {}", deq[b * 16 + j]);
            }
        }
    }
}

#[test]
fn views_with_explicit_dtypes_and_fp16_output() {
    // Exactly representable values so the fp16 copy is exact.
    let x: Vec<f32> = (0..2 * 32).map(|i| ((i % 13) as f32 - 6.0) / 4.0).collect();
    let q = Nvfp4Matrix::quantize(&x, 2, 32, ScaleLayout::Linear, 0.0).unwrap();
    let f32_out = q.dequantize().unwrap();
    // fp16 output through a u16 slice.
    let mut h = vec![0u16; 2 * 32];
    let mut hv = TensorViewMut::with_dtype(&mut h, DType::F16, &[2, 32]).unwrap();
    // scales viewed as kDLFloat8_e4m3fn bytes.
    let sv = TensorView::with_dtype(&q.scale, DType::F8E4M3, &[2, 2]).unwrap();
    nvfp4_dequantize(&q.qdata_view(), &sv, ScaleLayout::Linear, q.global_scale, &mut hv, None).unwrap();
    for (a, b) in h.iter().zip(&f32_out) {
        let hf = f16_to_f32(*a);
        assert!((hf - b).abs() <= b.abs() * 1e-3 + 1e-7, "{hf} vs {b}");
    }
    // fp16 input: quantizing the fp16 copy gives the same bytes.
    let xh: Vec<u16> = x.iter().map(|&v| f16_bits(v)).collect();
    let xv = TensorView::with_dtype(&xh, DType::F16, &[2, 32]).unwrap();
    let (mut qd, mut sc) = (vec![0u8; 32], vec![0u8; 4]);
    let g = nvfp4_quantize(
        &xv,
        &mut TensorViewMut::from_slice(&mut qd),
        &mut TensorViewMut::from_slice(&mut sc),
        ScaleLayout::Linear,
        0.0,
        None,
    )
    .unwrap();
    assert_eq!((qd, sc, g), (q.qdata.clone(), q.scale.clone(), q.global_scale));
    // A u16 slice cannot be viewed as f32, a f32 slice not as bf16.
    assert_eq!(TensorView::with_dtype(&xh, DType::F32, &[64]).unwrap_err().status, Status::Dtype);
    assert_eq!(TensorView::with_dtype(&x, DType::BF16, &[64]).unwrap_err().status, Status::Dtype);
}

#[test]
fn swizzle_roundtrip_and_swizzled_quantize() {
    let x = randoms(ROWS * K, 2, 1.0);
    let lin = Nvfp4Matrix::quantize(&x, ROWS, K, ScaleLayout::Linear, 0.0).unwrap();
    let swz = Nvfp4Matrix::quantize(&x, ROWS, K, ScaleLayout::Swizzled, 0.0).unwrap();
    let size = nvfp4_swizzled_scale_size(ROWS as i64, K as i64).unwrap();
    assert_eq!(size, 128 * 4);
    assert_eq!(swz.scale.len() as i64, size);
    assert_eq!(lin.qdata, swz.qdata);
    // swizzle(linear) == what quantize wrote in the swizzled layout
    let mut s2 = vec![0u8; size as usize];
    let lv = TensorView::new(&lin.scale, &[ROWS as i64, (K / 16) as i64]).unwrap();
    nvfp4_swizzle_scales(&lv, &mut TensorViewMut::from_slice(&mut s2)).unwrap();
    assert_eq!(s2, swz.scale);
    let mut back = vec![0u8; lin.scale.len()];
    nvfp4_unswizzle_scales(
        &TensorView::from_slice(&s2),
        &mut TensorViewMut::new(&mut back, &[ROWS as i64, (K / 16) as i64]).unwrap(),
    )
    .unwrap();
    assert_eq!(back, lin.scale);
    assert_eq!(swz.dequantize().unwrap(), lin.dequantize().unwrap());
}

#[test]
fn linear_and_scaled_mm_match_the_reference() {
    let (m, n) = (5, ROWS);
    let w = randoms(n * K, 3, 2.0);
    let x = randoms(m * K, 4, 1.5);
    let bias = randoms(n, 5, 0.5);
    let q = Nvfp4Matrix::quantize(&w, n, K, ScaleLayout::Linear, 0.0).unwrap();
    let wd = ref_dequant(&q.qdata, &q.scale, q.global_scale, n, K);
    let (yr, abs) = ref_matmul(&x, &wd, m, n, K);
    let y = q.linear(&x, m, Some(&bias)).unwrap();
    for i in 0..m * n {
        let want = yr[i] + bias[i % n] as f64;
        let tol = exact_bound(K, abs[i]) + 2f64.powi(-24) * want.abs() + 1e-6;
        assert!((y[i] as f64 - want).abs() <= tol, "y[{i}] = {} want {want}", y[i]);
    }
    // scaled_mm with both operands quantized (global scales folded into alpha).
    let a = Nvfp4Matrix::quantize(&x, m, K, ScaleLayout::Linear, 0.0).unwrap();
    let ad = ref_dequant(&a.qdata, &a.scale, 1.0, m, K);
    let bd = ref_dequant(&q.qdata, &q.scale, 1.0, n, K);
    let alpha = a.global_scale * q.global_scale;
    let (ym, abs) = ref_matmul(&ad, &bd, m, n, K);
    let mut out = vec![0f32; m * n];
    nvfp4_scaled_mm(
        &a.qdata_view(),
        &a.scale_view(),
        &q.qdata_view(),
        &q.scale_view(),
        ScaleLayout::Linear,
        alpha,
        None,
        &mut TensorViewMut::new(&mut out, &[m as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap();
    for i in 0..m * n {
        let want = ym[i] * alpha as f64;
        let tol = (exact_bound(K, abs[i]) + 2f64.powi(-24) * ym[i].abs()) * alpha as f64 + 1e-6;
        assert!((out[i] as f64 - want).abs() <= tol, "mm[{i}] = {} want {want}", out[i]);
    }
    // Dequant-matmul path through options gives the same within the bound.
    let opts = OpOptions { compute_path: ComputePath::DequantMatmulOnly, ..OpOptions::default() };
    let mut y2 = vec![0f32; m * n];
    nvfp4_linear(
        &TensorView::new(&x, &[m as i64, K as i64]).unwrap(),
        &q.qdata_view(),
        &q.scale_view(),
        ScaleLayout::Linear,
        q.global_scale,
        None,
        &mut TensorViewMut::new(&mut y2, &[m as i64, n as i64]).unwrap(),
        Some(&opts),
    )
    .unwrap();
    for i in 0..m * n {
        assert!((y2[i] as f64 - yr[i]).abs() <= exact_bound(K, abs[i]) + 1e-6);
    }
}

#[test]
fn fake_quantize_and_backward() {
    let (m, n) = (3, 16);
    let w = randoms(n * K, 6, 1.0);
    let q = Nvfp4Matrix::quantize(&w, n, K, ScaleLayout::Linear, 0.0).unwrap();
    let mut fq = vec![0f32; n * K];
    let g = nvfp4_fake_quantize(
        &TensorView::new(&w, &[n as i64, K as i64]).unwrap(),
        &mut TensorViewMut::new(&mut fq, &[n as i64, K as i64]).unwrap(),
        0.0,
        None,
    )
    .unwrap();
    assert_eq!(g, q.global_scale);
    assert_eq!(fq, q.dequantize().unwrap());

    // grad_x[m, K] = grad_y[m, n] · deq(W)[n, K]
    let gy = randoms(m * n, 7, 1.0);
    let x = randoms(m * K, 8, 1.0);
    let wd = q.dequantize().unwrap();
    let mut gx = vec![0f32; m * K];
    let mut gw = vec![0f32; n * K];
    nvfp4_linear_backward(
        &TensorView::new(&gy, &[m as i64, n as i64]).unwrap(),
        Some(&TensorView::new(&x, &[m as i64, K as i64]).unwrap()),
        &q.qdata_view(),
        &q.scale_view(),
        ScaleLayout::Linear,
        q.global_scale,
        Some(&mut TensorViewMut::new(&mut gx, &[m as i64, K as i64]).unwrap()),
        Some(&mut TensorViewMut::new(&mut gw, &[n as i64, K as i64]).unwrap()),
        None,
    )
    .unwrap();
    for i in 0..m {
        for t in 0..K {
            let want: f64 = (0..n).map(|j| gy[i * n + j] as f64 * wd[j * K + t] as f64).sum();
            assert!((gx[i * K + t] as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()));
        }
    }
    for j in 0..n {
        for t in 0..K {
            let want: f64 = (0..m).map(|i| gy[i * n + j] as f64 * x[i * K + t] as f64).sum();
            assert!((gw[j * K + t] as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()));
        }
    }
}

#[test]
fn nf4_quantize_dequantize_double_quantize_and_matmul() {
    let (n, k) = (8, 128);
    let w = randoms(n * k, 9, 2.0);
    let t = Nf4Tensor::quantize(&w, 64).unwrap();
    assert_eq!(t.qdata.len(), n * k / 2);
    assert_eq!(t.absmax.len(), n * k / 64);
    let d = t.dequantize().unwrap();
    for (b, chunk) in w.chunks(64).enumerate() {
        let amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert_eq!(t.absmax[b], amax);
        for (j, &v) in chunk.iter().enumerate() {
            // The widest gap of the NF4 codebook is below 0.34 of absmax.
            assert!((v - d[b * 64 + j]).abs() <= 0.17 * amax + 1e-6);
        }
    }
    // Double quantization of the statistics, read back through Nf4State.
    let nb = t.absmax.len();
    let (mut qa, mut na, mut nm) = (vec![0u8; nb], vec![0f32; nb.div_ceil(256)], vec![0f32; 256]);
    let offset = nf4_double_quantize(
        &TensorView::from_slice(&t.absmax),
        &mut TensorViewMut::from_slice(&mut qa),
        &mut TensorViewMut::from_slice(&mut na),
        &mut TensorViewMut::from_slice(&mut nm),
        None,
    )
    .unwrap();
    let mean = t.absmax.iter().sum::<f32>() / nb as f32;
    assert!((offset - mean).abs() <= 1e-5 * mean.abs());
    let nested = Nf4State {
        blocksize: 64,
        absmax: TensorView::from_slice(&qa),
        quant_map: None,
        nested: Some(Nf4Nested {
            absmax: TensorView::from_slice(&na),
            quant_map: TensorView::from_slice(&nm),
            offset,
            blocksize: 0,
        }),
    };
    let mut d2 = vec![0f32; n * k];
    nf4_dequantize(&TensorView::from_slice(&t.qdata), &nested, &mut TensorViewMut::from_slice(&mut d2), None).unwrap();
    for (a, b) in d2.iter().zip(&d) {
        assert!((a - b).abs() <= 0.02 * b.abs().max(1.0));
    }
    // NF4 matmul vs the dequantized weight.
    let m = 3;
    let x = randoms(m * k, 10, 1.0);
    let mut y = vec![0f32; m * n];
    nf4_scaled_mm(
        &TensorView::new(&x, &[m as i64, k as i64]).unwrap(),
        &TensorView::from_slice(&t.qdata),
        &t.state(),
        None,
        &mut TensorViewMut::new(&mut y, &[m as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap();
    let (yr, abs) = ref_matmul(&x, &d, m, n, k);
    for i in 0..m * n {
        assert!((y[i] as f64 - yr[i]).abs() <= exact_bound(k, abs[i]) + 1e-6);
    }
}
