//! Stateless NVFP4 / NF4 / MXFP4 operations (`ops.h`) and the training helpers.
//!
//! All of them are callable concurrently from any number of threads (on
//! distinct outputs; Rust's `&mut` outputs guarantee that). Inputs are
//! borrowed [`TensorView`]s, outputs caller-allocated [`TensorViewMut`]s that
//! the library writes in place. `opts: None` means the library defaults.
use crate::error::{check, Error, Result, Status};
use crate::tensor::{opt_ptr, opt_raw, TensorView, TensorViewMut};
use crate::types::{opts_ptr, opts_raw, OpOptions, ScaleLayout};
use nvfp4_sys as sys;
use std::ptr;

/// `NVFP4_quantize`: x [..., K] → qdata (rows·K/2 bytes, element 2j in the
/// low nibble) and E4M3 block scales in `layout`. `global_scale` 0 computes
/// amax/(6·448); returns the global scale used.
pub fn nvfp4_quantize(
    x: &TensorView<'_>,
    qdata: &mut TensorViewMut<'_>,
    scale: &mut TensorViewMut<'_>,
    layout: ScaleLayout,
    global_scale: f32,
    opts: Option<&OpOptions>,
) -> Result<f32> {
    let (x, mut q, mut s, o) = (x.raw(), qdata.raw(), scale.raw(), opts_raw(opts));
    let mut used = 0.0f32;
    check(unsafe { sys::NVFP4_quantize(&x, &mut q, &mut s, layout.raw(), global_scale, &mut used, opts_ptr(&o)) })?;
    Ok(used)
}

/// `NVFP4_dequantize`: qdata + scale (+ global_scale > 0) → out [..., K].
pub fn nvfp4_dequantize(
    qdata: &TensorView<'_>,
    scale: &TensorView<'_>,
    layout: ScaleLayout,
    global_scale: f32,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (q, s, mut y, o) = (qdata.raw(), scale.raw(), out.raw(), opts_raw(opts));
    check(unsafe { sys::NVFP4_dequantize(&q, &s, layout.raw(), global_scale, &mut y, opts_ptr(&o)) })
}

/// `NVFP4_scaled_mm`: out[M,N] = alpha · deq(A)[M,K] · deq(B)[N,K]ᵀ (+ bias).
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_scaled_mm(
    a_qdata: &TensorView<'_>,
    a_scale: &TensorView<'_>,
    b_qdata: &TensorView<'_>,
    b_scale: &TensorView<'_>,
    layout: ScaleLayout,
    alpha: f32,
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (aq, as_, bq, bs) = (a_qdata.raw(), a_scale.raw(), b_qdata.raw(), b_scale.raw());
    let (b, mut y, o) = (opt_raw(bias), out.raw(), opts_raw(opts));
    check(unsafe { sys::NVFP4_scaled_mm(&aq, &as_, &bq, &bs, layout.raw(), alpha, opt_ptr(&b), &mut y, opts_ptr(&o)) })
}

/// `NVFP4_linear`: out[..., N] = x[..., K] · deq(W)[N, K]ᵀ (+ bias).
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_linear(
    x: &TensorView<'_>,
    w_qdata: &TensorView<'_>,
    w_scale: &TensorView<'_>,
    layout: ScaleLayout,
    global_scale: f32,
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (x, wq, ws, b) = (x.raw(), w_qdata.raw(), w_scale.raw(), opt_raw(bias));
    let (mut y, o) = (out.raw(), opts_raw(opts));
    check(unsafe { sys::NVFP4_linear(&x, &wq, &ws, layout.raw(), global_scale, opt_ptr(&b), &mut y, opts_ptr(&o)) })
}

/// `MXFP4_quantize`: x [..., K] (K a multiple of 32) → qdata (rows·K/2
/// bytes, element 2j in the low nibble) and E8M0 scales (one byte per 32
/// elements) in `layout`, the OCP rule (docs/formats.md, MXFP4).
pub fn mxfp4_quantize(
    x: &TensorView<'_>,
    qdata: &mut TensorViewMut<'_>,
    scale: &mut TensorViewMut<'_>,
    layout: ScaleLayout,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (x, mut q, mut s, o) = (x.raw(), qdata.raw(), scale.raw(), opts_raw(opts));
    check(unsafe { sys::MXFP4_quantize(&x, &mut q, &mut s, layout.raw(), opts_ptr(&o)) })
}

