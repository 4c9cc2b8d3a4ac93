//! Schema detection (`schema.h`) and safetensors checkpoints (`checkpoint.h`).
use crate::error::{check, static_str, Error, Result, Status};
use crate::session::{query_string, Linear, Session};
use crate::tensor::TensorView;
use crate::types::{Family, FileDtype, Format, Role};
use nvfp4_sys as sys;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr::{self, NonNull};

/// One tensor of a checkpoint, for schema detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDesc {
    pub name: String,
    /// `FileDtype::Unknown`: not checked.
    pub dtype: FileDtype,
    /// None: not checked. At most 8 dimensions.
    pub shape: Option<Vec<i64>>,
}

impl TensorDesc {
    pub fn new(name: impl Into<String>, dtype: FileDtype, shape: &[i64]) -> Self {
        TensorDesc { name: name.into(), dtype, shape: Some(shape.to_vec()) }
    }

    /// Only the name is known.
    pub fn name_only(name: impl Into<String>) -> Self {
        TensorDesc { name: name.into(), dtype: FileDtype::Unknown, shape: None }
    }
}

/// C descriptors plus the CStrings they point to.
struct RawDescs {
    _names: Vec<CString>,
    descs: Vec<sys::Q4_tensor_desc>,
}

fn raw_descs(tensors: &[TensorDesc]) -> Result<RawDescs> {
    let mut names = Vec::with_capacity(tensors.len());
    let mut descs = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let name = CString::new(t.name.as_str()).map_err(|_| {
            Error::binding(Status::InvalidArgument, format!("detect: argument 'tensors[{i}].name': contains NUL"))
        })?;
        let mut d = sys::Q4_tensor_desc { name: name.as_ptr(), dtype: t.dtype.raw(), ndim: -1, shape: [0; 8] };
        if let Some(s) = &t.shape {
            if s.len() > sys::Q4_MAX_NDIM {
                return Err(Error::binding(
                    Status::Shape,
                    format!("detect: argument 'tensors[{i}].shape': expected at most 8 dimensions, got {}", s.len()),
                ));
            }
            d.ndim = s.len() as i32;
            d.shape[..s.len()].copy_from_slice(s);
        }
        names.push(name);
        descs.push(d);
    }
    Ok(RawDescs { _names: names, descs })
}

/// `Q4_schema_summary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaSummary {
    pub format: Option<Format>,
    pub family: Option<Family>,
    pub num_linears: i32,
    /// Linears per `Q4_SCHEMA_*` value.
    pub family_counts: [i32; 8],
    pub num_incomplete: i32,
}

fn summary_from(s: &sys::Q4_schema_summary) -> SchemaSummary {
    SchemaSummary {
        format: Format::from_raw(s.format),
        family: Family::from_raw(s.family),
        num_linears: s.num_linears,
        family_counts: s.family_counts,
        num_incomplete: s.num_incomplete,
    }
}

fn empty_summary() -> sys::Q4_schema_summary {
    // SAFETY: all-zero is valid.
    let mut s: sys::Q4_schema_summary = unsafe { std::mem::zeroed() };
    s.struct_size = std::mem::size_of::<sys::Q4_schema_summary>() as u32;
    s
}

/// One 4-bit linear found by [`detect_linears`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearSchema {
    pub format: Option<Format>,
    pub family: Option<Family>,
    /// e.g. "model.layers.0.mlp.up_proj".
    pub prefix: String,
    pub prefix_tensor: usize,
    /// Tensor index per `Q4_ROLE_*` (None: absent).
    pub roles: [Option<usize>; sys::Q4_ROLE_COUNT as usize],
    /// The stored global scale is 1/g (compressed-tensors).
    pub global_scale_inverted: bool,
}

impl LinearSchema {
    pub fn role(&self, role: Role) -> Option<usize> {
        self.roles[role.raw() as usize]
    }
}

/// `Q4_detect_schema`. A schema error (incomplete, ambiguous, wrong
/// dtype/shape) is `Status::Schema` with the prefix and key in the message.
pub fn detect_schema(tensors: &[TensorDesc]) -> Result<SchemaSummary> {
    let raw = raw_descs(tensors)?;
    let mut s = empty_summary();
    check(unsafe { sys::Q4_detect_schema(raw.descs.as_ptr(), raw.descs.len(), &mut s) })?;
    Ok(summary_from(&s))
}

