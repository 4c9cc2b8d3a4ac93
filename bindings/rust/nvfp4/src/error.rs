//! Status codes and the error type.
use nvfp4_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// Every non-OK status of the C ABI (`Q4_ERR_*`), plus `Unknown` for a code
/// a newer library might append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArgument,
    NullPointer,
    Dtype,
    Shape,
    Device,
    Strides,
    Alignment,
    Overflow,
    Aliasing,
    NonFinite,
    Unsupported,
    OutOfMemory,
    BufferTooSmall,
    Busy,
    Schema,
    NotFound,
    Cuda,
    NotAvailable,
    Io,
    Format,
    State,
    Internal,
    Unknown(i32),
}

impl Status {
    /// The status of a non-zero return code.
    pub fn from_code(code: i32) -> Status {
        use Status::*;
        match code {
            sys::Q4_ERR_INVALID_ARGUMENT => InvalidArgument,
            sys::Q4_ERR_NULL_POINTER => NullPointer,
            sys::Q4_ERR_DTYPE => Dtype,
            sys::Q4_ERR_SHAPE => Shape,
            sys::Q4_ERR_DEVICE => Device,
            sys::Q4_ERR_STRIDES => Strides,
            sys::Q4_ERR_ALIGNMENT => Alignment,
            sys::Q4_ERR_OVERFLOW => Overflow,
            sys::Q4_ERR_ALIASING => Aliasing,
            sys::Q4_ERR_NON_FINITE => NonFinite,
            sys::Q4_ERR_UNSUPPORTED => Unsupported,
            sys::Q4_ERR_OUT_OF_MEMORY => OutOfMemory,
            sys::Q4_ERR_BUFFER_TOO_SMALL => BufferTooSmall,
            sys::Q4_ERR_BUSY => Busy,
            sys::Q4_ERR_SCHEMA => Schema,
            sys::Q4_ERR_NOT_FOUND => NotFound,
            sys::Q4_ERR_CUDA => Cuda,
            sys::Q4_ERR_NOT_AVAILABLE => NotAvailable,
            sys::Q4_ERR_IO => Io,
            sys::Q4_ERR_FORMAT => Format,
            sys::Q4_ERR_STATE => State,
            sys::Q4_ERR_INTERNAL => Internal,
            other => Unknown(other),
        }
    }

    /// The pinned `Q4_ERR_*` value.
    pub fn code(self) -> i32 {
        use Status::*;
        match self {
            InvalidArgument => sys::Q4_ERR_INVALID_ARGUMENT,
            NullPointer => sys::Q4_ERR_NULL_POINTER,
            Dtype => sys::Q4_ERR_DTYPE,
            Shape => sys::Q4_ERR_SHAPE,
            Device => sys::Q4_ERR_DEVICE,
            Strides => sys::Q4_ERR_STRIDES,
            Alignment => sys::Q4_ERR_ALIGNMENT,
            Overflow => sys::Q4_ERR_OVERFLOW,
            Aliasing => sys::Q4_ERR_ALIASING,
            NonFinite => sys::Q4_ERR_NON_FINITE,
            Unsupported => sys::Q4_ERR_UNSUPPORTED,
            OutOfMemory => sys::Q4_ERR_OUT_OF_MEMORY,
            BufferTooSmall => sys::Q4_ERR_BUFFER_TOO_SMALL,
            Busy => sys::Q4_ERR_BUSY,
            Schema => sys::Q4_ERR_SCHEMA,
            NotFound => sys::Q4_ERR_NOT_FOUND,
            Cuda => sys::Q4_ERR_CUDA,
            NotAvailable => sys::Q4_ERR_NOT_AVAILABLE,
            Io => sys::Q4_ERR_IO,
            Format => sys::Q4_ERR_FORMAT,
            State => sys::Q4_ERR_STATE,
            Internal => sys::Q4_ERR_INTERNAL,
            Unknown(c) => c,
        }
    }

    /// The library's static text for this status (`Q4_status_string`).
    pub fn as_str(self) -> &'static str {
        status_string(self.code())
    }
}

/// `Q4_status_string`: static text for any code.
pub fn status_string(code: i32) -> &'static str {
    // SAFETY: the library returns static, never-NULL, NUL-terminated text.
    unsafe { static_str(sys::Q4_status_string(code)) }
}

/// A failed library call: the status and this thread's `Q4_last_error()`
/// message, captured right after the failing call (on the same thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    /// Captures the calling thread's last error for a failed status code.
    pub fn from_code(code: i32) -> Error {
        Error { status: Status::from_code(code), message: last_error() }
    }

    /// An error raised by the binding itself before any library call (for
    /// instance a slice whose length disagrees with the shape).
    pub fn binding(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The pinned status code.
    pub fn code(&self) -> i32 {
        self.status.code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status.as_str(), self.status.code(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// This thread's last error message (`Q4_last_error`), "" if none.
pub fn last_error() -> String {
    // SAFETY: never NULL; valid until this thread's next failing call; copied.
    unsafe { CStr::from_ptr(sys::Q4_last_error()).to_string_lossy().into_owned() }
}

/// `Q4_clear_error`.
pub fn clear_error() {
    unsafe { sys::Q4_clear_error() }
}

/// Turns a status code into a `Result`, reading `Q4_last_error` on failure.
pub(crate) fn check(code: i32) -> Result<()> {
    if code == sys::Q4_OK {
        Ok(())
    } else {
        Err(Error::from_code(code))
    }
}

/// # Safety
/// `p` must be NULL or a static NUL-terminated string.
pub(crate) unsafe fn static_str(p: *const std::ffi::c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    CStr::from_ptr(p).to_str().unwrap_or("")
}

/// Text of a fixed-size C char array (up to its first NUL).
pub(crate) fn array_str(a: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
