// Blittable mirrors of the public C structs of libNVFP4 (include/nvfp4/*.h).
// Field names are the C names on purpose: tests/LayoutTests compares every
// field's Marshal.OffsetOf and every struct's Marshal.SizeOf with the output
// of layout_probe.c, which prints offsetof/sizeof from the real headers.
using System;
using System.Runtime.InteropServices;

namespace NVFP4.Native
{
    /// <summary>DLPack device types (dlpack.h DLDeviceType).</summary>
    public enum DLDeviceType : int
    {
        kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8, kDLVPI = 9,
        kDLROCM = 10, kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13, kDLOneAPI = 14, kDLWebGPU = 15,
        kDLHexagon = 16, kDLMAIA = 17,
    }

    /// <summary>DLPack type codes (dlpack.h DLDataTypeCode).</summary>
    public enum DLDataTypeCode : byte
    {
        kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6,
        kDLFloat8_e3m4 = 7, kDLFloat8_e4m3 = 8, kDLFloat8_e4m3b11fnuz = 9, kDLFloat8_e4m3fn = 10,
        kDLFloat8_e4m3fnuz = 11, kDLFloat8_e5m2 = 12, kDLFloat8_e5m2fnuz = 13, kDLFloat8_e8m0fnu = 14,
        kDLFloat6_e2m3fn = 15, kDLFloat6_e3m2fn = 16, kDLFloat4_e2m1fn = 17,
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct DLPackVersion
    {
        public uint major;
        public uint minor;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct DLDevice
    {
        public DLDeviceType device_type;
        public int device_id;

        public DLDevice(DLDeviceType type, int id) { device_type = type; device_id = id; }
        public static DLDevice Cpu { get { return new DLDevice(DLDeviceType.kDLCPU, 0); } }
        public override string ToString() { return device_type + ":" + device_id; }
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct DLDataType
    {
        public byte code;
        public byte bits;
        public ushort lanes;

        public DLDataType(DLDataTypeCode c, byte b, ushort l = 1) { code = (byte)c; bits = b; lanes = l; }
        public static DLDataType Float32 { get { return new DLDataType(DLDataTypeCode.kDLFloat, 32); } }
        public static DLDataType Float16 { get { return new DLDataType(DLDataTypeCode.kDLFloat, 16); } }
        public static DLDataType BFloat16 { get { return new DLDataType(DLDataTypeCode.kDLBfloat, 16); } }
        public static DLDataType UInt8 { get { return new DLDataType(DLDataTypeCode.kDLUInt, 8); } }
        public static DLDataType Int8 { get { return new DLDataType(DLDataTypeCode.kDLInt, 8); } }
        public static DLDataType Int32 { get { return new DLDataType(DLDataTypeCode.kDLInt, 32); } }
        public static DLDataType Int64 { get { return new DLDataType(DLDataTypeCode.kDLInt, 64); } }
        public static DLDataType Float8E4M3 { get { return new DLDataType(DLDataTypeCode.kDLFloat8_e4m3fn, 8); } }
        /// <summary>Bytes per element when bits*lanes is a whole number of bytes (0 otherwise).</summary>
        public int ElementBytes { get { int b = bits * lanes; return b % 8 == 0 ? b / 8 : 0; } }
        public override string ToString() { return ((DLDataTypeCode)code) + "/" + bits + "x" + lanes; }
    }

    /// <summary>DLPack DLTensor; shape and strides point to int64 arrays (strides may be NULL).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct DLTensor
    {
        public IntPtr data;
        public DLDevice device;
        public int ndim;
        public DLDataType dtype;
        public IntPtr shape;
        public IntPtr strides;
        public ulong byte_offset;

        /// <summary>Copies the shape out of native memory.</summary>
        public long[] GetShape()
        {
            var s = new long[ndim];
            if (ndim > 0) Marshal.Copy(shape, s, 0, ndim);
            return s;
        }

        /// <summary>Product of the shape.</summary>
        public long ElementCount()
        {
            long n = 1;
            foreach (var d in GetShape()) n *= d;
            return n;
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct DLManagedTensor
    {
        public DLTensor dl_tensor;
        public IntPtr manager_ctx;
        public IntPtr deleter; // void (*)(DLManagedTensor*)
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct DLManagedTensorVersioned
    {
        public DLPackVersion version;
        public IntPtr manager_ctx;
        public IntPtr deleter; // void (*)(DLManagedTensorVersioned*)
        public ulong flags;
        public DLTensor dl_tensor;
    }

    /// <summary>Deleter of a DLManagedTensorVersioned.</summary>
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void DLManagedTensorVersionedDeleter(IntPtr self);

    /// <summary>Q4_log_callback: (level, message, user).</summary>
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void Q4_log_callback(int level, IntPtr message, IntPtr user);

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_op_options
    {
        public uint struct_size;
        public int compute_path;
        public int backend;
        public int target;
        public int device_id;
        public int math_mode;
        public int num_threads;
        public int reserved0;
        public IntPtr stream;
        public fixed ulong reserved[6];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_capabilities
    {
        public uint struct_size;
        public int abi_version;
        public ulong cpu_features;
        public int isa_best;
        public int isa_active;
        public int num_cpus;
        public int cuda_state;
        public int cuda_runtime_version;
        public int cuda_driver_version;
        public int cuda_device_count;
        public int managed_memory;
        public int fp4_tensor_cores;
        public int reserved0;
        public fixed byte cpu_vendor[16];
        public fixed byte cpu_brand[64];
        public fixed byte cuda_archs[64];
        public fixed byte native_load_state[256];
        public fixed ulong reserved[8];

        public string CpuVendor { get { fixed (byte* p = cpu_vendor) return Text.FromFixed(p, 16); } }
        public string CpuBrand { get { fixed (byte* p = cpu_brand) return Text.FromFixed(p, 64); } }
        public string CudaArchs { get { fixed (byte* p = cuda_archs) return Text.FromFixed(p, 64); } }
        public string NativeLoadState { get { fixed (byte* p = native_load_state) return Text.FromFixed(p, 256); } }
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_tune_result
    {
        public uint struct_size;
        public int dim;
        public int runs;
        public int candidates;
        public int kc_default;
        public int mc_default;
        public int kc_best;
        public int mc_best;
        public double default_ms;
        public double best_ms;
        public int adopted;
        public int persisted;
        public fixed byte cache_path[256];
        public fixed byte cpu_signature[192];
        public fixed ulong reserved[4];

        public string CachePath { get { fixed (byte* p = cache_path) return Text.FromFixed(p, 256); } }
        public string CpuSignature { get { fixed (byte* p = cpu_signature) return Text.FromFixed(p, 192); } }
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct NF4_state
    {
        public uint struct_size;
        public int blocksize;
        public IntPtr absmax;           // const DLTensor*
        public IntPtr quant_map;        // const DLTensor* or NULL
        public IntPtr nested_absmax;    // const DLTensor* or NULL
        public IntPtr nested_quant_map; // const DLTensor* or NULL
        public float nested_offset;
        public int nested_blocksize;
        public fixed ulong reserved[4];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_tensor_desc
    {
        public IntPtr name; // const char* (UTF-8)
        public int dtype;
        public int ndim;
        public fixed long shape[8];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_linear_schema
    {
        public uint struct_size;
        public int format;
        public int family;
        public int prefix_len;
        public int prefix_tensor;
        public fixed int roles[16];
        public int global_scale_inverted;
        public int reserved0;
        public fixed ulong reserved[4];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_schema_summary
    {
        public uint struct_size;
        public int format;
        public int family;
        public int num_linears;
        public fixed int family_counts[8];
        public int num_incomplete;
        public int reserved0;
        public fixed ulong reserved[4];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_session_config
    {
        public uint struct_size;
        public int compute_path;
        public int backend;
        public int target;
        public int device_id;
        public int unified_memory;
        public int num_threads;
        public int diagnostics;
        public int math_mode;
        public int reserved0;
        public fixed ulong reserved[6];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_session_stats
    {
        public uint struct_size;
        public int live_linears;
        public int live_mutables;
        public int live_snapshots;
        public long live_buffers;
        public long live_bytes;
        public long managed_bytes;
        public long forwards;
        public long implicit_copies;
        public fixed ulong reserved[4];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_weight_bundle
    {
        public uint struct_size;
        public int format;
        public int source;
        public int scale_layout;
        public IntPtr weight; // const DLTensor*
        public long out_features;
        public long in_features;
        public IntPtr scale;  // const DLTensor*
        public float global_scale;
        public int blocksize;
        public IntPtr nf4;    // const NF4_state*
        public IntPtr bias;   // const DLTensor*
        public fixed ulong reserved[6];
    }

    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Q4_linear_info
    {
        public uint struct_size;
        public int format;
        public int backend;
        public int compute_path;
        public int fell_back;
        public int isa;
        public int target;
        public int unified_memory;
        public int scale_layout;
        public int math_mode;
        public long out_features;
        public long in_features;
        public long weight_bytes;
        public ulong weight_version;
        public fixed ulong reserved[4];
    }
}
