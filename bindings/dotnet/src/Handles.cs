// SafeHandles for the library's objects. A child (linear, mutable tensor,
// snapshot) holds a reference on its session's handle (DangerousAddRef), so
// the session is destroyed only after everything created from it, whatever
// order Dispose or the finalizer thread takes: Q4_session_destroy would
// otherwise refuse with Q4_ERR_STATE and leak.
using System;
using System.Runtime.InteropServices;
using NVFP4.Native;

namespace NVFP4
{
    public abstract class Q4Handle : SafeHandle
    {
        protected Q4Handle() : base(IntPtr.Zero, true) { ReleaseStatus = -1; }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        internal void Set(IntPtr h) { SetHandle(h); }
        /// <summary>Status returned by the native destroy call (-1 until released).</summary>
        public int ReleaseStatus { get; protected set; }
    }

    /// <summary>A handle whose release also drops a reference on a parent handle.</summary>
    public abstract class ChildHandle : Q4Handle
    {
        SafeHandle parent;
        internal void AttachParent(SafeHandle p)
        {
            bool added = false;
            p.DangerousAddRef(ref added);
            if (added) parent = p;
        }
        protected abstract int Destroy();
        protected override bool ReleaseHandle()
        {
            ReleaseStatus = Destroy();
            var p = parent;
            parent = null;
            if (p != null) p.DangerousRelease();
            return ReleaseStatus == 0;
        }
    }

    public sealed class SessionHandle : Q4Handle
    {
        protected override bool ReleaseHandle() { ReleaseStatus = NativeMethods.Q4_session_destroy(handle); return ReleaseStatus == 0; }
    }

    public sealed class LinearHandle : ChildHandle
    {
        protected override int Destroy() { return NativeMethods.Q4_linear_destroy(handle); }
    }

    public sealed class MutableHandle : ChildHandle
    {
        protected override int Destroy() { return NativeMethods.Q4_mutable_destroy(handle); }
    }

    /// <summary>A DLManagedTensorVersioned* (snapshot or managed copy), released by calling its deleter.</summary>
    public sealed unsafe class ManagedTensorHandle : ChildHandle
    {
        protected override int Destroy()
        {
            var m = (DLManagedTensorVersioned*)handle;
            if (m->deleter != IntPtr.Zero)
            {
                var d = (DLManagedTensorVersionedDeleter)Marshal.GetDelegateForFunctionPointer(
                    m->deleter, typeof(DLManagedTensorVersionedDeleter));
                d(handle);
            }
            return 0;
        }
    }

    public sealed class CheckpointHandle : Q4Handle
    {
        protected override bool ReleaseHandle() { ReleaseStatus = NativeMethods.Q4_checkpoint_close(handle); return ReleaseStatus == 0; }
    }

    public sealed class CheckpointWriterHandle : Q4Handle
    {
        protected override bool ReleaseHandle() { ReleaseStatus = NativeMethods.Q4_checkpoint_writer_destroy(handle); return ReleaseStatus == 0; }
    }

    /// <summary>Keeps a SafeHandle referenced for the duration of a native call.</summary>
    internal struct Lease : IDisposable
    {
        readonly SafeHandle h;
        readonly bool added;
        public Lease(SafeHandle handle)
        {
            h = handle;
            bool a = false;
            handle.DangerousAddRef(ref a); // ObjectDisposedException once disposed
            added = a;
        }
        public IntPtr Ptr { get { return h.DangerousGetHandle(); } }
        public void Dispose() { if (added) h.DangerousRelease(); }
    }
}
