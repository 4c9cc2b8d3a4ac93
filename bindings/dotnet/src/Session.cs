// Sessions, linears, mutable tensors and snapshots.
using System;
using System.Runtime.InteropServices;
using System.Text;
using NVFP4.Native;

namespace NVFP4
{
    internal static unsafe class Json
    {
        public delegate int Fill(byte* buf, UIntPtr cap, UIntPtr* needed);

        // The size-query protocol of the *_diagnostics / metadata functions.
        public static string Read(Fill fill)
        {
            UIntPtr needed = UIntPtr.Zero;
            int st = fill(null, UIntPtr.Zero, &needed);
            if (st != (int)Q4Status.BufferTooSmall && st != 0) Q4Exception.Check(st);
            for (int attempt = 0; attempt < 4; attempt++)
            {
                var buf = new byte[(int)needed.ToUInt64() + 1];
                fixed (byte* b = buf) st = fill(b, (UIntPtr)buf.Length, &needed);
                if (st == 0)
                {
                    int n = Array.IndexOf(buf, (byte)0);
                    return Encoding.UTF8.GetString(buf, 0, n < 0 ? buf.Length : n);
                }
                if (st != (int)Q4Status.BufferTooSmall) Q4Exception.Check(st);
            }
            Q4Exception.Check(st);
            return null;
        }
    }

    /// <summary>A libNVFP4 session: owns and counts linears, mutable tensors and snapshots.</summary>
    public sealed unsafe class Session : IDisposable
    {
        public SessionHandle Handle { get; private set; }

        bool disposed;

        public Session() : this(null) { }

        // Mono's SafeHandle stays open while children hold references, so track Dispose here.
        Lease Use()
        {
            if (disposed) throw new ObjectDisposedException("Session");
            return new Lease(Handle);
        }

        public Session(Q4_session_config? config)
        {
            Boot.Require(Boot.Ready);
            Handle = new SessionHandle();
            Q4_session_config c = config ?? default(Q4_session_config);
            if (config.HasValue && c.struct_size == 0) c.struct_size = (uint)sizeof(Q4_session_config);
            IntPtr h = IntPtr.Zero;
            Q4Exception.Check(NativeMethods.Q4_session_create(config.HasValue ? &c : null, &h));
            Handle.Set(h);
        }

        /// <summary>Runs this session's forwards on <paramref name="stream"/> (a cudaStream_t;
        /// IntPtr.Zero: the default stream). CPU sessions have no stream: an error.</summary>
        public void SetStream(IntPtr stream)
        {
            Boot.Require(Boot.Ready);
            using (var l = Use()) Q4Exception.Check(NativeMethods.Q4_session_set_stream(l.Ptr, stream));
        }

        public Q4_session_stats Stats
        {
            get
            {
                Boot.Require(Boot.Ready);
                Q4_session_stats s = default(Q4_session_stats);
                s.struct_size = (uint)sizeof(Q4_session_stats);
                using (var l = Use()) Q4Exception.Check(NativeMethods.Q4_session_get_stats(l.Ptr, &s));
                return s;
            }
        }

        /// <summary>The session's JSON diagnostics.</summary>
        public string Diagnostics()
        {
            Boot.Require(Boot.Ready);
            using (var l = Use())
            {
                var p = l.Ptr;
                return Json.Read((b, c, n) => NativeMethods.Q4_session_diagnostics(p, b, c, n));
            }
        }

        /// <summary>Prepares a linear (the bundle's tensors are only read during this call).</summary>
        public Linear CreateLinear(WeightBundle weight)
        {
            Boot.Require(Boot.Ready);
            var h = new LinearHandle();
            using (var l = Use())
            {
                NF4_state st;
                Q4_weight_bundle b = weight.ToNative(&st);
                IntPtr p = IntPtr.Zero;
                Q4Exception.Check(NativeMethods.Q4_linear_create(l.Ptr, &b, &p));
                h.Set(p);
                h.AttachParent(Handle);
            }
            return new Linear(h);
        }

