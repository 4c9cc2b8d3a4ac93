using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using NVFP4;
using NVFP4.Native;

public static unsafe partial class Tests
{
    // ---- sessions and linears ---------------------------------------------------------------------
    static void Sessions()
    {
        const int N = 32, K = 64, M = 4;
        var cfg = SessionConfig.Default();
        Check(cfg.struct_size == (uint)sizeof(Q4_session_config) && cfg.target == Q4.TARGET_AUTO, "Q4_session_config_init");
        cfg.diagnostics = 1;
        var wf = Random(N * K, 11, 0.05);
        var w = Nvfp4.Quantize(wf, N, K);
        var x = Random(M * K, 12);
        var bias = Random(N, 13);
        var yOps = Nvfp4.Linear(x, M, w, bias);

        var session = new Session(cfg);
        Linear fromFloat, packed, nf4;
        using (var wt = DLTensorRef.FromArray(wf, N, K))
        using (var bt = DLTensorRef.FromArray(bias, N))
            fromFloat = session.CreateLinear(WeightBundle.FromFloat(Q4.FORMAT_NVFP4, wt, bt));
        using (var q = DLTensorRef.FromArray(w.Qdata, N, K / 2))
        using (var s = DLTensorRef.FromArray(w.Scale, DLDataType.Float8E4M3, N, K / 16))
        using (var bt = DLTensorRef.FromArray(bias, N))
            packed = session.CreateLinear(WeightBundle.Nvfp4Packed(q, s, N, K, w.GlobalScale, Q4.SCALE_LINEAR, bt));
        var y1 = fromFloat.Forward(x, M);
        var y2 = packed.Forward(x, M);
        CloseArrays(y1, D(yOps), 1e-6, "linear from float weight == quantize + NVFP4_linear");
        CloseArrays(y2, D(yOps), 1e-6, "linear from packed weight == NVFP4_linear");

        var info = packed.Info;
        Check(info.format == Q4.FORMAT_NVFP4 && info.out_features == N && info.in_features == K && info.weight_version == 1 &&
              info.target == Q4.TARGET_CPU && info.weight_bytes > 0, "Q4_linear_info: backend " + info.backend + ", isa " + Library.IsaName(info.isa));
        var diag = packed.Diagnostics();
        Check(diag.StartsWith("{") && diag.Contains("\"backend\"") && diag.Contains("\"weightVersion\":1"), "linear diagnostics JSON: " + diag);
        var sd = session.Diagnostics();
        Check(sd.StartsWith("{") && sd.EndsWith("}"), "session diagnostics JSON: " + (sd.Length > 120 ? sd.Substring(0, 120) + "..." : sd));

        // Update the weight (x2): version 2 and outputs follow.
        var wf2 = wf.Select(v => v * 2).ToArray();
        using (var wt = DLTensorRef.FromArray(wf2, N, K))
        using (var bt = DLTensorRef.FromArray(bias, N))
            fromFloat.UpdateWeight(WeightBundle.FromFloat(Q4.FORMAT_NVFP4, wt, bt));
        Check(fromFloat.Info.weight_version == 2, "update_weight bumps weight_version");
        CloseArrays(fromFloat.Forward(x, M), D(Nvfp4.Linear(x, M, Nvfp4.Quantize(wf2, N, K), bias)), 1e-6, "forward after update");

        // NF4 linear from a float weight vs NF4_scaled_mm on the same quantization.
        using (var wt = DLTensorRef.FromArray(wf, N, K))
            nf4 = session.CreateLinear(WeightBundle.FromFloat(Q4.FORMAT_NF4, wt));
        var qn = new byte[N * K / 2];
        var am = new float[N * K / 64];
        var yn = new float[M * N];
        using (var wt = DLTensorRef.FromArray(wf, N, K))
        using (var qt = DLTensorRef.FromArray(qn))
        using (var at = DLTensorRef.FromArray(am))
        using (var xt = DLTensorRef.FromArray(x, M, K))
        using (var o = DLTensorRef.FromArray(yn, M, N))
        {
            Nf4.Quantize(wt, qt, at, 64);
            Nf4.ScaledMm(xt, qt, new Nf4State { Blocksize = 64, Absmax = at }, null, o);
            CloseArrays(nf4.Forward(x, M), D(yn), 1e-6, "NF4 linear == NF4_scaled_mm");
            using (var nf4p = session.CreateLinear(WeightBundle.Nf4Packed(qt, new Nf4State { Blocksize = 64, Absmax = at }, N, K)))
                CloseArrays(nf4p.Forward(x, M), D(yn), 1e-6, "NF4 packed linear == NF4_scaled_mm");
        }
        Check(nf4.Info.format == Q4.FORMAT_NF4, "NF4 linear info");

        // Shape errors carry the message.
        var wrong = Throws<Q4Exception>(() =>
        {
            using (var xt = DLTensorRef.FromArray(new float[M * 48], M, 48))
            using (var o = DLTensorRef.FromArray(new float[M * N], M, N))
                packed.Forward(xt, o);
        }, "forward with K=48");
        if (wrong != null) Check(wrong.NativeMessage.Length > 0, "forward error message: " + wrong.NativeMessage);

        var stats = session.Stats;
        Check(stats.live_linears == 3 && stats.forwards >= 5 && stats.live_bytes > 0,
              "stats: linears " + stats.live_linears + ", forwards " + stats.forwards + ", bytes " + stats.live_bytes);

        // Disposal order does not matter: the session is destroyed after its last linear.
        session.Dispose();
        Check(session.Handle.ReleaseStatus == -1, "session kept alive by its linears");
        Throws<ObjectDisposedException>(() => { var unused = session.Stats; }, "disposed session refuses calls");
        Check(fromFloat.Forward(x, M).Length == M * N, "linear still works after session.Dispose()");
        fromFloat.Dispose();
        packed.Dispose();
        nf4.Dispose();
        Check(session.Handle.ReleaseStatus == 0, "session destroyed (status 0) after the last linear, got " + session.Handle.ReleaseStatus);
        Check(packed.Handle.ReleaseStatus == 0, "linear destroyed with status 0");
        Throws<ObjectDisposedException>(() => packed.Forward(x, M), "disposed linear refuses calls");

        // The raw C contract: destroy refuses while a linear is alive.
        IntPtr rs = IntPtr.Zero, rl = IntPtr.Zero;
        Check(NativeMethods.Q4_session_create(null, &rs) == 0, "raw session create");
        using (var wt = DLTensorRef.FromArray(wf, N, K))
        {
            Q4_weight_bundle b = default(Q4_weight_bundle);
            b.struct_size = (uint)sizeof(Q4_weight_bundle);
            NativeMethods.Q4_weight_bundle_init(&b);
            b.format = Q4.FORMAT_NVFP4;
            b.source = Q4.WEIGHT_FLOAT;
            b.weight = wt.Handle;
            Check(NativeMethods.Q4_linear_create(rs, &b, &rl) == 0, "raw linear create");
        }
        int rc = NativeMethods.Q4_session_destroy(rs);
        Check(rc == (int)Q4Status.State && Library.LastError.Length > 0, "Q4_session_destroy with a live linear -> STATE: " + Library.LastError);
        Check(NativeMethods.Q4_linear_destroy(rl) == 0 && NativeMethods.Q4_session_destroy(rs) == 0, "raw destroy in order");
    }

