//! DLPack views over Rust slices.
use crate::error::{Error, Result, Status};
use nvfp4_sys as sys;
use std::ffi::c_void;
use std::marker::PhantomData;

/// Element types a tensor may have. fp16 and bf16 have no Rust type in the
/// standard library: pass their bits as `u16` slices and say which with
/// `DType::F16` / `DType::BF16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    /// `kDLFloat8_e4m3fn` (NVFP4 block scales).
    F8E4M3,
    /// `kDLFloat8_e5m2`.
    F8E5M2,
    /// `kDLFloat4_e2m1fn`, 4 bits, lanes 1 (logical shape of packed data).
    F4E2M1,
    /// Any other DLPack type.
    Other(sys::DLDataType),
}

impl DType {
    pub fn to_dl(self) -> sys::DLDataType {
        let t = |code: u32, bits: u8| sys::DLDataType { code: code as u8, bits, lanes: 1 };
        match self {
            DType::F32 => t(sys::kDLFloat, 32),
            DType::F64 => t(sys::kDLFloat, 64),
            DType::F16 => t(sys::kDLFloat, 16),
            DType::BF16 => t(sys::kDLBfloat, 16),
            DType::I8 => t(sys::kDLInt, 8),
            DType::I16 => t(sys::kDLInt, 16),
            DType::I32 => t(sys::kDLInt, 32),
            DType::I64 => t(sys::kDLInt, 64),
            DType::U8 => t(sys::kDLUInt, 8),
            DType::U16 => t(sys::kDLUInt, 16),
            DType::U32 => t(sys::kDLUInt, 32),
            DType::U64 => t(sys::kDLUInt, 64),
            DType::Bool => t(sys::kDLBool, 8),
            DType::F8E4M3 => t(sys::kDLFloat8_e4m3fn, 8),
            DType::F8E5M2 => t(sys::kDLFloat8_e5m2, 8),
            DType::F4E2M1 => t(sys::kDLFloat4_e2m1fn, 4),
            DType::Other(d) => d,
        }
    }

    pub fn from_dl(d: sys::DLDataType) -> DType {
        let all = [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I8,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::U16,
            DType::U32,
            DType::U64,
            DType::Bool,
            DType::F8E4M3,
            DType::F8E5M2,
            DType::F4E2M1,
        ];
        all.into_iter().find(|t| t.to_dl() == d).unwrap_or(DType::Other(d))
    }

    /// Bits of one element (bits × lanes).
    pub fn bits(self) -> u64 {
        let d = self.to_dl();
        d.bits as u64 * d.lanes as u64
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Rust element types a view can be built from. `accepts` lists the dtypes
/// whose elements have this type's size and meaning.
pub trait Element: Copy + sealed::Sealed + 'static {
    const DTYPE: DType;
    fn accepts(d: DType) -> bool {
        d == Self::DTYPE
    }
}

macro_rules! element {
    ($t:ty, $d:expr $(, $also:expr)*) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn accepts(d: DType) -> bool {
                d == $d $(|| d == $also)*
            }
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(u8, DType::U8, DType::Bool, DType::F8E4M3, DType::F8E5M2);
element!(u16, DType::U16, DType::F16, DType::BF16);
element!(u32, DType::U32);
element!(u64, DType::U64);

fn numel(what: &str, shape: &[i64]) -> Result<u64> {
    let mut n: u64 = 1;
    for (i, &d) in shape.iter().enumerate() {
        if d < 0 {
            return Err(Error::binding(
                Status::Shape,
                format!("{what}: argument 'shape': dimension {i} is negative ({d})"),
            ));
        }
        n = n.checked_mul(d as u64).ok_or_else(|| {
            Error::binding(Status::Overflow, format!("{what}: argument 'shape': element count overflows"))
        })?;
    }
    Ok(n)
}

fn check_slice<T: Element>(what: &str, len: usize, dtype: DType, shape: &[i64]) -> Result<()> {
    if !T::accepts(dtype) {
        return Err(Error::binding(
            Status::Dtype,
            format!("{what}: argument 'dtype': {dtype:?} cannot view a slice of {}", std::any::type_name::<T>()),
        ));
    }
    if shape.len() > i32::MAX as usize {
        return Err(Error::binding(Status::Shape, format!("{what}: argument 'shape': too many dimensions")));
    }
    let n = numel(what, shape)?;
    if n != len as u64 {
        return Err(Error::binding(
            Status::Shape,
            format!("{what}: argument 'shape': expected {len} elements (the slice length), got {shape:?} = {n}"),
        ));
    }
    Ok(())
}

fn cpu() -> sys::DLDevice {
    sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 }
}

/// A borrowed, read-only DLPack tensor: a compact row-major view of a slice
/// (or of memory owned by the library, such as a checkpoint or snapshot)
/// with a shape. The shape lives in the view, so the view can be moved.
#[derive(Debug, Clone)]
pub struct TensorView<'a> {
    data: *const c_void,
    device: sys::DLDevice,
    dtype: DType,
    shape: Box<[i64]>,
    byte_offset: u64,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a TensorView is a shared borrow of immutable data, like &'a [T].
unsafe impl Send for TensorView<'_> {}
unsafe impl Sync for TensorView<'_> {}

impl<'a> TensorView<'a> {
    /// A view of `data` with the element type's own dtype (f32 → F32, u8 → U8, ...).
    pub fn new<T: Element>(data: &'a [T], shape: &[i64]) -> Result<Self> {
        Self::with_dtype(data, T::DTYPE, shape)
    }

