// Stateless NVFP4 / NF4 / MXFP4 operations on DLTensorRefs, plus array conveniences.
using System;
using NVFP4.Native;

namespace NVFP4
{
    internal static unsafe class Opt
    {
        // Copies the nullable options to the caller's stack slot and returns a pointer (or NULL).
        public static Q4_op_options* Ptr(Q4_op_options? o, Q4_op_options* slot)
        {
            if (!o.HasValue) return null;
            *slot = o.Value;
            if (slot->struct_size == 0) slot->struct_size = (uint)sizeof(Q4_op_options);
            return slot;
        }
    }

    /// <summary>NVFP4 (E2M1 data, E4M3 block-16 scales, fp32 global scale).</summary>
    public static unsafe class Nvfp4
    {
        /// <summary>Quantizes x[..., K] into qdata (rows*K/2 bytes) and scale; returns the global scale used.</summary>
        public static float Quantize(DLTensorRef x, DLTensorRef qdata, DLTensorRef scale, int scaleLayout = Q4.SCALE_LINEAR,
                                     float globalScale = 0f, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o; float g = 0;
            Q4Exception.Check(NativeMethods.NVFP4_quantize(x.Pointer, qdata.Pointer, scale.Pointer, scaleLayout,
                                                           globalScale, &g, Opt.Ptr(opts, &o)));
            return g;
        }

        public static void Dequantize(DLTensorRef qdata, DLTensorRef scale, int scaleLayout, float globalScale,
                                      DLTensorRef output, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.NVFP4_dequantize(qdata.Pointer, scale.Pointer, scaleLayout, globalScale,
                                                             output.Pointer, Opt.Ptr(opts, &o)));
        }