        /// <summary>The linear stored under prefix in a checkpoint.</summary>
        public Linear CreateLinear(Checkpoint checkpoint, string prefix)
        {
            Boot.Require(Boot.Ready);
            var h = new LinearHandle();
            var name = Text.Utf8Z(prefix);
            using (var l = Use())
            using (var c = new Lease(checkpoint.Handle))
            {
                IntPtr p = IntPtr.Zero;
                fixed (byte* n = name) Q4Exception.Check(NativeMethods.Q4_checkpoint_linear_create(l.Ptr, c.Ptr, n, &p));
                h.Set(p);
                h.AttachParent(Handle);
            }
            return new Linear(h);
        }

        /// <summary>A zero-filled mutable tensor (version 0).</summary>
        public MutableTensor CreateMutable(long[] shape, DLDataType dtype)
        {
            Boot.Require(Boot.Ready);
            var h = new MutableHandle();
            using (var l = Use())
            {
                IntPtr p = IntPtr.Zero;
                fixed (long* s = shape) Q4Exception.Check(NativeMethods.Q4_mutable_create(l.Ptr, shape.Length, s, dtype, &p));
                h.Set(p);
                h.AttachParent(Handle);
            }
            return new MutableTensor(h, Handle);
        }

        /// <summary>
        /// Releases this reference. The native session is destroyed once every linear, mutable tensor and
        /// snapshot created from it is disposed too (each holds a reference on the session handle).
        /// </summary>
        public void Dispose() { disposed = true; Handle.Dispose(); }
    }

    /// <summary>What a linear is made from (Q4_weight_bundle); tensors are borrowed for the create/update call.</summary>
    public sealed class WeightBundle
    {
        public int Format = Q4.FORMAT_NVFP4;
        public int Source = Q4.WEIGHT_PACKED;
        public int ScaleLayout = Q4.SCALE_LINEAR;
        public DLTensorRef Weight;
        public long OutFeatures, InFeatures;
        public DLTensorRef Scale;
        public float GlobalScale;
        public int Blocksize;
        public Nf4State Nf4;
        public DLTensorRef Bias;

        /// <summary>A float [N, K] weight quantized by the library into format (NVFP4, NF4 or MXFP4).</summary>
        public static WeightBundle FromFloat(int format, DLTensorRef weight, DLTensorRef bias = null)
        {
            return new WeightBundle { Format = format, Source = Q4.WEIGHT_FLOAT, Weight = weight, Bias = bias };
        }

        public static WeightBundle Nvfp4Packed(DLTensorRef qdata, DLTensorRef scale, long n, long k, float globalScale,
                                               int scaleLayout = Q4.SCALE_LINEAR, DLTensorRef bias = null)
        {
            return new WeightBundle { Format = Q4.FORMAT_NVFP4, Source = Q4.WEIGHT_PACKED, Weight = qdata, Scale = scale,
                                      OutFeatures = n, InFeatures = k, GlobalScale = globalScale,
                                      ScaleLayout = scaleLayout, Bias = bias };
        }

        /// <summary>Packed MXFP4: qdata (N*K/2 bytes) and E8M0 scale bytes (N*K/32 linear, or swizzled).</summary>
        public static WeightBundle Mxfp4Packed(DLTensorRef qdata, DLTensorRef scale, long n, long k,
                                               int scaleLayout = Q4.SCALE_LINEAR, DLTensorRef bias = null)
        {
            return new WeightBundle { Format = Q4.FORMAT_MXFP4, Source = Q4.WEIGHT_PACKED, Weight = qdata, Scale = scale,
                                      OutFeatures = n, InFeatures = k, ScaleLayout = scaleLayout, Bias = bias };
        }