    /// A view of `data` as `dtype` (e.g. a `u16` slice as `DType::F16` or
    /// `DType::BF16`, a `u8` slice as `DType::F8E4M3`).
    pub fn with_dtype<T: Element>(data: &'a [T], dtype: DType, shape: &[i64]) -> Result<Self> {
        check_slice::<T>("TensorView", data.len(), dtype, shape)?;
        Ok(TensorView {
            data: data.as_ptr() as *const c_void,
            device: cpu(),
            dtype,
            shape: shape.into(),
            byte_offset: 0,
            _borrow: PhantomData,
        })
    }

    /// A 1-D view of a whole slice.
    pub fn from_slice<T: Element>(data: &'a [T]) -> Self {
        Self::new(data, &[data.len() as i64]).expect("a 1-D view of a slice always fits")
    }

    /// # Safety
    /// `t` must describe memory valid for reads for `'a`, compact row-major.
    pub unsafe fn from_raw(t: &sys::DLTensor) -> Self {
        let shape: Box<[i64]> = if t.ndim > 0 && !t.shape.is_null() {
            std::slice::from_raw_parts(t.shape, t.ndim as usize).into()
        } else {
            Box::new([])
        };
        TensorView {
            data: t.data as *const c_void,
            device: t.device,
            dtype: DType::from_dl(t.dtype),
            shape,
            byte_offset: t.byte_offset,
            _borrow: PhantomData,
        }
    }

    /// The same memory with another shape of the same element count.
    pub fn reshape(mut self, shape: &[i64]) -> Result<Self> {
        let n = numel("TensorView::reshape", shape)?;
        if n != self.numel() {
            return Err(Error::binding(
                Status::Shape,
                format!(
                    "TensorView::reshape: argument 'shape': expected {} elements, got {shape:?} = {n}",
                    self.numel()
                ),
            ));
        }
        self.shape = shape.into();
        Ok(self)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    pub fn device(&self) -> sys::DLDevice {
        self.device
    }
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product()
    }
    /// Bytes the tensor covers (sub-byte elements rounded up).
    pub fn nbytes(&self) -> usize {
        ((self.numel() * self.dtype.bits()).div_ceil(8)) as usize
    }

    /// The DLTensor to pass to C; it points into this view (shape) and must
    /// not outlive it.
    pub fn raw(&self) -> sys::DLTensor {
        sys::DLTensor {
            data: self.data as *mut c_void,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype.to_dl(),
            shape: self.shape.as_ptr() as *mut i64,
            strides: std::ptr::null_mut(),
            byte_offset: self.byte_offset,
        }
    }

    fn host_ptr(&self) -> Result<*const u8> {
        match self.device.device_type {
            sys::kDLCPU | sys::kDLCUDAHost | sys::kDLCUDAManaged => {}
            other => {
                return Err(Error::binding(
                    Status::Device,
                    format!("TensorView: argument 'device': expected CPU-accessible memory, got device type {other}"),
                ))
            }
        }
        Ok(unsafe { (self.data as *const u8).add(self.byte_offset as usize) })
    }