/// `MXFP4_dequantize`: qdata + E8M0 scales → out [..., K] (exact).
pub fn mxfp4_dequantize(
    qdata: &TensorView<'_>,
    scale: &TensorView<'_>,
    layout: ScaleLayout,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (q, s, mut y, o) = (qdata.raw(), scale.raw(), out.raw(), opts_raw(opts));
    check(unsafe { sys::MXFP4_dequantize(&q, &s, layout.raw(), &mut y, opts_ptr(&o)) })
}

/// `MXFP4_linear`: out[..., N] = x[..., K] · deq(W)[N, K]ᵀ (+ bias).
pub fn mxfp4_linear(
    x: &TensorView<'_>,
    w_qdata: &TensorView<'_>,
    w_scale: &TensorView<'_>,
    layout: ScaleLayout,
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (x, wq, ws, b) = (x.raw(), w_qdata.raw(), w_scale.raw(), opt_raw(bias));
    let (mut y, o) = (out.raw(), opts_raw(opts));
    check(unsafe { sys::MXFP4_linear(&x, &wq, &ws, layout.raw(), opt_ptr(&b), &mut y, opts_ptr(&o)) })
}

/// `MXFP4_scaled_mm`: out[M,N] = alpha · deq(A)[M,K] · deq(B)[N,K]ᵀ (+ bias),
/// both operands MXFP4.
#[allow(clippy::too_many_arguments)]
pub fn mxfp4_scaled_mm(
    a_qdata: &TensorView<'_>,
    a_scale: &TensorView<'_>,
    b_qdata: &TensorView<'_>,
    b_scale: &TensorView<'_>,
    layout: ScaleLayout,
    alpha: f32,
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (aq, as_, bq, bs) = (a_qdata.raw(), a_scale.raw(), b_qdata.raw(), b_scale.raw());
    let (b, mut y, o) = (opt_raw(bias), out.raw(), opts_raw(opts));
    check(unsafe { sys::MXFP4_scaled_mm(&aq, &as_, &bq, &bs, layout.raw(), alpha, opt_ptr(&b), &mut y, opts_ptr(&o)) })
}

/// One group of [`mxfp4_linear_experts`]: `rows` consecutive rows of x run
/// through expert `expert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertGroup {
    pub expert: i32,
    pub rows: i64,
}

/// `MXFP4_linear_experts`: batched MoE experts. `w_qdata` is the stacked
/// weight with the expert dimension first ([E, N, K/2] or gpt-oss
/// [E, N, K/32, 16]), `w_scale` its E8M0 scales ([E, N, K/32] linear, or E
/// per-expert swizzled blocks), both as the checkpoint stores them (no copy);
/// x [T, K] is split into `groups` in order (their rows must sum to T), each
/// computing out[rows] = x[rows] · deq(W[expert])ᵀ (+ bias[expert]), bias
/// [E, N].
#[allow(clippy::too_many_arguments)]
pub fn mxfp4_linear_experts(
    x: &TensorView<'_>,
    w_qdata: &TensorView<'_>,
    w_scale: &TensorView<'_>,
    layout: ScaleLayout,
    groups: &[ExpertGroup],
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let experts: Vec<i32> = groups.iter().map(|g| g.expert).collect();
    let rows: Vec<i64> = groups.iter().map(|g| g.rows).collect();
    let (x, wq, ws, b) = (x.raw(), w_qdata.raw(), w_scale.raw(), opt_raw(bias));
    let (mut y, o) = (out.raw(), opts_raw(opts));
    check(unsafe {
        sys::MXFP4_linear_experts(
            &x,
            &wq,
            &ws,
            layout.raw(),
            experts.as_ptr(),
            rows.as_ptr(),
            groups.len() as i64,
            opt_ptr(&b),
            &mut y,
            opts_ptr(&o),
        )
    })
}

