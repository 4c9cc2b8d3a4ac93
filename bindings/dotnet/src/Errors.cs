// Status codes (q4_base.h, pinned) and the exceptions they become. The test
// runner checks every value against Q4_status_string.
using System;
using NVFP4.Native;

namespace NVFP4
{
    /// <summary>Q4_OK and Q4_ERR_* (values pinned by the C ABI).</summary>
    public enum Q4Status
    {
        Ok = 0,
        InvalidArgument = 1, // Q4_ERR_INVALID_ARGUMENT
        NullPointer = 2, // Q4_ERR_NULL_POINTER
        Dtype = 3, // Q4_ERR_DTYPE
        Shape = 4, // Q4_ERR_SHAPE
        Device = 5, // Q4_ERR_DEVICE
        Strides = 6, // Q4_ERR_STRIDES
        Alignment = 7, // Q4_ERR_ALIGNMENT
        Overflow = 8, // Q4_ERR_OVERFLOW
        Aliasing = 9, // Q4_ERR_ALIASING
        NonFinite = 10, // Q4_ERR_NON_FINITE
        Unsupported = 11, // Q4_ERR_UNSUPPORTED
        OutOfMemory = 12, // Q4_ERR_OUT_OF_MEMORY
        BufferTooSmall = 13, // Q4_ERR_BUFFER_TOO_SMALL
        Busy = 14, // Q4_ERR_BUSY
        Schema = 15, // Q4_ERR_SCHEMA
        NotFound = 16, // Q4_ERR_NOT_FOUND
        Cuda = 17, // Q4_ERR_CUDA
        NotAvailable = 18, // Q4_ERR_NOT_AVAILABLE
        Io = 19, // Q4_ERR_IO
        Format = 20, // Q4_ERR_FORMAT
        State = 21, // Q4_ERR_STATE
        Internal = 99, // Q4_ERR_INTERNAL
    }

    /// <summary>A failed libNVFP4 call: the status, Q4_status_string and this thread's Q4_last_error().</summary>
    public class Q4Exception : Exception
    {
        public Q4Status Status { get; private set; }
        /// <summary>Raw status value (differs from (int)Status only for codes this binding does not know).</summary>
        public int Code { get; private set; }
        /// <summary>Q4_last_error() at the time of the failure.</summary>
        public string NativeMessage { get; private set; }

        public Q4Exception(int code, string nativeMessage)
            : base(Text.FromStatic(NativeMethods.Q4_status_string(code)) + " (" + code + "): " + nativeMessage)
        {
            Code = code;
            Status = (Q4Status)code;
            NativeMessage = nativeMessage;
        }

        /// <summary>The exception class for a status (Q4Exception itself for unknown codes).</summary>
        public static Q4Exception Create(int code, string message)
        {
            switch (code)
            {
                case 1: return new InvalidArgumentException(code, message);
                case 2: return new NullPointerException(code, message);
                case 3: return new DtypeException(code, message);
                case 4: return new ShapeException(code, message);
                case 5: return new DeviceException(code, message);
                case 6: return new StridesException(code, message);
                case 7: return new AlignmentException(code, message);
                case 8: return new OverflowException(code, message);
                case 9: return new AliasingException(code, message);
                case 10: return new NonFiniteException(code, message);
                case 11: return new UnsupportedException(code, message);
                case 12: return new OutOfMemoryException(code, message);
                case 13: return new BufferTooSmallException(code, message);
                case 14: return new BusyException(code, message);
                case 15: return new SchemaException(code, message);
                case 16: return new NotFoundException(code, message);
                case 17: return new CudaException(code, message);
                case 18: return new NotAvailableException(code, message);
                case 19: return new IoException(code, message);
                case 20: return new FormatException(code, message);
                case 21: return new StateException(code, message);
                case 99: return new InternalException(code, message);
                default: return new Q4Exception(code, message);
            }
        }

        /// <summary>Throws the typed exception for a non-zero status (reads Q4_last_error() on this thread).</summary>
        public static void Check(int status)
        {
            if (status != 0) throw Create(status, Text.FromStatic(NativeMethods.Q4_last_error()));
        }
    }

    /// <summary>Q4_ERR_INVALID_ARGUMENT (1).</summary>
    public class InvalidArgumentException : Q4Exception { public InvalidArgumentException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_NULL_POINTER (2).</summary>
    public class NullPointerException : Q4Exception { public NullPointerException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_DTYPE (3).</summary>
    public class DtypeException : Q4Exception { public DtypeException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_SHAPE (4).</summary>
    public class ShapeException : Q4Exception { public ShapeException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_DEVICE (5).</summary>
    public class DeviceException : Q4Exception { public DeviceException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_STRIDES (6).</summary>
    public class StridesException : Q4Exception { public StridesException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_ALIGNMENT (7).</summary>
    public class AlignmentException : Q4Exception { public AlignmentException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_OVERFLOW (8).</summary>
    public class OverflowException : Q4Exception { public OverflowException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_ALIASING (9).</summary>
    public class AliasingException : Q4Exception { public AliasingException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_NON_FINITE (10).</summary>
    public class NonFiniteException : Q4Exception { public NonFiniteException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_UNSUPPORTED (11).</summary>
    public class UnsupportedException : Q4Exception { public UnsupportedException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_OUT_OF_MEMORY (12).</summary>
    public class OutOfMemoryException : Q4Exception { public OutOfMemoryException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_BUFFER_TOO_SMALL (13).</summary>
    public class BufferTooSmallException : Q4Exception { public BufferTooSmallException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_BUSY (14).</summary>
    public class BusyException : Q4Exception { public BusyException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_SCHEMA (15).</summary>
    public class SchemaException : Q4Exception { public SchemaException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_NOT_FOUND (16).</summary>
    public class NotFoundException : Q4Exception { public NotFoundException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_CUDA (17).</summary>
    public class CudaException : Q4Exception { public CudaException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_NOT_AVAILABLE (18).</summary>
    public class NotAvailableException : Q4Exception { public NotAvailableException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_IO (19).</summary>
    public class IoException : Q4Exception { public IoException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_FORMAT (20).</summary>
    public class FormatException : Q4Exception { public FormatException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_STATE (21).</summary>
    public class StateException : Q4Exception { public StateException(int code, string message) : base(code, message) { } }
    /// <summary>Q4_ERR_INTERNAL (99).</summary>
    public class InternalException : Q4Exception { public InternalException(int code, string message) : base(code, message) { } }
}
