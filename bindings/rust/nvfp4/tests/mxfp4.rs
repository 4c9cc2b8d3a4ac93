//! MXFP4 through the safe wrappers: quantize/dequantize against the format
//! rules, the products, and batched experts against per-expert linears.
mod common;
use common::*;
use nvfp4::*;

const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// MXFP4 dequantization from the format rules (docs/formats.md, MXFP4).
fn mx_decode(q: &[u8], s: &[u8], rows: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * k];
    for (i, v) in out.iter_mut().enumerate() {
        let code = (q[i / 2] >> (4 * (i & 1))) & 0xf;
        let mag = E2M1[(code & 7) as usize] * 2f32.powi(s[i / 32] as i32 - 127);
        *v = if code & 8 != 0 { -mag } else { mag };
    }
    out
}

fn quantize(w: &[f32], rows: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    let mut q = vec![0u8; rows * k / 2];
    let mut s = vec![0u8; rows * k / 32];
    let wv = TensorView::new(w, &[rows as i64, k as i64]).unwrap();
    mxfp4_quantize(
        &wv,
        &mut TensorViewMut::from_slice(&mut q),
        &mut TensorViewMut::from_slice(&mut s),
        ScaleLayout::Linear,
        None,
    )
    .unwrap();
    (q, s)
}

#[test]
fn mxfp4_quantize_dequantize_linear_scaled_mm() {
    let (n, k, m) = (16usize, 64usize, 3usize);
    let w = randoms(n * k, 11, 2.0);
    let (q, s) = quantize(&w, n, k);
    let deq = mx_decode(&q, &s, n, k);
    let mut out = vec![0f32; n * k];
    mxfp4_dequantize(
        &TensorView::from_slice(&q),
        &TensorView::from_slice(&s),
        ScaleLayout::Linear,
        &mut TensorViewMut::new(&mut out, &[n as i64, k as i64]).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(out, deq);
    let x = randoms(m * k, 12, 1.0);
    let mut y = vec![0f32; m * n];
    mxfp4_linear(
        &TensorView::new(&x, &[m as i64, k as i64]).unwrap(),
        &TensorView::from_slice(&q),
        &TensorView::from_slice(&s),
        ScaleLayout::Linear,
        None,
        &mut TensorViewMut::new(&mut y, &[m as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap();
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k).map(|kk| x[i * k + kk] as f64 * deq[j * k + kk] as f64).sum();
            assert!((y[i * n + j] as f64 - r).abs() <= 1e-4 * (1.0 + r.abs()), "{i},{j}");
        }
    }
    let (aq, as_) = quantize(&x, m, k);
    let adeq = mx_decode(&aq, &as_, m, k);
    let mut z = vec![0f32; m * n];
    mxfp4_scaled_mm(
        &TensorView::from_slice(&aq),
        &TensorView::from_slice(&as_),
        &TensorView::from_slice(&q),
        &TensorView::from_slice(&s),
        ScaleLayout::Linear,
        2.0,
        None,
        &mut TensorViewMut::new(&mut z, &[m as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap();
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k).map(|kk| adeq[i * k + kk] as f64 * deq[j * k + kk] as f64).sum::<f64>() * 2.0;
            assert!((z[i * n + j] as f64 - r).abs() <= 1e-4 * (1.0 + r.abs()), "{i},{j}");
        }
    }
    // K not a multiple of 32 is a shape error.
    let bad = vec![0f32; 2 * 48];
    let err = mxfp4_quantize(
        &TensorView::new(&bad, &[2, 48]).unwrap(),
        &mut TensorViewMut::from_slice(&mut [0u8; 48]),
        &mut TensorViewMut::from_slice(&mut [0u8; 3]),
        ScaleLayout::Linear,
        None,
    )
    .unwrap_err();
    assert_eq!(err.status, Status::Shape);
}

#[test]
fn mxfp4_linear_experts_matches_per_expert_linear() {
    let (e, n, k) = (3usize, 8usize, 64usize);
    let w = randoms(e * n * k, 21, 1.0);
    let (q, s) = quantize(&w, e * n, k);
    let bias = randoms(e * n, 22, 1.0);
    let groups = [
        ExpertGroup { expert: 2, rows: 2 },
        ExpertGroup { expert: 0, rows: 0 },
        ExpertGroup { expert: 1, rows: 3 },
        ExpertGroup { expert: 2, rows: 1 },
    ];
    let t = 6usize;
    let x = randoms(t * k, 23, 1.0);
    let qv = TensorView::new(&q, &[e as i64, n as i64, (k / 2) as i64]).unwrap();
    let sv = TensorView::new(&s, &[e as i64, n as i64, (k / 32) as i64]).unwrap();
    let bv = TensorView::new(&bias, &[e as i64, n as i64]).unwrap();
    let mut y = vec![0f32; t * n];
    mxfp4_linear_experts(
        &TensorView::new(&x, &[t as i64, k as i64]).unwrap(),
        &qv,
        &sv,
        ScaleLayout::Linear,
        &groups,
        Some(&bv),
        &mut TensorViewMut::new(&mut y, &[t as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap();
    let mut r0 = 0usize;
    for g in &groups {
        let (ex, rows) = (g.expert as usize, g.rows as usize);
        if rows == 0 {
            continue;
        }
        let mut r = vec![0f32; rows * n];
        mxfp4_linear(
            &TensorView::new(&x[r0 * k..(r0 + rows) * k], &[rows as i64, k as i64]).unwrap(),
            &TensorView::from_slice(&q[ex * n * k / 2..(ex + 1) * n * k / 2]),
            &TensorView::from_slice(&s[ex * n * k / 32..(ex + 1) * n * k / 32]),
            ScaleLayout::Linear,
            Some(&TensorView::from_slice(&bias[ex * n..(ex + 1) * n])),
            &mut TensorViewMut::new(&mut r, &[rows as i64, n as i64]).unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(&y[r0 * n..(r0 + rows) * n], &r[..], "group of expert {ex}");
        r0 += rows;
    }
    // An expert outside [0, E) is refused, naming the group.
    let err = mxfp4_linear_experts(
        &TensorView::new(&x, &[t as i64, k as i64]).unwrap(),
        &qv,
        &sv,
        ScaleLayout::Linear,
        &[ExpertGroup { expert: 3, rows: 6 }],
        None,
        &mut TensorViewMut::new(&mut y, &[t as i64, n as i64]).unwrap(),
        None,
    )
    .unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.to_string().contains("expert_of_group[0]"), "{err}");
}
