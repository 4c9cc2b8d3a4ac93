//! Test helpers: a small independent Rust reference of the NVFP4 format,
//! a deterministic generator and fp16 bit conversions.
#![allow(dead_code)]

/// E2M1 magnitudes by the low 3 bits; bit 3 is the sign.
pub const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

pub fn e2m1(nibble: u8) -> f32 {
    let m = E2M1[(nibble & 7) as usize];
    if nibble & 8 != 0 {
        -m
    } else {
        m
    }
}

/// E4M3 (fn) decode: bias 7, no infinities, S.1111.111 is NaN.
pub fn e4m3(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 15 && b & 7 == 7 {
        return f32::NAN;
    }
    let mag = if e == 0 { m / 8.0 * 2f32.powi(-6) } else { (1.0 + m / 8.0) * 2f32.powi(e - 7) };
    sign * mag
}

/// Reference NVFP4 dequantization of a [rows, k] matrix with linear scales:
/// element 2j in the low nibble, value = (e2m1 * scale) * g in f32.
pub fn ref_dequant(qdata: &[u8], scale: &[u8], g: f32, rows: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * k];
    for r in 0..rows {
        for j in 0..k {
            let i = r * k + j;
            let byte = qdata[i / 2];
            let nib = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
            let s = e4m3(scale[r * (k / 16) + j / 16]);
            out[i] = (e2m1(nib) * s) * g;
        }
    }
    out
}

/// y[m, n] = Σ_k x[m, k] w[n, k] in f64, and Σ|x w| per output.
pub fn ref_matmul(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0f64; m * n];
    let mut a = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for t in 0..k {
                let p = x[i * k + t] as f64 * w[j * k + t] as f64;
                y[i * n + j] += p;
                a[i * n + j] += p.abs();
            }
        }
    }
    (y, a)
}

/// The documented exact-mode bound (K+16)·2⁻²⁴·Σ|x w| plus a hair.
pub fn exact_bound(k: usize, abs_sum: f64) -> f64 {
    (k as f64 + 16.0) * 2f64.powi(-24) * abs_sum + 1e-30
}

/// Deterministic values in [-amp, amp).
pub fn randoms(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            (u * 2.0 - 1.0) * amp
        })
        .collect()
}

/// f32 → fp16 bits for values exactly representable in fp16 (tests only).
pub fn f16_bits(v: f32) -> u16 {
    if v == 0.0 {
        return if v.is_sign_negative() { 0x8000 } else { 0 };
    }
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
    assert!((1..31).contains(&exp), "value {v} outside the fp16 normal range");
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3FF) as u16
}

/// fp16 bits → f32 (normals, subnormals, zero, inf/nan).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1F) as i32;
    let m = (h & 0x3FF) as f32;
    match e {
        0 => sign * m / 1024.0 * 2f32.powi(-14),
        31 => {
            if m == 0.0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            }
        }
        _ => sign * (1.0 + m / 1024.0) * 2f32.powi(e - 15),
    }
}
