using System;
using NVFP4;
using NVFP4.Native;

public static unsafe partial class Tests
{
    static readonly float[] E2m1 = { 0f, 0.5f, 1f, 1.5f, 2f, 3f, 4f, 6f };

    // MXFP4 dequantization from the format rules (docs/formats.md, MXFP4).
    static float[] MxDecode(byte[] q, byte[] s, long rows, long k)
    {
        var y = new float[rows * k];
        for (long i = 0; i < y.Length; i++)
        {
            int code = (q[i / 2] >> (int)(4 * (i & 1))) & 0xf;
            float mag = E2m1[code & 7] * (float)Math.Pow(2, s[i / 32] - 127);
            y[i] = (code & 8) != 0 ? -mag : mag;
        }
        return y;
    }

    static void MxQuantize(float[] w, long rows, long k, out byte[] q, out byte[] s)
    {
        q = new byte[rows * k / 2];
        s = new byte[rows * k / 32];
        using (var wt = DLTensorRef.FromArray(w, rows, k))
        using (var qt = DLTensorRef.FromArray(q, rows, k / 2))
        using (var st = DLTensorRef.FromArray(s, rows, k / 32))
            Mxfp4.Quantize(wt, qt, st);
    }

    // ---- MXFP4: quantize/dequantize, products, batched experts, linears --------------------------
    static void Mxfp4Ops()
    {
        const long E = 3, N = 8, K = 64, T = 6;
        var w = Random((int)(E * N * K), 31, 2.0);
        byte[] q, s;
        MxQuantize(w, E * N, K, out q, out s);
        var deq = MxDecode(q, s, E * N, K);
        var back = new float[E * N * K];
        using (var qt = DLTensorRef.FromArray(q, E * N, K / 2))
        using (var st = DLTensorRef.FromArray(s, E * N, K / 32))
        using (var ot = DLTensorRef.FromArray(back, E * N, K))
            Mxfp4.Dequantize(qt, st, Q4.SCALE_LINEAR, ot);
        Check(Same(back, deq), "MXFP4_dequantize == e2m1 * 2^(byte-127)");

        // Experts: groups (2 rows of expert 2, none of 0, 3 of 1, 1 of 2) vs MXFP4_linear per expert.
        var x = Random((int)(T * K), 32);
        var bias = Random((int)(E * N), 33);
        int[] experts = { 2, 0, 1, 2 };
        long[] rows = { 2, 0, 3, 1 };
        var y = new float[T * N];
        using (var xt = DLTensorRef.FromArray(x, T, K))
        using (var qt = DLTensorRef.FromArray(q, E, N, K / 2))
        using (var st = DLTensorRef.FromArray(s, E, N, K / 32))
        using (var bt = DLTensorRef.FromArray(bias, E, N))
        using (var yt = DLTensorRef.FromArray(y, T, N))
        {
            Mxfp4.LinearExperts(xt, qt, st, Q4.SCALE_LINEAR, experts, rows, bt, yt);
            var e = Throws<Q4Exception>(() => Mxfp4.LinearExperts(xt, qt, st, Q4.SCALE_LINEAR, new[] { 3 }, new long[] { T },
                                                                  null, yt), "expert out of range");
            Check(e != null && e.Status == Q4Status.InvalidArgument && e.Message.Contains("expert_of_group[0]"),
                  "expert out of range names expert_of_group[0]");
            Throws<ArgumentException>(() => Mxfp4.LinearExperts(xt, qt, st, Q4.SCALE_LINEAR, new[] { 0 }, new long[] { 1, 2 },
                                                                null, yt), "length mismatch");
        }
        long r0 = 0;
        for (int g = 0; g < experts.Length; g++)
        {
            if (rows[g] == 0) continue;
            int ex = experts[g];
            var xg = new float[rows[g] * K];
            Array.Copy(x, r0 * K, xg, 0, xg.Length);
            var qg = new byte[N * K / 2];
            Array.Copy(q, ex * N * K / 2, qg, 0, qg.Length);
            var sg = new byte[N * K / 32];
            Array.Copy(s, ex * N * K / 32, sg, 0, sg.Length);
            var bg = new float[N];
            Array.Copy(bias, ex * N, bg, 0, N);
            var yg = new float[rows[g] * N];
            using (var xt = DLTensorRef.FromArray(xg, rows[g], K))
            using (var qt = DLTensorRef.FromArray(qg, N, K / 2))
            using (var st = DLTensorRef.FromArray(sg, N, K / 32))
            using (var bt = DLTensorRef.FromArray(bg, N))
            using (var yt = DLTensorRef.FromArray(yg, rows[g], N))
                Mxfp4.Linear(xt, qt, st, Q4.SCALE_LINEAR, bt, yt);
            var slice = new float[yg.Length];
            Array.Copy(y, r0 * N, slice, 0, slice.Length);
            Check(Same(slice, yg), "group " + g + " (expert " + ex + ") == MXFP4_linear on that expert");
            r0 += rows[g];
        }

        // scaled_mm: both operands MXFP4, against the decoded values in fp64.
        byte[] aq, as_;
        MxQuantize(x, T, K, out aq, out as_);
        var adeq = MxDecode(aq, as_, T, K);
        var z = new float[T * N];
        var q0 = new byte[N * K / 2];
        Array.Copy(q, q0, q0.Length);
        var s0 = new byte[N * K / 32];
        Array.Copy(s, s0, s0.Length);
        using (var aqt = DLTensorRef.FromArray(aq, T, K / 2))
        using (var ast = DLTensorRef.FromArray(as_, T, K / 32))
        using (var bqt = DLTensorRef.FromArray(q0, N, K / 2))
        using (var bst = DLTensorRef.FromArray(s0, N, K / 32))
        using (var zt = DLTensorRef.FromArray(z, T, N))
            Mxfp4.ScaledMm(aqt, ast, bqt, bst, Q4.SCALE_LINEAR, 0.5f, null, zt);
        var want = new double[T * N];
        for (long i = 0; i < T; i++)
            for (long j = 0; j < N; j++)
            {
                double acc = 0;
                for (long kk = 0; kk < K; kk++) acc += (double)adeq[i * K + kk] * deq[j * K + kk];
                want[i * N + j] = 0.5 * acc;
            }
        CloseArrays(z, want, 1e-5, "MXFP4_scaled_mm == 0.5 * dequant(A) . dequant(B)^T");

        // A session linear from the packed MXFP4 weight (expert 0) equals MXFP4_linear.
        var session = new Session(SessionConfig.Default());
        Linear lin;
        using (var qt = DLTensorRef.FromArray(q0, N, K / 2))
        using (var st = DLTensorRef.FromArray(s0, N, K / 32))
            lin = session.CreateLinear(WeightBundle.Mxfp4Packed(qt, st, N, K));
        var yl = lin.Forward(x, T);
        var yr = new float[T * N];
        using (var xt = DLTensorRef.FromArray(x, T, K))
        using (var qt = DLTensorRef.FromArray(q0, N, K / 2))
        using (var st = DLTensorRef.FromArray(s0, N, K / 32))
        using (var yt = DLTensorRef.FromArray(yr, T, N))
            Mxfp4.Linear(xt, qt, st, Q4.SCALE_LINEAR, null, yt);
        Check(Same(yl, yr), "Q4_linear_forward of an MXFP4 linear == MXFP4_linear");
        Check(lin.Info.format == Q4.FORMAT_MXFP4, "linear info says MXFP4");
        lin.Dispose();
        session.Dispose();
    }
}
