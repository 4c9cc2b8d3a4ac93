// safetensors checkpoints (read, write, detect, create linears) and CUDA helpers.
using System;
using System.Collections.Generic;
using NVFP4.Native;

namespace NVFP4
{
    public sealed class CheckpointTensorInfo
    {
        public string Name;
        public int Dtype;
        public long[] Shape;
        public long NBytes;
        public TensorDesc ToDesc() { return new TensorDesc(Name, Dtype, Shape); }
    }

    /// <summary>A memory-mapped, validated .safetensors file.</summary>
    public sealed unsafe class Checkpoint : IDisposable
    {
        public CheckpointHandle Handle { get; private set; }
        Checkpoint(CheckpointHandle h) { Handle = h; }

        public static Checkpoint Open(string path)
        {
            Boot.Require(Boot.Ready);
            var h = new CheckpointHandle();
            var p = Text.Utf8Z(path);
            IntPtr c = IntPtr.Zero;
            fixed (byte* b = p) Q4Exception.Check(NativeMethods.Q4_checkpoint_open(b, &c));
            h.Set(c);
            return new Checkpoint(h);
        }

        public int Count
        {
            get
            {
                Boot.Require(Boot.Ready);
                UIntPtr n = UIntPtr.Zero;
                using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_checkpoint_count(l.Ptr, &n));
                return (int)n.ToUInt64();
            }
        }

        public CheckpointTensorInfo Info(int index)
        {
            Boot.Require(Boot.Ready);
            Q4_tensor_desc d = default(Q4_tensor_desc);
            long nbytes = 0;
            using (var l = new Lease(Handle))
            {
                Q4Exception.Check(NativeMethods.Q4_checkpoint_tensor_info(l.Ptr, (UIntPtr)index, &d, &nbytes));
                var r = new CheckpointTensorInfo { Name = Text.FromUtf8(d.name), Dtype = d.dtype, NBytes = nbytes,
                                                   Shape = new long[Math.Max(d.ndim, 0)] };
                for (int i = 0; i < r.Shape.Length; i++) r.Shape[i] = d.shape[i];
                return r;
            }
        }

        /// <summary>All tensors as descriptors (input of Schema.DetectLinears).</summary>
        public List<TensorDesc> TensorDescs()
        {
            var list = new List<TensorDesc>();
            int n = Count;
            for (int i = 0; i < n; i++) list.Add(Info(i).ToDesc());
            return list;
        }

        /// <summary>Index of a tensor; NotFoundException when absent.</summary>
        public int Find(string name)
        {
            Boot.Require(Boot.Ready);
            UIntPtr idx = UIntPtr.Zero;
            var b = Text.Utf8Z(name);
            using (var l = new Lease(Handle))
            fixed (byte* p = b) Q4Exception.Check(NativeMethods.Q4_checkpoint_find(l.Ptr, p, &idx));
            return (int)idx.ToUInt64();
        }