/// `Q4_detect_linears`: the complete linears, in order of first appearance.
pub fn detect_linears(tensors: &[TensorDesc]) -> Result<Vec<LinearSchema>> {
    let raw = raw_descs(tensors)?;
    let mut found = 0usize;
    let rc = unsafe { sys::Q4_detect_linears(raw.descs.as_ptr(), raw.descs.len(), ptr::null_mut(), 0, &mut found) };
    if rc != sys::Q4_OK && rc != sys::Q4_ERR_BUFFER_TOO_SMALL {
        return Err(Error::from_code(rc));
    }
    // SAFETY: all-zero is valid.
    let mut blank: sys::Q4_linear_schema = unsafe { std::mem::zeroed() };
    blank.struct_size = std::mem::size_of::<sys::Q4_linear_schema>() as u32;
    let mut out = vec![blank; found];
    check(unsafe {
        sys::Q4_detect_linears(raw.descs.as_ptr(), raw.descs.len(), out.as_mut_ptr(), out.len(), &mut found)
    })?;
    out.truncate(found);
    Ok(out
        .iter()
        .map(|l| {
            let name = &tensors[l.prefix_tensor as usize].name;
            let mut roles = [None; sys::Q4_ROLE_COUNT as usize];
            for (r, slot) in roles.iter_mut().enumerate() {
                *slot = usize::try_from(l.roles[r]).ok();
            }
            LinearSchema {
                format: Format::from_raw(l.format),
                family: Family::from_raw(l.family),
                prefix: name.get(..l.prefix_len as usize).unwrap_or(name).to_string(),
                prefix_tensor: l.prefix_tensor as usize,
                roles,
                global_scale_inverted: l.global_scale_inverted != 0,
            }
        })
        .collect())
}

/// `Q4_schema_name`.
pub fn schema_name(family: Family) -> &'static str {
    unsafe { static_str(sys::Q4_schema_name(family.raw())) }
}
/// `Q4_format_name`.
pub fn format_name(format: Format) -> &'static str {
    unsafe { static_str(sys::Q4_format_name(format.raw())) }
}
/// `Q4_dtype_name`.
pub fn dtype_name(dtype: FileDtype) -> &'static str {
    unsafe { static_str(sys::Q4_dtype_name(dtype.raw())) }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::binding(Status::InvalidArgument, format!("{what}: contains a NUL byte")))
}

fn path_cstring(what: &str, p: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::binding(Status::InvalidArgument, format!("{what}: contains a NUL byte")))
}

/// Information about one tensor of an open checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: FileDtype,
    pub shape: Vec<i64>,
    pub nbytes: i64,
}

/// An open, memory-mapped, validated safetensors file (`Q4_checkpoint`).
///
/// `Send + Sync`: a reader is immutable after open and usable from several
/// threads at once (checkpoint.h). Tensor views borrow the checkpoint.
#[derive(Debug)]
pub struct Checkpoint {
    ptr: NonNull<sys::Q4_checkpoint>,
}

unsafe impl Send for Checkpoint {}
unsafe impl Sync for Checkpoint {}

