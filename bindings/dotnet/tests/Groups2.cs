using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using NVFP4;
using NVFP4.Native;

public static unsafe partial class Tests
{
    static float HalfToFloat(ushort h)
    {
        int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? m / 1024.0 * Math.Pow(2, -14) : e == 31 ? (m == 0 ? double.PositiveInfinity : double.NaN)
                                                                   : (1 + m / 1024.0) * Math.Pow(2, e - 15);
        return (float)(sign == 1 ? -v : v);
    }

    static double[] D(float[] a) { return a.Select(v => (double)v).ToArray(); }

    // ---- NVFP4 stateless ops -----------------------------------------------------------------
    static void Nvfp4Ops()
    {
        const int N = 32, K = 64, M = 3;
        var wf = Random(N * K, 1, 0.05);
        var w = Nvfp4.Quantize(wf, N, K);
        float amax = wf.Max(v => Math.Abs(v));
        Near(w.GlobalScale, amax / (6f * 448f), 1e-9, "global scale = amax/(6*448)");
        var deq = Nvfp4.Dequantize(w);
        var refDeq = RefDequantize(w.Qdata, w.Scale, w.GlobalScale, N, K);
        Check(Same(deq, refDeq), "NVFP4_dequantize == C# reference (E2M1 x E4M3 x g) bit for bit");
        double num = 0, den = 0;
        for (int i = 0; i < wf.Length; i++) { num += (deq[i] - wf[i]) * (deq[i] - wf[i]); den += wf[i] * wf[i]; }
        Check(Math.Sqrt(num / den) < 0.12, "quantization rel-RMS " + Math.Sqrt(num / den));

        var x = Random(M * K, 2);
        var bias = Random(N, 3);
        var y = Nvfp4.Linear(x, M, w, bias);
        CloseArrays(y, RefMatmulT(x, M, refDeq, N, K, bias), 1e-5, "NVFP4_linear vs reference");

        // f16 and bf16 activations (values exact in both), f16 output.
        var xe = x.Select(v => (float)Math.Round(v * 8) / 8).ToArray();
        var yRef = Nvfp4.Linear(xe, M, w);
        foreach (var dt in new[] { DLDataType.Float16, DLDataType.BFloat16 })
        {
            var xs = xe.Select(v => dt.code == (byte)DLDataTypeCode.kDLFloat ? ToHalf(v) : ToBf16(v)).ToArray();
            var yh = new ushort[M * N];
            using (var xt = DLTensorRef.FromArray(xs, dt, M, K))
            using (var q = DLTensorRef.FromArray(w.Qdata, N, K / 2))
            using (var s = DLTensorRef.FromArray(w.Scale, DLDataType.Float8E4M3, N, K / 16))
            using (var o = DLTensorRef.FromArray(yh, DLDataType.Float16, M, N))
                Nvfp4.Linear(xt, q, s, Q4.SCALE_LINEAR, w.GlobalScale, null, o);
            CloseArrays(yh.Select(HalfToFloat).ToArray(), D(yRef), 2e-3, "NVFP4_linear " + dt + " in, f16 out");
        }

        // Swizzled scales.
        long swz = Nvfp4.SwizzledScaleSize(N, K);
        Check(swz == 128 * 4, "swizzled size " + swz);
        var sw = new byte[swz];
        var back = new byte[w.Scale.Length];
        var sw2 = new byte[swz];
        var q2 = new byte[w.Qdata.Length];
        using (var lin = DLTensorRef.FromArray(w.Scale, N, K / 16))
        using (var st = DLTensorRef.FromArray(sw, swz))
        using (var bk = DLTensorRef.FromArray(back, N, K / 16))
        {
            Nvfp4.SwizzleScales(lin, st);
            Nvfp4.UnswizzleScales(st, bk);
            Check(back.SequenceEqual(w.Scale), "swizzle/unswizzle round trip");
            using (var wt = DLTensorRef.FromArray(wf, N, K))
            using (var qt = DLTensorRef.FromArray(q2, N, K / 2))
            using (var s2 = DLTensorRef.FromArray(sw2, swz))
                Nvfp4.Quantize(wt, qt, s2, Q4.SCALE_SWIZZLED);
            Check(sw2.SequenceEqual(sw) && q2.SequenceEqual(w.Qdata), "quantize to swizzled == swizzle(linear)");
            var d2 = new float[N * K];
            using (var qt = DLTensorRef.FromArray(w.Qdata, N, K / 2))
            using (var o = DLTensorRef.FromArray(d2, N, K))
                Nvfp4.Dequantize(qt, st, Q4.SCALE_SWIZZLED, w.GlobalScale, o);
            Check(Same(d2, deq), "dequantize from swizzled scales");
        }

        // scaled_mm: both operands NVFP4, alpha = gA * gB.
        var a = Nvfp4.Quantize(x, M, K);
        var outMm = new float[M * N];
        using (var aq = DLTensorRef.FromArray(a.Qdata, M, K / 2))
        using (var asc = DLTensorRef.FromArray(a.Scale, M, K / 16))
        using (var bq = DLTensorRef.FromArray(w.Qdata, N, K / 2))
        using (var bsc = DLTensorRef.FromArray(w.Scale, N, K / 16))
        using (var bt = DLTensorRef.FromArray(bias, N))
        using (var o = DLTensorRef.FromArray(outMm, M, N))
            Nvfp4.ScaledMm(aq, asc, bq, bsc, Q4.SCALE_LINEAR, a.GlobalScale * w.GlobalScale, bt, o);
        CloseArrays(outMm, RefMatmulT(RefDequantize(a.Qdata, a.Scale, a.GlobalScale, M, K), M, refDeq, N, K, bias), 1e-5,
                    "NVFP4_scaled_mm vs reference");

        // fake quantize == dequantize(quantize(x)).
        var fq = new float[N * K];
        float gfq;
        using (var xt = DLTensorRef.FromArray(wf, N, K))
        using (var o = DLTensorRef.FromArray(fq, N, K))
            gfq = Nvfp4.FakeQuantize(xt, o);
        Check(gfq == w.GlobalScale && Same(fq, deq), "NVFP4_fake_quantize == dequantize(quantize)");

        // backward: grad_x = gy . W, grad_w = gy^T . x
        var gy = Random(M * N, 4);
        var gx = new float[M * K];
        var gw = new float[N * K];
        using (var gyt = DLTensorRef.FromArray(gy, M, N))
        using (var xt = DLTensorRef.FromArray(x, M, K))
        using (var q = DLTensorRef.FromArray(w.Qdata, N, K / 2))
        using (var s = DLTensorRef.FromArray(w.Scale, N, K / 16))
        using (var gxt = DLTensorRef.FromArray(gx, M, K))
        using (var gwt = DLTensorRef.FromArray(gw, N, K))
            Nvfp4.LinearBackward(gyt, xt, q, s, Q4.SCALE_LINEAR, w.GlobalScale, gxt, gwt);
        var gxRef = new double[M * K];
        var gwRef = new double[N * K];
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                for (int t = 0; t < K; t++) { gxRef[i * K + t] += (double)gy[i * N + j] * refDeq[j * K + t]; gwRef[j * K + t] += (double)gy[i * N + j] * x[i * K + t]; }
        CloseArrays(gx, gxRef, 1e-5, "backward grad_x");
        CloseArrays(gw, gwRef, 1e-5, "backward grad_w");

        // Raw pointers with explicit strides (what TorchSharp's data_ptr()/shape/stride() give).
        IntPtr mem = Marshal.AllocHGlobal(M * K * 4);
        try
        {
            Marshal.Copy(x, 0, mem, x.Length);
            var y2 = new float[M * N];
            using (var xt = DLTensorRef.FromPointer(mem, new long[] { M, K }, new long[] { K, 1 }, DTypes.FromTorch(6), DTypes.DeviceFromTorch(0, -1)))
            using (var q = DLTensorRef.FromArray(w.Qdata, N, K / 2))
            using (var s = DLTensorRef.FromArray(w.Scale, N, K / 16))
            using (var bt = DLTensorRef.FromArray(bias, N))
            using (var o = DLTensorRef.FromArray(y2, M, N))
            {
                Nvfp4.Linear(xt, q, s, Q4.SCALE_LINEAR, w.GlobalScale, bt, o);
                Check(Same(y2, y), "pointer + compact strides == pinned array");
            }
            using (var xt = DLTensorRef.FromPointer(mem, new long[] { M, K / 2 }, new long[] { K, 2 }, DLDataType.Float32, DLDevice.Cpu))
            using (var q = DLTensorRef.FromArray(new byte[N * K / 4], N, K / 4))
            using (var s = DLTensorRef.FromArray(new byte[N * K / 32 + 1], N, 1))
                Throws<StridesException>(() => Nvfp4.Quantize(xt, q, s), "non-compact strides");
        }
        finally { Marshal.FreeHGlobal(mem); }
    }