    // ---- mutable tensors and snapshots ----------------------------------------------------------------
    static void Mutables()
    {
        using (var session = new Session())
        {
            var m = session.CreateMutable(new long[] { 2, 3 }, DLDataType.Float32);
            Check(m.Version == 0, "version 0 at create");
            var s0 = m.Acquire();
            Check(s0.Version == 0 && s0.ReadOnly && s0.ToFloatArray().All(v => v == 0f) && s0.Tensor.GetShape().SequenceEqual(new long[] { 2, 3 }),
                  "snapshot 0 is zero-filled, read-only, shape [2,3]");
            Check(s0.DLPackVersion.major == 1, "DLPack version " + s0.DLPackVersion.major + "." + s0.DLPackVersion.minor);
            var data = new float[] { 1, 2, 3, 4, 5, 6 };
            Check(m.Write(data) == 1 && m.Version == 1, "write -> version 1");
            var s1 = m.Acquire();
            Check(s0.ToFloatArray().All(v => v == 0f), "old snapshot unchanged after commit");
            Check(s1.Version == 1 && s1.ToFloatArray().SequenceEqual(data), "new snapshot has the data");

            var view = m.BeginWrite(Q4.WRITE_KEEP);
            var keep = new float[6];
            Marshal.Copy(view.data, keep, 0, 6);
            Check(keep.SequenceEqual(data), "WRITE_KEEP starts from the current data");
            var busy = Throws<BusyException>(() => m.BeginWrite(), "second writer");
            if (busy != null) Check(busy.NativeMessage.Length > 0, "busy message: " + busy.NativeMessage);
            Marshal.Copy(new float[] { 9, 9, 9, 9, 9, 9 }, 0, view.data, 6);
            m.Abort();
            Check(m.Version == 1 && m.Acquire().ToFloatArray().SequenceEqual(data), "abort keeps version 1 and its data");

            var st = session.Stats;
            Check(st.live_mutables == 1 && st.live_snapshots >= 2, "stats: mutables " + st.live_mutables + ", snapshots " + st.live_snapshots);
            using (var t = s1.AsTensorRef())
                Check(t.Shape.SequenceEqual(new long[] { 2, 3 }) && t.DType.bits == 32 && t.Value.data == s1.Tensor.data,
                      "snapshot as DLTensorRef (no copy)");

            // Snapshots outlive the tensor.
            m.Dispose();
            Check(m.Handle.ReleaseStatus == 0, "mutable destroyed");
            Check(s1.ToFloatArray().SequenceEqual(data), "snapshot readable after the tensor is destroyed");
            s0.Dispose();
            s1.Dispose();
            GC.Collect();
            GC.WaitForPendingFinalizers();
            var st2 = session.Stats;
            Check(st2.live_mutables == 0 && st2.live_snapshots == 0, "all released: snapshots " + st2.live_snapshots);
            Throws<ObjectDisposedException>(() => s0.ToFloatArray(), "disposed snapshot refuses reads");
        }
    }