        public static WeightBundle Nf4Packed(DLTensorRef qdata, Nf4State state, long n, long k, DLTensorRef bias = null)
        {
            return new WeightBundle { Format = Q4.FORMAT_NF4, Source = Q4.WEIGHT_PACKED, Weight = qdata, Nf4 = state,
                                      OutFeatures = n, InFeatures = k, Bias = bias };
        }

        internal unsafe Q4_weight_bundle ToNative(NF4_state* nf4Slot)
        {
            Boot.Require(Boot.Ready);
            Q4_weight_bundle b = default(Q4_weight_bundle);
            b.struct_size = (uint)sizeof(Q4_weight_bundle);
            Q4Exception.Check(NativeMethods.Q4_weight_bundle_init(&b));
            b.format = Format;
            b.source = Source;
            b.scale_layout = ScaleLayout;
            b.weight = Weight == null ? IntPtr.Zero : Weight.Handle;
            b.out_features = OutFeatures;
            b.in_features = InFeatures;
            b.scale = Scale == null ? IntPtr.Zero : Scale.Handle;
            b.global_scale = GlobalScale;
            b.blocksize = Blocksize;
            if (Nf4 != null) { *nf4Slot = Nf4.ToNative(); b.nf4 = (IntPtr)nf4Slot; }
            b.bias = Bias == null ? IntPtr.Zero : Bias.Handle;
            return b;
        }
    }

    /// <summary>A prepared 4-bit linear: out[..., N] = x[..., K] . W^T (+ bias).</summary>
    public sealed unsafe class Linear : IDisposable
    {
        public LinearHandle Handle { get; private set; }
        internal Linear(LinearHandle h) { Handle = h; }

        public void Forward(DLTensorRef x, DLTensorRef output)
        {
            Boot.Require(Boot.Ready);
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_linear_forward(l.Ptr, x.Pointer, output.Pointer));
        }

        /// <summary>y[rows, N] for a float x[rows, K].</summary>
        public float[] Forward(float[] x, long rows)
        {
            var info = Info;
            var y = new float[rows * info.out_features];
            using (var xt = DLTensorRef.FromArray(x, rows, info.in_features))
            using (var yt = DLTensorRef.FromArray(y, rows, info.out_features))
                Forward(xt, yt);
            return y;
        }

        public void UpdateWeight(WeightBundle weight)
        {
            Boot.Require(Boot.Ready);
            using (var l = new Lease(Handle))
            {
                NF4_state st;
                var b = weight.ToNative(&st);
                Q4Exception.Check(NativeMethods.Q4_linear_update_weight(l.Ptr, &b));
            }
        }