/// `NF4_quantize`: x (n elements) → qdata (ceil(n/2) bytes, element 2j in
/// the HIGH nibble) and absmax fp32 [ceil(n/blocksize)]; blocksize 0 = 64.
pub fn nf4_quantize(
    x: &TensorView<'_>,
    qdata: &mut TensorViewMut<'_>,
    absmax: &mut TensorViewMut<'_>,
    blocksize: i32,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (x, mut q, mut a, o) = (x.raw(), qdata.raw(), absmax.raw(), opts_raw(opts));
    check(unsafe { sys::NF4_quantize(&x, &mut q, &mut a, blocksize, opts_ptr(&o)) })
}

/// `NF4_double_quantize`: absmax → (qabsmax, nested_absmax, nested_quant_map);
/// returns the offset (mean of absmax).
pub fn nf4_double_quantize(
    absmax: &TensorView<'_>,
    qabsmax: &mut TensorViewMut<'_>,
    nested_absmax: &mut TensorViewMut<'_>,
    nested_quant_map: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<f32> {
    let (a, mut qa, mut na, mut nm, o) =
        (absmax.raw(), qabsmax.raw(), nested_absmax.raw(), nested_quant_map.raw(), opts_raw(opts));
    let mut offset = 0.0f32;
    check(unsafe { sys::NF4_double_quantize(&a, &mut qa, &mut na, &mut nm, &mut offset, opts_ptr(&o)) })?;
    Ok(offset)
}

/// Double-quantized NF4 statistics (see [`nf4_double_quantize`]).
#[derive(Debug, Clone)]
pub struct Nf4Nested<'a> {
    /// fp32 [ceil(nblocks / blocksize)].
    pub absmax: TensorView<'a>,
    /// fp32 [256].
    pub quant_map: TensorView<'a>,
    pub offset: f32,
    /// 0 means 256.
    pub blocksize: i32,
}

/// NF4 quantization state of one tensor (`NF4_state`), borrowing its tensors.
#[derive(Debug, Clone)]
pub struct Nf4State<'a> {
    pub blocksize: i32,
    /// fp32 [nblocks], or uint8 codes when `nested` is set.
    pub absmax: TensorView<'a>,
    /// Optional fp32 [16] codebook (None: the NF4 table).
    pub quant_map: Option<TensorView<'a>>,
    pub nested: Option<Nf4Nested<'a>>,
}

impl<'a> Nf4State<'a> {
    pub fn new(blocksize: i32, absmax: TensorView<'a>) -> Self {
        Nf4State { blocksize, absmax, quant_map: None, nested: None }
    }

    /// Calls `f` with the C struct; the DLTensors it points to live on this
    /// frame for the duration of the call.
    pub(crate) fn with_raw<R>(&self, f: impl FnOnce(&sys::NF4_state) -> R) -> R {
        let absmax = self.absmax.raw();
        let qmap = opt_raw(self.quant_map.as_ref());
        let nabs = self.nested.as_ref().map(|n| n.absmax.raw());
        let nmap = self.nested.as_ref().map(|n| n.quant_map.raw());
        // SAFETY: all-zero is a valid NF4_state (NULL pointers, zero numbers).
        let mut st: sys::NF4_state = unsafe { std::mem::zeroed() };
        st.struct_size = std::mem::size_of::<sys::NF4_state>() as u32;
        st.blocksize = self.blocksize;
        st.absmax = &absmax;
        st.quant_map = opt_ptr(&qmap);
        st.nested_absmax = opt_ptr(&nabs);
        st.nested_quant_map = opt_ptr(&nmap);
        if let Some(n) = &self.nested {
            st.nested_offset = n.offset;
            st.nested_blocksize = n.blocksize;
        }
        f(&st)
    }
}

/// `NF4_dequantize`: qdata + state → out (n elements).
pub fn nf4_dequantize(
    qdata: &TensorView<'_>,
    state: &Nf4State<'_>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (q, mut y, o) = (qdata.raw(), out.raw(), opts_raw(opts));
    state.with_raw(|st| check(unsafe { sys::NF4_dequantize(&q, st, &mut y, opts_ptr(&o)) }))
}