    // ---- checkpoints --------------------------------------------------------------------------------------
    static void Checkpoints()
    {
        const int N = 16, K = 32;
        var dir = Path.GetTempPath();
        var path = Path.Combine(dir, "nvfp4_dotnet_" + System.Diagnostics.Process.GetCurrentProcess().Id + ".safetensors");
        var wf = Random(N * K, 21, 0.1);
        var w = Nvfp4.Quantize(wf, N, K);
        var bias = Random(N, 22);
        try
        {
            using (var writer = new CheckpointWriter())
            using (var q = DLTensorRef.FromArray(w.Qdata, N, K / 2))
            using (var s = DLTensorRef.FromArray(w.Scale, DLDataType.Float8E4M3, N, K / 16))
            using (var g = DLTensorRef.FromArrayExact(new[] { w.GlobalScale }, DLDataType.Float32, new long[0]))
            using (var b = DLTensorRef.FromArray(bias, N))
            {
                writer.Add("lm.0.proj.weight", Q4.DTYPE_U8, q);
                writer.Add("lm.0.proj.weight_scale", Q4.DTYPE_F8_E4M3, s);
                writer.Add("lm.0.proj.weight_scale_2", Q4.DTYPE_F32, g);
                writer.Add("lm.0.proj.bias", Q4.DTYPE_F32, b);
                writer.Metadata("written_by", "NVFP4 .NET tests");
                writer.Commit(path);
            }
            using (var ck = Checkpoint.Open(path))
            {
                Check(ck.Count == 4, "count " + ck.Count);
                int gi = ck.Find("lm.0.proj.weight_scale_2");
                var info = ck.Info(gi);
                Check(info.Name == "lm.0.proj.weight_scale_2" && info.Dtype == Q4.DTYPE_F32 && info.Shape.Length == 0 && info.NBytes == 4,
                      "tensor info of weight_scale_2");
                using (var v = ck.Tensor(gi))
                {
                    var val = new float[1];
                    Marshal.Copy(v.Value.data + (int)v.Value.byte_offset, val, 0, 1);
                    Check(val[0] == w.GlobalScale, "tensor view reads the stored value");
                }
                using (var v = ck.Tensor(ck.Find("lm.0.proj.weight_scale")))
                    Check(v.DType.code == (byte)DLDataTypeCode.kDLFloat8_e4m3fn, "F8_E4M3 view dtype " + v.DType);
                Throws<NotFoundException>(() => ck.Find("nope"), "find missing tensor");
                Check(ck.Metadata("written_by") == "NVFP4 .NET tests" && ck.Metadata("absent") == null, "metadata");
                var sum = ck.Detect();
                Check(sum.Family == Q4.SCHEMA_NVFP4_MODELOPT && sum.NumLinears == 1, "checkpoint detect: " + sum.FamilyName);
                var ls = Schema.DetectLinears(ck.TensorDescs());
                Check(ls.Length == 1 && ls[0].Prefix == "lm.0.proj" && ls[0].RoleNames[Q4.ROLE_BIAS] == "lm.0.proj.bias", "linears from TensorDescs");
                using (var session = new Session())
                using (var lin = session.CreateLinear(ck, "lm.0.proj"))
                {
                    var x = Random(3 * K, 23);
                    CloseArrays(lin.Forward(x, 3), D(Nvfp4.Linear(x, 3, w, bias)), 1e-6, "checkpoint linear (with bias) == NVFP4_linear");
                    Throws<NotFoundException>(() => session.CreateLinear(ck, "lm.9.proj"), "unknown prefix");
                }
            }
            Throws<IoException>(() => Checkpoint.Open(path + ".missing"), "missing file");
            File.WriteAllBytes(path, new byte[] { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 });
            var fe = Throws<NVFP4.FormatException>(() => Checkpoint.Open(path), "malformed file");
            if (fe != null) Check(fe.NativeMessage.Length > 0, "format message: " + fe.NativeMessage);
        }
        finally { File.Delete(path); }
    }