    // ---- NF4 stateless ops ---------------------------------------------------------------------
    static void Nf4Ops()
    {
        const int N = 16, K = 64, M = 2, BS = 64;
        int n = N * K, nb = n / BS;
        var wf = Random(n, 7, 0.1);
        var q = new byte[n / 2];
        var absmax = new float[nb];
        using (var xt = DLTensorRef.FromArray(wf, N, K))
        using (var qt = DLTensorRef.FromArray(q))
        using (var at = DLTensorRef.FromArray(absmax))
            Nf4.Quantize(xt, qt, at, BS);
        bool absOk = true;
        for (int b = 0; b < nb; b++) absOk &= absmax[b] == wf.Skip(b * BS).Take(BS).Max(v => Math.Abs(v));
        Check(absOk, "NF4 absmax = blockwise max |x|");

        var deq = new float[n];
        using (var qt = DLTensorRef.FromArray(q))
        using (var at = DLTensorRef.FromArray(absmax))
        using (var o = DLTensorRef.FromArray(deq, N, K))
            Nf4.Dequantize(qt, new Nf4State { Blocksize = BS, Absmax = at }, o);
        double num = 0, den = 0;
        for (int i = 0; i < n; i++) { num += (deq[i] - wf[i]) * (deq[i] - wf[i]); den += wf[i] * wf[i]; }
        Check(Math.Sqrt(num / den) < 0.15, "NF4 round-trip rel-RMS " + Math.Sqrt(num / den));

        // Double quantization of absmax.
        var qabs = new byte[nb];
        var nested = new float[1];
        var nmap = new float[256];
        float offset;
        var deq2 = new float[n];
        using (var at = DLTensorRef.FromArray(absmax))
        using (var qat = DLTensorRef.FromArray(qabs))
        using (var nt = DLTensorRef.FromArray(nested))
        using (var mt = DLTensorRef.FromArray(nmap))
        {
            offset = Nf4.DoubleQuantize(at, qat, nt, mt);
            Near(offset, absmax.Average(), 1e-6, "double-quantize offset = mean(absmax)");
            using (var qt = DLTensorRef.FromArray(q))
            using (var o = DLTensorRef.FromArray(deq2, N, K))
                Nf4.Dequantize(qt, new Nf4State { Blocksize = BS, Absmax = qat, NestedAbsmax = nt, NestedQuantMap = mt, NestedOffset = offset }, o);
        }
        CloseArrays(deq2, D(deq), 0.02, "NF4 with nested absmax ~ plain");

        var x = Random(M * K, 8);
        var y = new float[M * N];
        var bias = Random(N, 9);
        using (var xt = DLTensorRef.FromArray(x, M, K))
        using (var qt = DLTensorRef.FromArray(q))
        using (var at = DLTensorRef.FromArray(absmax))
        using (var bt = DLTensorRef.FromArray(bias, N))
        using (var o = DLTensorRef.FromArray(y, M, N))
            Nf4.ScaledMm(xt, qt, new Nf4State { Blocksize = BS, Absmax = at }, bt, o);
        CloseArrays(y, RefMatmulT(x, M, deq, N, K, bias), 1e-5, "NF4_scaled_mm vs dequantize + reference matmul");
    }