impl Checkpoint {
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let p = path_cstring("Checkpoint::open: argument 'path'", path.as_ref())?;
        let mut c = ptr::null_mut();
        check(unsafe { sys::Q4_checkpoint_open(p.as_ptr(), &mut c) })?;
        Ok(Checkpoint { ptr: NonNull::new(c).expect("OK and NULL") })
    }

    pub fn len(&self) -> Result<usize> {
        let mut n = 0usize;
        check(unsafe { sys::Q4_checkpoint_count(self.ptr.as_ptr(), &mut n) })?;
        Ok(n)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    pub fn tensor_info(&self, index: usize) -> Result<TensorInfo> {
        let mut d = sys::Q4_tensor_desc { name: ptr::null(), dtype: 0, ndim: 0, shape: [0; 8] };
        let mut nbytes = 0i64;
        check(unsafe { sys::Q4_checkpoint_tensor_info(self.ptr.as_ptr(), index, &mut d, &mut nbytes) })?;
        let name = if d.name.is_null() {
            String::new()
        } else {
            unsafe { CStr::from_ptr(d.name) }.to_string_lossy().into_owned()
        };
        let nd = d.ndim.clamp(0, 8) as usize;
        Ok(TensorInfo {
            name,
            dtype: FileDtype::from_raw(d.dtype).unwrap_or(FileDtype::Unknown),
            shape: d.shape[..nd].to_vec(),
            nbytes,
        })
    }

    /// Index of the tensor named `name` (`Status::NotFound` if absent).
    pub fn find(&self, name: &str) -> Result<usize> {
        let n = cstring("Checkpoint::find: argument 'name'", name)?;
        let mut i = 0usize;
        check(unsafe { sys::Q4_checkpoint_find(self.ptr.as_ptr(), n.as_ptr(), &mut i) })?;
        Ok(i)
    }

    /// A borrowed read-only view into the mapped file.
    pub fn tensor(&self, index: usize) -> Result<TensorView<'_>> {
        // SAFETY: all-zero is valid.
        let mut t: sys::DLTensor = unsafe { std::mem::zeroed() };
        check(unsafe { sys::Q4_checkpoint_tensor(self.ptr.as_ptr(), index, &mut t) })?;
        // SAFETY: valid for reads while the checkpoint is open (this borrow).
        Ok(unsafe { TensorView::from_raw(&t) })
    }

    /// A `__metadata__` value (`Status::NotFound` if absent).
    pub fn metadata(&self, key: &str) -> Result<String> {
        let k = cstring("Checkpoint::metadata: argument 'key'", key)?;
        query_string(|b, c, n| unsafe { sys::Q4_checkpoint_metadata(self.ptr.as_ptr(), k.as_ptr(), b, c, n) })
    }

    /// Schema detection over the file's tensors.
    pub fn detect(&self) -> Result<SchemaSummary> {
        let mut s = empty_summary();
        check(unsafe { sys::Q4_checkpoint_detect(self.ptr.as_ptr(), &mut s) })?;
        Ok(summary_from(&s))
    }

    /// Creates the linear stored under `prefix` in `session`.
    pub fn create_linear<'s>(&self, session: &'s Session, prefix: &str) -> Result<Linear<'s>> {
        let p = cstring("Checkpoint::create_linear: argument 'prefix'", prefix)?;
        let mut l = ptr::null_mut();
        check(unsafe { sys::Q4_checkpoint_linear_create(session.as_ptr(), self.ptr.as_ptr(), p.as_ptr(), &mut l) })?;
        Ok(Linear::from_ptr(l))
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        unsafe { sys::Q4_checkpoint_close(self.ptr.as_ptr()) };
    }
}

/// Builds a safetensors file (`Q4_checkpoint_writer`): tensors are copied
/// when added; `commit` writes atomically (temporary file, fsync, rename).
///
/// `Send` but not `Sync`: a writer is not thread-safe (checkpoint.h), and
/// every mutating call takes `&mut self`.
#[derive(Debug)]
pub struct CheckpointWriter {
    ptr: NonNull<sys::Q4_checkpoint_writer>,
}

unsafe impl Send for CheckpointWriter {}

impl CheckpointWriter {
    pub fn new() -> Result<CheckpointWriter> {
        let mut w = ptr::null_mut();
        check(unsafe { sys::Q4_checkpoint_writer_create(&mut w) })?;
        Ok(CheckpointWriter { ptr: NonNull::new(w).expect("OK and NULL") })
    }

    /// Adds (copies) a tensor stored as `dtype`; its byte size must match.
    pub fn add(&mut self, name: &str, dtype: FileDtype, data: &TensorView<'_>) -> Result<()> {
        let n = cstring("CheckpointWriter::add: argument 'name'", name)?;
        let t = data.raw();
        check(unsafe { sys::Q4_checkpoint_writer_add(self.ptr.as_ptr(), n.as_ptr(), dtype.raw(), &t) })
    }

    pub fn metadata(&mut self, key: &str, value: &str) -> Result<()> {
        let k = cstring("CheckpointWriter::metadata: argument 'key'", key)?;
        let v = cstring("CheckpointWriter::metadata: argument 'value'", value)?;
        check(unsafe { sys::Q4_checkpoint_writer_metadata(self.ptr.as_ptr(), k.as_ptr(), v.as_ptr()) })
    }

    pub fn commit(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let p = path_cstring("CheckpointWriter::commit: argument 'path'", path.as_ref())?;
        check(unsafe { sys::Q4_checkpoint_writer_commit(self.ptr.as_ptr(), p.as_ptr()) })
    }
}

impl Drop for CheckpointWriter {
    fn drop(&mut self) {
        unsafe { sys::Q4_checkpoint_writer_destroy(self.ptr.as_ptr()) };
    }
}