    // ---- CUDA helpers (clear statuses without CUDA) -------------------------------------------------------
    static void CudaHelpers()
    {
        var caps = Library.GetCapabilities();
        bool ready = caps.cuda_state == Q4.CUDA_READY;
        bool can = Cuda.CanUseManaged(0);
        Check(ready || !can, "can_use_managed is 0 without CUDA");
        Cuda.EmptyCache();  // Q4_OK with or without CUDA
        using (var t = DLTensorRef.FromArray(new float[16], 16))
        {
            Check(!Cuda.IsManaged(t), "host array is not managed");
            Action[] calls =
            {
                () => { ulong f, tot; Cuda.MemoryInfo(0, out f, out tot); Check(tot >= f, "memory info"); },
                () => Cuda.Synchronize(0, IntPtr.Zero),
                () => { using (var m = Cuda.ToManaged(t, 0, Q4.MANAGED_REPORT_MANAGED)) Check(m.Tensor.ndim == 1, "to_managed copy"); },
                () => Cuda.Prefetch(t, 0, IntPtr.Zero),
            };
            foreach (var c in calls)
            {
                try { c(); passed++; }
                catch (NotAvailableException e) { Check(!ready, "NOT_AVAILABLE only without CUDA: " + e.NativeMessage); }
                catch (Q4Exception e) { Check(ready, "CUDA call failed: " + e.Message); }
            }
        }
        Console.WriteLine("  cuda_state " + caps.cuda_state + (ready ? " (GPU present)" : " (no CUDA: NOT_AVAILABLE statuses checked)"));
    }
}