/// `NF4_scaled_mm`: out[..., N] = x[..., K] · deq(W)[N, K]ᵀ (+ bias).
pub fn nf4_scaled_mm(
    x: &TensorView<'_>,
    w_qdata: &TensorView<'_>,
    w_state: &Nf4State<'_>,
    bias: Option<&TensorView<'_>>,
    out: &mut TensorViewMut<'_>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (x, wq, b, mut y, o) = (x.raw(), w_qdata.raw(), opt_raw(bias), out.raw(), opts_raw(opts));
    w_state.with_raw(|st| check(unsafe { sys::NF4_scaled_mm(&x, &wq, st, opt_ptr(&b), &mut y, opts_ptr(&o)) }))
}

/// `NVFP4_swizzle_scales`: linear [rows, C] bytes → swizzled bytes.
pub fn nvfp4_swizzle_scales(linear: &TensorView<'_>, swizzled: &mut TensorViewMut<'_>) -> Result<()> {
    let (l, mut s) = (linear.raw(), swizzled.raw());
    check(unsafe { sys::NVFP4_swizzle_scales(&l, &mut s) })
}

/// `NVFP4_unswizzle_scales`: swizzled bytes → linear [rows, C] (shape from `linear`).
pub fn nvfp4_unswizzle_scales(swizzled: &TensorView<'_>, linear: &mut TensorViewMut<'_>) -> Result<()> {
    let (s, mut l) = (swizzled.raw(), linear.raw());
    check(unsafe { sys::NVFP4_unswizzle_scales(&s, &mut l) })
}

/// `NVFP4_swizzled_scale_size`: bytes of the swizzled scales of a [rows, k] weight.
pub fn nvfp4_swizzled_scale_size(rows: i64, k: i64) -> Result<i64> {
    let mut n = 0i64;
    check(unsafe { sys::NVFP4_swizzled_scale_size(rows, k, &mut n) })?;
    Ok(n)
}

/// `NVFP4_fake_quantize`: out = dequantize(quantize(x)); returns the global scale used.
pub fn nvfp4_fake_quantize(
    x: &TensorView<'_>,
    out: &mut TensorViewMut<'_>,
    global_scale: f32,
    opts: Option<&OpOptions>,
) -> Result<f32> {
    let (x, mut y, o) = (x.raw(), out.raw(), opts_raw(opts));
    let mut used = 0.0f32;
    check(unsafe { sys::NVFP4_fake_quantize(&x, &mut y, global_scale, &mut used, opts_ptr(&o)) })?;
    Ok(used)
}

/// `NVFP4_linear_backward`: grad_x = grad_y · deq(W); grad_w = grad_yᵀ · x.
/// Either output may be None to skip it; `x` is needed only for grad_w.
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_linear_backward(
    grad_y: &TensorView<'_>,
    x: Option<&TensorView<'_>>,
    w_qdata: &TensorView<'_>,
    w_scale: &TensorView<'_>,
    layout: ScaleLayout,
    global_scale: f32,
    grad_x: Option<&mut TensorViewMut<'_>>,
    grad_w: Option<&mut TensorViewMut<'_>>,
    opts: Option<&OpOptions>,
) -> Result<()> {
    let (gy, xr, wq, ws, o) = (grad_y.raw(), opt_raw(x), w_qdata.raw(), w_scale.raw(), opts_raw(opts));
    let mut gx = grad_x.map(|t| t.raw());
    let mut gw = grad_w.map(|t| t.raw());
    let gxp = gx.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    let gwp = gw.as_mut().map_or(ptr::null_mut(), |t| t as *mut _);
    check(unsafe {
        sys::NVFP4_linear_backward(&gy, opt_ptr(&xr), &wq, &ws, layout.raw(), global_scale, gxp, gwp, opts_ptr(&o))
    })
}

// ---------------------------------------------------------------------------
// Owned convenience types.
// ---------------------------------------------------------------------------

fn dims(what: &str, rows: usize, k: usize) -> Result<(i64, i64)> {
    if k % 16 != 0 {
        return Err(Error::binding(Status::Shape, format!("{what}: argument 'k': expected a multiple of 16, got {k}")));
    }
    Ok((rows as i64, k as i64))
}

/// An NVFP4-quantized [rows, k] matrix with owned buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4Matrix {
    pub rows: usize,
    pub k: usize,
    /// rows·k/2 bytes, element 2j in the low nibble.
    pub qdata: Vec<u8>,
    /// E4M3 block scales in `layout`.
    pub scale: Vec<u8>,
    pub layout: ScaleLayout,
    pub global_scale: f32,
}