        public static void ScaledMm(DLTensorRef aQdata, DLTensorRef aScale, DLTensorRef bQdata, DLTensorRef bScale,
                                    int scaleLayout, float alpha, DLTensorRef bias, DLTensorRef output,
                                    Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.NVFP4_scaled_mm(aQdata.Pointer, aScale.Pointer, bQdata.Pointer,
                                                            bScale.Pointer, scaleLayout, alpha, DLTensorRef.Ptr(bias),
                                                            output.Pointer, Opt.Ptr(opts, &o)));
        }

        public static void Linear(DLTensorRef x, DLTensorRef wQdata, DLTensorRef wScale, int scaleLayout,
                                  float globalScale, DLTensorRef bias, DLTensorRef output, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.NVFP4_linear(x.Pointer, wQdata.Pointer, wScale.Pointer, scaleLayout,
                                                         globalScale, DLTensorRef.Ptr(bias), output.Pointer,
                                                         Opt.Ptr(opts, &o)));
        }

        public static void SwizzleScales(DLTensorRef linear, DLTensorRef swizzled)
        {
            Boot.Require(Boot.Ready);
            Q4Exception.Check(NativeMethods.NVFP4_swizzle_scales(linear.Pointer, swizzled.Pointer));
        }

        public static void UnswizzleScales(DLTensorRef swizzled, DLTensorRef linear)
        {
            Boot.Require(Boot.Ready);
            Q4Exception.Check(NativeMethods.NVFP4_unswizzle_scales(swizzled.Pointer, linear.Pointer));
        }

        public static long SwizzledScaleSize(long rows, long k)
        {
            Boot.Require(Boot.Ready);
            long b = 0;
            Q4Exception.Check(NativeMethods.NVFP4_swizzled_scale_size(rows, k, &b));
            return b;
        }

        /// <summary>output = dequantize(quantize(x)); returns the global scale used.</summary>
        public static float FakeQuantize(DLTensorRef x, DLTensorRef output, float globalScale = 0f, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o; float g = 0;
            Q4Exception.Check(NativeMethods.NVFP4_fake_quantize(x.Pointer, output.Pointer, globalScale, &g, Opt.Ptr(opts, &o)));
            return g;
        }

        /// <summary>grad_x = grad_y . W, grad_w = grad_y^T . x (either output may be null).</summary>
        public static void LinearBackward(DLTensorRef gradY, DLTensorRef x, DLTensorRef wQdata, DLTensorRef wScale,
                                          int scaleLayout, float globalScale, DLTensorRef gradX, DLTensorRef gradW,
                                          Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.NVFP4_linear_backward(gradY.Pointer, DLTensorRef.Ptr(x), wQdata.Pointer,
                                                                  wScale.Pointer, scaleLayout, globalScale,
                                                                  DLTensorRef.Ptr(gradX), DLTensorRef.Ptr(gradW),
                                                                  Opt.Ptr(opts, &o)));
        }

        // ---- managed-array conveniences ------------------------------------------

        /// <summary>Quantizes a row-major float[rows*k] weight (linear scale layout).</summary>
        public static Nvfp4Weight Quantize(float[] w, long rows, long k, float globalScale = 0f)
        {
            var r = new Nvfp4Weight { Rows = rows, K = k, Qdata = new byte[rows * k / 2], Scale = new byte[rows * k / 16] };
            using (var x = DLTensorRef.FromArray(w, rows, k))
            using (var q = DLTensorRef.FromArray(r.Qdata, rows, k / 2))
            using (var s = DLTensorRef.FromArray(r.Scale, rows, k / 16))
                r.GlobalScale = Quantize(x, q, s, Q4.SCALE_LINEAR, globalScale);
            return r;
        }

        public static float[] Dequantize(Nvfp4Weight w)
        {
            var y = new float[w.Rows * w.K];
            using (var q = DLTensorRef.FromArray(w.Qdata, w.Rows, w.K / 2))
            using (var s = DLTensorRef.FromArray(w.Scale, w.Rows, w.K / 16))
            using (var o = DLTensorRef.FromArray(y, w.Rows, w.K))
                Dequantize(q, s, Q4.SCALE_LINEAR, w.GlobalScale, o);
            return y;
        }

        /// <summary>y[m, N] = x[m, K] . W^T (+ bias).</summary>
        public static float[] Linear(float[] x, long m, Nvfp4Weight w, float[] bias = null)
        {
            var y = new float[m * w.Rows];
            using (var xt = DLTensorRef.FromArray(x, m, w.K))
            using (var q = DLTensorRef.FromArray(w.Qdata, w.Rows, w.K / 2))
            using (var s = DLTensorRef.FromArray(w.Scale, w.Rows, w.K / 16))
            using (var b = bias == null ? null : DLTensorRef.FromArray(bias, w.Rows))
            using (var o = DLTensorRef.FromArray(y, m, w.Rows))
                Linear(xt, q, s, Q4.SCALE_LINEAR, w.GlobalScale, b, o);
            return y;
        }
    }

    /// <summary>An NVFP4 weight in managed arrays (linear scale layout).</summary>
    public sealed class Nvfp4Weight
    {
        public long Rows, K;
        public byte[] Qdata;   // rows*K/2, element 2j in the low nibble
        public byte[] Scale;   // rows*K/16 E4M3 bytes
        public float GlobalScale;
    }

    /// <summary>NF4 quantization state; ToNative() gives the C struct pointing at these tensors.</summary>
    public sealed class Nf4State
    {
        public int Blocksize = 64;
        public DLTensorRef Absmax;
        public DLTensorRef QuantMap;        // optional fp32[16]
        public DLTensorRef NestedAbsmax;    // optional (double quantization)
        public DLTensorRef NestedQuantMap;  // fp32[256] with NestedAbsmax
        public float NestedOffset;
        public int NestedBlocksize;         // 0 = 256

        public unsafe NF4_state ToNative()
        {
            NF4_state s = default(NF4_state);
            s.struct_size = (uint)sizeof(NF4_state);
            s.blocksize = Blocksize;
            s.absmax = Absmax == null ? IntPtr.Zero : Absmax.Handle;
            s.quant_map = QuantMap == null ? IntPtr.Zero : QuantMap.Handle;
            s.nested_absmax = NestedAbsmax == null ? IntPtr.Zero : NestedAbsmax.Handle;
            s.nested_quant_map = NestedQuantMap == null ? IntPtr.Zero : NestedQuantMap.Handle;
            s.nested_offset = NestedOffset;
            s.nested_blocksize = NestedBlocksize;
            return s;
        }
    }

    /// <summary>NF4 (bitsandbytes 4-bit NormalFloat, blockwise absmax).</summary>
    public static unsafe class Nf4
    {
        public static void Quantize(DLTensorRef x, DLTensorRef qdata, DLTensorRef absmax, int blocksize = 64,
                                    Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.NF4_quantize(x.Pointer, qdata.Pointer, absmax.Pointer, blocksize, Opt.Ptr(opts, &o)));
        }

        /// <summary>Double quantization of absmax; returns the offset.</summary>
        public static float DoubleQuantize(DLTensorRef absmax, DLTensorRef qabsmax, DLTensorRef nestedAbsmax,
                                           DLTensorRef nestedQuantMap, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o; float off = 0;
            Q4Exception.Check(NativeMethods.NF4_double_quantize(absmax.Pointer, qabsmax.Pointer, nestedAbsmax.Pointer,
                                                                nestedQuantMap.Pointer, &off, Opt.Ptr(opts, &o)));
            return off;
        }

        public static void Dequantize(DLTensorRef qdata, Nf4State state, DLTensorRef output, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            var s = state.ToNative();
            Q4Exception.Check(NativeMethods.NF4_dequantize(qdata.Pointer, &s, output.Pointer, Opt.Ptr(opts, &o)));
        }

        public static void ScaledMm(DLTensorRef x, DLTensorRef wQdata, Nf4State wState, DLTensorRef bias,
                                    DLTensorRef output, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            var s = wState.ToNative();
            Q4Exception.Check(NativeMethods.NF4_scaled_mm(x.Pointer, wQdata.Pointer, &s, DLTensorRef.Ptr(bias),
                                                          output.Pointer, Opt.Ptr(opts, &o)));
        }
    }

    /// <summary>MXFP4 (OCP Microscaling: E2M1 data, E8M0 scales per 32 elements, no global scale).</summary>
    public static unsafe class Mxfp4
    {
        /// <summary>Quantizes x[..., K] (K % 32 == 0) into qdata (rows*K/2 bytes) and E8M0 scales (the OCP rule).</summary>
        public static void Quantize(DLTensorRef x, DLTensorRef qdata, DLTensorRef scale, int scaleLayout = Q4.SCALE_LINEAR,
                                    Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.MXFP4_quantize(x.Pointer, qdata.Pointer, scale.Pointer, scaleLayout,
                                                           Opt.Ptr(opts, &o)));
        }

        public static void Dequantize(DLTensorRef qdata, DLTensorRef scale, int scaleLayout, DLTensorRef output,
                                      Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.MXFP4_dequantize(qdata.Pointer, scale.Pointer, scaleLayout, output.Pointer,
                                                             Opt.Ptr(opts, &o)));
        }

        /// <summary>output[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias).</summary>
        public static void Linear(DLTensorRef x, DLTensorRef wQdata, DLTensorRef wScale, int scaleLayout, DLTensorRef bias,
                                  DLTensorRef output, Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.MXFP4_linear(x.Pointer, wQdata.Pointer, wScale.Pointer, scaleLayout,
                                                         DLTensorRef.Ptr(bias), output.Pointer, Opt.Ptr(opts, &o)));
        }

        /// <summary>output[M, N] = alpha * dequant(A)[M, K] . dequant(B)[N, K]^T (+ bias), both MXFP4.</summary>
        public static void ScaledMm(DLTensorRef aQdata, DLTensorRef aScale, DLTensorRef bQdata, DLTensorRef bScale,
                                    int scaleLayout, float alpha, DLTensorRef bias, DLTensorRef output,
                                    Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            Q4Exception.Check(NativeMethods.MXFP4_scaled_mm(aQdata.Pointer, aScale.Pointer, bQdata.Pointer,
                                                            bScale.Pointer, scaleLayout, alpha, DLTensorRef.Ptr(bias),
                                                            output.Pointer, Opt.Ptr(opts, &o)));
        }

        /// <summary>Batched MoE experts: wQdata [E, N, K/2] (or gpt-oss [E, N, K/32, 16]) and wScale [E, N, K/32]
        /// as stored (no copy); x [T, K] split into consecutive groups of groupRows[g] rows, group g running expert
        /// expertOfGroup[g]; bias null or [E, N].</summary>
        public static void LinearExperts(DLTensorRef x, DLTensorRef wQdata, DLTensorRef wScale, int scaleLayout,
                                         int[] expertOfGroup, long[] groupRows, DLTensorRef bias, DLTensorRef output,
                                         Q4_op_options? opts = null)
        {
            Boot.Require(Boot.Ready);
            if (expertOfGroup == null) throw new ArgumentNullException("expertOfGroup");
            if (groupRows == null) throw new ArgumentNullException("groupRows");
            if (expertOfGroup.Length != groupRows.Length)
                throw new ArgumentException("expertOfGroup and groupRows differ in length (" + expertOfGroup.Length +
                                            " vs " + groupRows.Length + ")");
            Q4_op_options o;
            fixed (int* e = expertOfGroup)
            fixed (long* r = groupRows)
                Q4Exception.Check(NativeMethods.MXFP4_linear_experts(x.Pointer, wQdata.Pointer, wScale.Pointer, scaleLayout,
                                                                     e, r, expertOfGroup.Length, DLTensorRef.Ptr(bias),
                                                                     output.Pointer, Opt.Ptr(opts, &o)));
        }
    }
}