    // ---- schema detection -------------------------------------------------------------------------
    static void SchemaDetection()
    {
        var keys = new List<TensorDesc>
        {
            new TensorDesc("model.embed_tokens.weight", Q4.DTYPE_BF16, new long[] { 100, 64 }),
            new TensorDesc("model.layers.0.mlp.up_proj.weight", Q4.DTYPE_U8, new long[] { 32, 32 }),
            new TensorDesc("model.layers.0.mlp.up_proj.weight_scale", Q4.DTYPE_F8_E4M3, new long[] { 32, 4 }),
            new TensorDesc("model.layers.0.mlp.up_proj.weight_scale_2", Q4.DTYPE_F32, new long[0]),
            new TensorDesc("model.layers.0.mlp.up_proj.input_scale", Q4.DTYPE_F32, new long[0]),
            new TensorDesc("model.layers.0.mlp.down_proj.weight"),
            new TensorDesc("model.layers.0.mlp.down_proj.weight_scale"),
            new TensorDesc("model.layers.0.mlp.down_proj.weight_scale_2"),
        };
        var s = Schema.Detect(keys);
        Check(s.Format == Q4.FORMAT_NVFP4 && s.Family == Q4.SCHEMA_NVFP4_MODELOPT && s.NumLinears == 2 &&
              s.FamilyCounts[Q4.SCHEMA_NVFP4_MODELOPT] == 2, "ModelOpt: " + s.FormatName + " " + s.FamilyName + " " + s.NumLinears);
        var ls = Schema.DetectLinears(keys);
        Check(ls.Length == 2 && ls[0].Prefix == "model.layers.0.mlp.up_proj" && ls[1].Prefix == "model.layers.0.mlp.down_proj",
              "linear prefixes: " + string.Join(", ", ls.Select(l => l.Prefix)));
        Check(ls[0].RoleNames[Q4.ROLE_WEIGHT] == "model.layers.0.mlp.up_proj.weight" && ls[0].Roles[Q4.ROLE_SCALE] == 2 &&
              ls[0].RoleNames[Q4.ROLE_GLOBAL_SCALE].EndsWith("weight_scale_2") && ls[0].RoleNames[Q4.ROLE_INPUT_SCALE] != null &&
              ls[1].Roles[Q4.ROLE_INPUT_SCALE] == -1, "roles");

        var nf4 = new List<TensorDesc>
        {
            new TensorDesc("layers.0.q.weight"), new TensorDesc("layers.0.q.weight.absmax"),
            new TensorDesc("layers.0.q.weight.quant_map"),
        };
        s = Schema.Detect(nf4);
        Check(s.Format == Q4.FORMAT_NF4 && s.Family == Q4.SCHEMA_BNB_NF4, "bitsandbytes NF4: " + s.FamilyName);
        s = Schema.Detect(nf4.Concat(keys).ToList());
        Check(s.Format == Q4.FORMAT_MIXED && s.NumLinears == 3, "mixed checkpoint: " + s.FormatName);

        var ct = new List<TensorDesc> { new TensorDesc("c.weight_packed"), new TensorDesc("c.weight_scale"), new TensorDesc("c.weight_global_scale") };
        var cl = Schema.DetectLinears(ct);
        Check(cl.Length == 1 && cl[0].Family == Q4.SCHEMA_NVFP4_COMPRESSED && cl[0].GlobalScaleInverted, "compressed-tensors, inverted g");

        Check(Schema.Detect(new List<TensorDesc> { new TensorDesc("a.weight", Q4.DTYPE_BF16, new long[] { 4, 4 }) }).Format == Q4.FORMAT_NONE,
              "no 4-bit linear -> FORMAT_NONE");

        var incomplete = new List<TensorDesc> { new TensorDesc("m.weight"), new TensorDesc("m.weight_scale") };
        var e = Throws<SchemaException>(() => Schema.Detect(incomplete), "incomplete linear");
        if (e != null) Check(e.NativeMessage.Contains("m.weight_scale_2") || e.NativeMessage.Contains("weight_scale_2"), "names the missing key: " + e.NativeMessage);
        var soft = Schema.Detect(incomplete, false);
        Check(soft.Error != null && soft.Error.Length > 0 && soft.NumIncomplete >= 1, "non-throwing detect fills the summary: " + soft.NumIncomplete);
    }
}