        public Q4_linear_info Info
        {
            get
            {
                Boot.Require(Boot.Ready);
                Q4_linear_info i = default(Q4_linear_info);
                i.struct_size = (uint)sizeof(Q4_linear_info);
                using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_linear_info_get(l.Ptr, &i));
                return i;
            }
        }

        /// <summary>JSON diagnostics (format, backend, computePath, fallbackReason, isa, ...).</summary>
        public string Diagnostics()
        {
            Boot.Require(Boot.Ready);
            using (var l = new Lease(Handle))
            {
                var p = l.Ptr;
                return Json.Read((b, c, n) => NativeMethods.Q4_linear_diagnostics(p, b, c, n));
            }
        }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>A mutable tensor: one writer at a time, any number of snapshot readers.</summary>
    public sealed unsafe class MutableTensor : IDisposable
    {
        public MutableHandle Handle { get; private set; }
        readonly SessionHandle session;
        internal MutableTensor(MutableHandle h, SessionHandle s) { Handle = h; session = s; }

        /// <summary>Starts a write; the returned view's memory is private until Commit (BusyException if another writer is active).</summary>
        public DLTensor BeginWrite(int mode = Q4.WRITE_DISCARD)
        {
            Boot.Require(Boot.Ready);
            DLTensor v = default(DLTensor);
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_mutable_begin_write(l.Ptr, mode, &v));
            return v;
        }

        public ulong Commit()
        {
            Boot.Require(Boot.Ready);
            ulong ver = 0;
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_mutable_commit(l.Ptr, &ver));
            return ver;
        }

        public void Abort()
        {
            Boot.Require(Boot.Ready);
            using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_mutable_abort(l.Ptr));
        }

        public ulong Version
        {
            get
            {
                Boot.Require(Boot.Ready);
                ulong ver = 0;
                using (var l = new Lease(Handle)) Q4Exception.Check(NativeMethods.Q4_mutable_version(l.Ptr, &ver));
                return ver;
            }
        }

        /// <summary>Writes a whole float32 tensor (begin_write, copy, commit; abort on failure); returns the new version.</summary>
        public ulong Write(float[] data)
        {
            var v = BeginWrite(Q4.WRITE_DISCARD);
            try
            {
                if (v.dtype.code != (byte)DLDataTypeCode.kDLFloat || v.dtype.bits != 32 || v.ElementCount() != data.Length)
                    throw new ArgumentException("Write(float[]) needs a float32 tensor of " + v.ElementCount() + " elements");
                Marshal.Copy(data, 0, v.data + (int)v.byte_offset, data.Length);
            }
            catch
            {
                Abort();
                throw;
            }
            return Commit();
        }

        /// <summary>A read-only snapshot of the current version (valid until disposed, whatever is committed meanwhile).</summary>
        public Snapshot Acquire()
        {
            Boot.Require(Boot.Ready);
            var h = new ManagedTensorHandle();
            ulong ver = 0;
            using (var l = new Lease(Handle))
            {
                DLManagedTensorVersioned* m = null;
                Q4Exception.Check(NativeMethods.Q4_mutable_acquire(l.Ptr, &m, &ver));
                h.Set((IntPtr)m);
                h.AttachParent(session); // snapshots are counted by the session and may outlive the tensor
            }
            return new Snapshot(h, ver);
        }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>An owned DLManagedTensorVersioned (released through its deleter on Dispose).</summary>
    public unsafe class ManagedTensor : IDisposable
    {
        public ManagedTensorHandle Handle { get; private set; }
        internal ManagedTensor(ManagedTensorHandle h) { Handle = h; }

        DLManagedTensorVersioned* Raw
        {
            get
            {
                if (Handle.IsClosed) throw new ObjectDisposedException(GetType().Name);
                return (DLManagedTensorVersioned*)Handle.DangerousGetHandle();
            }
        }

        public DLTensor Tensor { get { return Raw->dl_tensor; } }
        public ulong Flags { get { return Raw->flags; } }
        public DLPackVersion DLPackVersion { get { return Raw->version; } }
        public bool ReadOnly { get { return (Flags & Q4.DLPACK_FLAG_BITMASK_READ_ONLY) != 0; } }

        /// <summary>Copies a CPU-readable float32 tensor into a new array.</summary>
        public float[] ToFloatArray()
        {
            using (var l = new Lease(Handle))
            {
                var t = ((DLManagedTensorVersioned*)l.Ptr)->dl_tensor;
                if (t.dtype.code != (byte)DLDataTypeCode.kDLFloat || t.dtype.bits != 32)
                    throw new InvalidOperationException("not a float32 tensor: " + t.dtype);
                var a = new float[t.ElementCount()];
                Marshal.Copy(t.data + (int)t.byte_offset, a, 0, a.Length);
                return a;
            }
        }

        /// <summary>A DLTensorRef describing this tensor (keeps this object alive; do not use after Dispose).</summary>
        public DLTensorRef AsTensorRef() { return DLTensorRef.FromView(Tensor, this); }

        public void Dispose() { Handle.Dispose(); }
    }

    /// <summary>A read-only snapshot of a mutable tensor.</summary>
    public sealed class Snapshot : ManagedTensor
    {
        public ulong Version { get; private set; }
        internal Snapshot(ManagedTensorHandle h, ulong version) : base(h) { Version = version; }
    }
}
