// DLTensor descriptors for memory the caller owns: a raw pointer (what
// TorchSharp's Tensor exposes: data_ptr(), shape, stride(), dtype) or a
// managed array pinned with a GCHandle for the descriptor's lifetime.
using System;
using System.Runtime.InteropServices;
using NVFP4.Native;

namespace NVFP4
{
    /// <summary>
    /// An owned DLTensor descriptor in unmanaged memory (the struct followed by
    /// its shape and strides arrays, so DLTensor* and the arrays never move),
    /// optionally pinning a managed array that holds the data. Dispose it after
    /// the calls that use it; the data itself is never copied.
    /// </summary>
    public sealed unsafe class DLTensorRef : IDisposable
    {
        IntPtr block;     // DLTensor + int64 shape[ndim] + int64 strides[ndim]
        GCHandle pin;     // pinned managed array, when built from one
        readonly object owner; // keeps a wrapped object (e.g. a snapshot) alive

        /// <summary>Pointer to the DLTensor (valid until Dispose).</summary>
        public DLTensor* Pointer { get { if (block == IntPtr.Zero) throw new ObjectDisposedException("DLTensorRef"); return (DLTensor*)block; } }
        public IntPtr Handle { get { return (IntPtr)Pointer; } }
        public DLTensor Value { get { return *Pointer; } }
        public long[] Shape { get { return Pointer->GetShape(); } }
        public DLDataType DType { get { return Pointer->dtype; } }

        DLTensorRef(IntPtr data, long[] shape, long[] strides, DLDataType dtype, DLDevice device, ulong byteOffset,
                    GCHandle pinHandle, object owner)
        {
            if (shape == null) throw new ArgumentNullException("shape");
            if (strides != null && strides.Length != shape.Length)
                throw new ArgumentException("strides must have one entry per dimension", "strides");
            int nd = shape.Length;
            block = Marshal.AllocHGlobal(sizeof(DLTensor) + 16 * Math.Max(nd, 1));
            var t = (DLTensor*)block;
            long* sh = (long*)(block + sizeof(DLTensor));
            long* st = sh + nd;
            for (int i = 0; i < nd; i++) sh[i] = shape[i];
            if (strides != null) for (int i = 0; i < nd; i++) st[i] = strides[i];
            t->data = data;
            t->device = device;
            t->ndim = nd;
            t->dtype = dtype;
            t->shape = (IntPtr)sh;
            t->strides = strides == null ? IntPtr.Zero : (IntPtr)st;
            t->byte_offset = byteOffset;
            pin = pinHandle;
            this.owner = owner;
        }

        /// <summary>
        /// Describes memory at <paramref name="data"/> (e.g. TorchSharp: tensor.data_ptr(), tensor.shape,
        /// tensor.stride(), DTypes.FromTorch((int)tensor.dtype), DLDevice.Cpu). Strides are in elements
        /// and may be null (compact row-major). The memory must outlive this object.
        /// </summary>
        public static DLTensorRef FromPointer(IntPtr data, long[] shape, long[] strides, DLDataType dtype,
                                              DLDevice device, ulong byteOffset = 0)
        {
            return new DLTensorRef(data, shape, strides, dtype, device, byteOffset, default(GCHandle), null);
        }

        /// <summary>CPU memory at <paramref name="data"/>, compact strides.</summary>
        public static DLTensorRef FromPointer(IntPtr data, DLDataType dtype, params long[] shape)
        {
            return FromPointer(data, shape, null, dtype, DLDevice.Cpu);
        }

        /// <summary>A copy of an existing descriptor (e.g. a checkpoint view or a snapshot) that keeps owner alive.</summary>
        public static DLTensorRef FromView(DLTensor view, object owner = null)
        {
            long[] strides = null;
            if (view.strides != IntPtr.Zero) { strides = new long[view.ndim]; Marshal.Copy(view.strides, strides, 0, view.ndim); }
            return new DLTensorRef(view.data, view.GetShape(), strides, view.dtype, view.device, view.byte_offset,
                                   default(GCHandle), owner);
        }

        static DLTensorRef Pin(Array array, long elementCount, long[] shape, DLDataType dtype)
        {
            if (array == null) throw new ArgumentNullException("array");
            if (shape == null || shape.Length == 0) shape = new long[] { elementCount };
            return FromArrayExact(array, dtype, shape);
        }