impl Nvfp4Matrix {
    /// Quantizes a row-major [rows, k] f32 matrix (`global_scale` 0: from amax).
    pub fn quantize(x: &[f32], rows: usize, k: usize, layout: ScaleLayout, global_scale: f32) -> Result<Self> {
        let (r, kk) = dims("Nvfp4Matrix::quantize", rows, k)?;
        let xv = TensorView::new(x, &[r, kk])?;
        let scale_len = match layout {
            ScaleLayout::Linear => rows * k / 16,
            ScaleLayout::Swizzled => nvfp4_swizzled_scale_size(r, kk)? as usize,
        };
        let mut qdata = vec![0u8; rows * k / 2];
        let mut scale = vec![0u8; scale_len];
        let used = nvfp4_quantize(
            &xv,
            &mut TensorViewMut::from_slice(&mut qdata),
            &mut TensorViewMut::from_slice(&mut scale),
            layout,
            global_scale,
            None,
        )?;
        Ok(Nvfp4Matrix { rows, k, qdata, scale, layout, global_scale: used })
    }

    pub fn qdata_view(&self) -> TensorView<'_> {
        TensorView::from_slice(&self.qdata)
    }

    pub fn scale_view(&self) -> TensorView<'_> {
        TensorView::from_slice(&self.scale)
    }

    /// Dequantizes to a row-major [rows, k] f32 matrix.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.rows * self.k];
        let mut ov = TensorViewMut::new(&mut out, &[self.rows as i64, self.k as i64])?;
        nvfp4_dequantize(&self.qdata_view(), &self.scale_view(), self.layout, self.global_scale, &mut ov, None)?;
        Ok(out)
    }

    /// y[m, rows] = x[m, k] · Wᵀ (+ bias[rows]) with this matrix as the weight.
    pub fn linear(&self, x: &[f32], m: usize, bias: Option<&[f32]>) -> Result<Vec<f32>> {
        let xv = TensorView::new(x, &[m as i64, self.k as i64])?;
        let bv = bias.map(TensorView::from_slice);
        let mut out = vec![0f32; m * self.rows];
        let mut ov = TensorViewMut::new(&mut out, &[m as i64, self.rows as i64])?;
        nvfp4_linear(
            &xv,
            &self.qdata_view(),
            &self.scale_view(),
            self.layout,
            self.global_scale,
            bv.as_ref(),
            &mut ov,
            None,
        )?;
        Ok(out)
    }
}

/// An NF4-quantized tensor of `numel` elements with owned buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Nf4Tensor {
    pub numel: usize,
    pub blocksize: i32,
    /// ceil(numel/2) bytes, element 2j in the high nibble.
    pub qdata: Vec<u8>,
    /// fp32 [ceil(numel/blocksize)].
    pub absmax: Vec<f32>,
}

impl Nf4Tensor {
    /// Quantizes `x` with `blocksize` (0 means 64).
    pub fn quantize(x: &[f32], blocksize: i32) -> Result<Self> {
        let bs = if blocksize == 0 { 64 } else { blocksize };
        if bs < 0 {
            return Err(Error::binding(Status::InvalidArgument, "Nf4Tensor::quantize: argument 'blocksize': negative"));
        }
        let mut qdata = vec![0u8; x.len().div_ceil(2)];
        let mut absmax = vec![0f32; x.len().div_ceil(bs as usize)];
        nf4_quantize(
            &TensorView::from_slice(x),
            &mut TensorViewMut::from_slice(&mut qdata),
            &mut TensorViewMut::from_slice(&mut absmax),
            bs,
            None,
        )?;
        Ok(Nf4Tensor { numel: x.len(), blocksize: bs, qdata, absmax })
    }

    pub fn state(&self) -> Nf4State<'_> {
        Nf4State::new(self.blocksize, TensorView::from_slice(&self.absmax))
    }

    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.numel];
        nf4_dequantize(
            &TensorView::from_slice(&self.qdata),
            &self.state(),
            &mut TensorViewMut::from_slice(&mut out),
            None,
        )?;
        Ok(out)
    }
}