    /// The bytes of a CPU-accessible view.
    pub fn as_bytes(&self) -> Result<&'a [u8]> {
        let p = self.host_ptr()?;
        let n = self.nbytes();
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: the view covers n readable bytes for 'a (constructor contract).
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// The elements as `T` (the dtype must be one `T` accepts).
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T]> {
        if !T::accepts(self.dtype) {
            return Err(Error::binding(
                Status::Dtype,
                format!(
                    "TensorView::as_slice: expected a dtype of {}, got {:?}",
                    std::any::type_name::<T>(),
                    self.dtype
                ),
            ));
        }
        let p = self.host_ptr()?;
        let n = self.numel() as usize;
        if n == 0 {
            return Ok(&[]);
        }
        if (p as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::binding(Status::Alignment, "TensorView::as_slice: data is misaligned for the type"));
        }
        Ok(unsafe { std::slice::from_raw_parts(p as *const T, n) })
    }
}

/// A borrowed, writable DLPack tensor over a mutable slice (an output).
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    data: *mut c_void,
    device: sys::DLDevice,
    dtype: DType,
    shape: Box<[i64]>,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: an exclusive borrow, like &'a mut [T].
unsafe impl Send for TensorViewMut<'_> {}
unsafe impl Sync for TensorViewMut<'_> {}

impl<'a> TensorViewMut<'a> {
    pub fn new<T: Element>(data: &'a mut [T], shape: &[i64]) -> Result<Self> {
        Self::with_dtype(data, T::DTYPE, shape)
    }

    pub fn with_dtype<T: Element>(data: &'a mut [T], dtype: DType, shape: &[i64]) -> Result<Self> {
        check_slice::<T>("TensorViewMut", data.len(), dtype, shape)?;
        Ok(TensorViewMut {
            data: data.as_mut_ptr() as *mut c_void,
            device: cpu(),
            dtype,
            shape: shape.into(),
            _borrow: PhantomData,
        })
    }

    pub fn from_slice<T: Element>(data: &'a mut [T]) -> Self {
        let n = data.len() as i64;
        Self::new(data, &[n]).expect("a 1-D view of a slice always fits")
    }

    /// # Safety
    /// `t` must describe compact memory valid for reads and writes, and not
    /// otherwise accessed, for `'a`.
    pub(crate) unsafe fn from_raw(t: &sys::DLTensor) -> Self {
        let shape: Box<[i64]> = if t.ndim > 0 && !t.shape.is_null() {
            std::slice::from_raw_parts(t.shape, t.ndim as usize).into()
        } else {
            Box::new([])
        };
        TensorViewMut {
            data: (t.data as *mut u8).add(t.byte_offset as usize) as *mut c_void,
            device: t.device,
            dtype: DType::from_dl(t.dtype),
            shape,
            _borrow: PhantomData,
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The same memory with another shape of the same element count.
    pub fn reshape(mut self, shape: &[i64]) -> Result<Self> {
        let n = numel("TensorViewMut::reshape", shape)?;
        let have: u64 = self.shape.iter().map(|&d| d.max(0) as u64).product();
        if n != have {
            return Err(Error::binding(
                Status::Shape,
                format!("TensorViewMut::reshape: argument 'shape': expected {have} elements, got {shape:?} = {n}"),
            ));
        }
        self.shape = shape.into();
        Ok(self)
    }

    /// A read-only view of the same memory, for as long as this borrow.
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView {
            data: self.data,
            device: self.device,
            dtype: self.dtype,
            shape: self.shape.clone(),
            byte_offset: 0,
            _borrow: PhantomData,
        }
    }

    /// The DLTensor to pass to C as an output.
    pub fn raw(&mut self) -> sys::DLTensor {
        sys::DLTensor {
            data: self.data,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype.to_dl(),
            shape: self.shape.as_ptr() as *mut i64,
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

/// Shorthand for an optional input's raw tensor.
pub(crate) fn opt_raw(v: Option<&TensorView<'_>>) -> Option<sys::DLTensor> {
    v.map(|v| v.raw())
}

pub(crate) fn opt_ptr(t: &Option<sys::DLTensor>) -> *const sys::DLTensor {
    t.as_ref().map_or(std::ptr::null(), |t| t as *const _)
}