        /// <summary>
        /// Any blittable array with an explicit dtype and shape, used exactly as given (an empty shape is a
        /// 0-d scalar; null is 1-D [length]).
        /// </summary>
        public static DLTensorRef FromArrayExact(Array array, DLDataType dtype, long[] shape)
        {
            if (array == null) throw new ArgumentNullException("array");
            if (shape == null) shape = new long[] { array.Length };
            long n = 1;
            foreach (var d in shape) n *= d;
            int bits = dtype.bits * dtype.lanes;
            long needBytes = (n * bits + 7) / 8;
            long haveBytes = (long)Buffer.ByteLength(array);
            if (needBytes > haveBytes)
                throw new ArgumentException("shape needs " + needBytes + " bytes, the array has " + haveBytes);
            var h = GCHandle.Alloc(array, GCHandleType.Pinned);
            return new DLTensorRef(h.AddrOfPinnedObject(), shape, null, dtype, DLDevice.Cpu, 0, h, array);
        }

        /// <summary>float32 tensor over a pinned float[] (shape defaults to [length]).</summary>
        public static DLTensorRef FromArray(float[] a, params long[] shape) { return Pin(a, a.Length, shape, DLDataType.Float32); }
        /// <summary>uint8 tensor over a pinned byte[] (packed 4-bit data, E4M3 scales as bytes, ...).</summary>
        public static DLTensorRef FromArray(byte[] a, params long[] shape) { return Pin(a, a.Length, shape, DLDataType.UInt8); }
        /// <summary>byte[] with an explicit dtype (e.g. DLDataType.Float8E4M3, or float4_e2m1fn lanes 2).</summary>
        public static DLTensorRef FromArray(byte[] a, DLDataType dtype, params long[] shape) { return Pin(a, a.Length, shape, dtype); }
        /// <summary>16-bit floats stored as ushort[]: dtype DLDataType.Float16 (IEEE half) or DLDataType.BFloat16.</summary>
        public static DLTensorRef FromArray(ushort[] a, DLDataType dtype, params long[] shape) { return Pin(a, a.Length, shape, dtype); }
        /// <summary>int32 tensor over a pinned int[].</summary>
        public static DLTensorRef FromArray(int[] a, params long[] shape) { return Pin(a, a.Length, shape, DLDataType.Int32); }

        public void Dispose()
        {
            if (block != IntPtr.Zero) { Marshal.FreeHGlobal(block); block = IntPtr.Zero; }
            if (pin.IsAllocated) pin.Free();
            GC.KeepAlive(owner);
            GC.SuppressFinalize(this);
        }

        ~DLTensorRef()
        {
            if (block != IntPtr.Zero) Marshal.FreeHGlobal(block);
            if (pin.IsAllocated) pin.Free();
        }

        /// <summary>Pointer of an optional tensor (NULL for null).</summary>
        public static DLTensor* Ptr(DLTensorRef t) { return t == null ? null : t.Pointer; }
    }

    /// <summary>dtype helpers.</summary>
    public static class DTypes
    {
        /// <summary>
        /// DLDataType of a TorchSharp / PyTorch ScalarType value ((int)tensor.dtype): Byte 0, Int8 1,
        /// Int16 2, Int32 3, Int64 4, Float16 5, Float32 6, Float64 7, Bool 11, BFloat16 15.
        /// </summary>
        public static DLDataType FromTorch(int scalarType)
        {
            switch (scalarType)
            {
                case 0: return new DLDataType(DLDataTypeCode.kDLUInt, 8);
                case 1: return new DLDataType(DLDataTypeCode.kDLInt, 8);
                case 2: return new DLDataType(DLDataTypeCode.kDLInt, 16);
                case 3: return new DLDataType(DLDataTypeCode.kDLInt, 32);
                case 4: return new DLDataType(DLDataTypeCode.kDLInt, 64);
                case 5: return new DLDataType(DLDataTypeCode.kDLFloat, 16);
                case 6: return new DLDataType(DLDataTypeCode.kDLFloat, 32);
                case 7: return new DLDataType(DLDataTypeCode.kDLFloat, 64);
                case 11: return new DLDataType(DLDataTypeCode.kDLBool, 8);
                case 15: return new DLDataType(DLDataTypeCode.kDLBfloat, 16);
                default: throw new ArgumentException("no DLPack dtype for torch ScalarType " + scalarType);
            }
        }

        /// <summary>DLDevice of a TorchSharp DeviceType value (CPU 0, CUDA 1) and index.</summary>
        public static DLDevice DeviceFromTorch(int deviceType, int index)
        {
            if (deviceType == 0) return DLDevice.Cpu;
            if (deviceType == 1) return new DLDevice(DLDeviceType.kDLCUDA, index < 0 ? 0 : index);
            throw new ArgumentException("no DLPack device for torch DeviceType " + deviceType);
        }
    }
}