        /// <summary>A read-only view into the mapping (keeps this checkpoint referenced; valid while it is open).</summary>
        public DLTensorRef Tensor(int index)
        {
            Boot.Require(Boot.Ready);
            DLTensor v = default(DLTensor);
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_checkpoint_tensor(l.Ptr, (UIntPtr)index, &v));
            return DLTensorRef.FromView(v, this);
        }

        /// <summary>A __metadata__ value, or null when the key is absent.</summary>
        public string Metadata(string key)
        {
            Boot.Require(Boot.Ready);
            var k = Text.Utf8Z(key);
            using (var l = new Lease(Handle))
            {
                var p = l.Ptr;
                try
                {
                    return Json.Read((b, c, n) => { fixed (byte* kp = k) return NativeMethods.Q4_checkpoint_metadata(p, kp, b, c, n); });
                }
                catch (NotFoundException) { return null; }
            }
        }

        public SchemaSummary Detect()
        {
            Boot.Require(Boot.Ready);
            Q4_schema_summary s = default(Q4_schema_summary);
            s.struct_size = (uint)sizeof(Q4_schema_summary);
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_checkpoint_detect(l.Ptr, &s));
            return SchemaSummary.From(&s);
        }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>Writes a .safetensors file atomically (tensors are copied when added).</summary>
    public sealed unsafe class CheckpointWriter : IDisposable
    {
        public CheckpointWriterHandle Handle { get; private set; }

        public CheckpointWriter()
        {
            Boot.Require(Boot.Ready);
            Handle = new CheckpointWriterHandle();
            IntPtr w = IntPtr.Zero;
            Q4Exception.Check(NativeMethods.Q4_checkpoint_writer_create(&w));
            Handle.Set(w);
        }

        public void Add(string name, int dtype, DLTensorRef data)
        {
            Boot.Require(Boot.Ready);
            var n = Text.Utf8Z(name);
            using (var l = new Lease(Handle))
            fixed (byte* p = n) Q4Exception.Check(NativeMethods.Q4_checkpoint_writer_add(l.Ptr, p, dtype, data.Pointer));
        }

        public void Metadata(string key, string value)
        {
            Boot.Require(Boot.Ready);
            var k = Text.Utf8Z(key);
            var v = Text.Utf8Z(value);
            using (var l = new Lease(Handle))
            fixed (byte* kp = k)
            fixed (byte* vp = v) Q4Exception.Check(NativeMethods.Q4_checkpoint_writer_metadata(l.Ptr, kp, vp));
        }

        public void Commit(string path)
        {
            Boot.Require(Boot.Ready);
            var b = Text.Utf8Z(path);
            using (var l = new Lease(Handle))
            fixed (byte* p = b) Q4Exception.Check(NativeMethods.Q4_checkpoint_writer_commit(l.Ptr, p));
        }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>Unified (managed) memory helpers and CUDA queries; Q4_ERR_NOT_AVAILABLE without CUDA.</summary>
    public static unsafe class Cuda
    {
        public static bool CanUseManaged(int device)
        {
            Boot.Require(Boot.Ready);
            int c = 0;
            Q4Exception.Check(NativeMethods.NVFP4_can_use_managed(device, &c));
            return c != 0;
        }

        public static bool IsManaged(DLTensorRef t)
        {
            Boot.Require(Boot.Ready);
            int m = 0;
            Q4Exception.Check(NativeMethods.NVFP4_is_managed_tensor(t.Pointer, &m));
            return m != 0;
        }

        /// <summary>Copies src into managed memory (see NVFP4_to_managed); dispose the result to free it.</summary>
        public static ManagedTensor ToManaged(DLTensorRef src, int device, uint flags)
        {
            Boot.Require(Boot.Ready);
            var h = new ManagedTensorHandle();
            DLManagedTensorVersioned* m = null;
            Q4Exception.Check(NativeMethods.NVFP4_to_managed(src.Pointer, device, flags, &m));
            h.Set((IntPtr)m);
            return new ManagedTensor(h);
        }

        public static void Prefetch(DLTensorRef t, int device, IntPtr stream)
        {
            Boot.Require(Boot.Ready);
            Q4Exception.Check(NativeMethods.NVFP4_managed_prefetch(t.Pointer, device, stream));
        }

        public static void MemoryInfo(int device, out ulong freeBytes, out ulong totalBytes)
        {
            Boot.Require(Boot.Ready);
            ulong f = 0, t = 0;
            Q4Exception.Check(NativeMethods.NVFP4_memory_info(device, &f, &t));
            freeBytes = f;
            totalBytes = t;
        }

        /// <summary>NVFP4_empty_cache: releases the CUDA backend's cached workspaces and cuBLASLt
        /// heuristic results (all devices); does nothing without CUDA.</summary>
        public static void EmptyCache()
        {
            Boot.Require(Boot.Ready);
            Q4Exception.Check(NativeMethods.NVFP4_empty_cache());
        }

        public static void Synchronize(int device, IntPtr stream)
        {
            Boot.Require(Boot.Ready);
            Q4Exception.Check(NativeMethods.Q4_cuda_synchronize(device, stream));
        }
    }
}
