// Console test runner of the .NET binding (no test framework). Groups:
// resolver, abi, strings, errors, layouts, capabilities, nvfp4, nf4, schema,
// sessions, mutable, checkpoint, cuda, mxfp4. Last line: "N passed, N failed";
// exit code 1 on any failure.
//   mono NVFP4.Tests.exe [group ...]      (env NVFP4_LIBRARY, NVFP4_LAYOUT_PROBE, NVFP4_SYMBOLS)
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using NVFP4;
using NVFP4.Native;

public static unsafe partial class Tests
{
    static int passed, failed;
    static string group;

    static void Check(bool ok, string what)
    {
        if (ok) passed++;
        else { failed++; Console.WriteLine("  FAIL [" + group + "] " + what); }
    }

    static void Near(double got, double want, double tol, string what)
    {
        Check(Math.Abs(got - want) <= tol, what + ": got " + got + ", want " + want + " +- " + tol);
    }

    static T Throws<T>(Action a, string what) where T : Exception
    {
        try { a(); }
        catch (T e) { passed++; return e; }
        catch (Exception e) { failed++; Console.WriteLine("  FAIL [" + group + "] " + what + ": threw " + e.GetType().Name + ": " + e.Message); return null; }
        failed++;
        Console.WriteLine("  FAIL [" + group + "] " + what + ": no exception");
        return null;
    }

    static readonly Dictionary<string, Action> Groups = new Dictionary<string, Action>
    {
        { "resolver", Resolver }, { "abi", AbiCoverage }, { "strings", Strings }, { "errors", Errors }, { "layouts", Layouts },
        { "capabilities", Capabilities }, { "nvfp4", Nvfp4Ops }, { "nf4", Nf4Ops }, { "schema", SchemaDetection },
        { "sessions", Sessions }, { "mutable", Mutables }, { "checkpoint", Checkpoints }, { "cuda", CudaHelpers },
        { "mxfp4", Mxfp4Ops },
    };

    public static int Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "--resolver-child") return ResolverChild();
        var names = args.Length > 0 ? args : Groups.Keys.ToArray();
        foreach (var n in names)
        {
            Action g;
            if (!Groups.TryGetValue(n, out g)) { Console.WriteLine("unknown group " + n); return 2; }
            group = n;
            int before = failed;
            try { g(); }
            catch (Exception e) { failed++; Console.WriteLine("  FAIL [" + n + "] unexpected " + e); }
            Console.WriteLine((failed == before ? "ok   " : "FAIL ") + n);
        }
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }

    // ---- reference NVFP4 dequantization ---------------------------------------
    static readonly float[] E2M1 = { 0f, 0.5f, 1f, 1.5f, 2f, 3f, 4f, 6f };

    static float DecodeE4M3(byte b)
    {
        int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
        if (exp == 15 && man == 7) return float.NaN;
        double v = exp == 0 ? man / 8.0 * Math.Pow(2, -6) : (1 + man / 8.0) * Math.Pow(2, exp - 7);
        return (float)(sign == 1 ? -v : v);
    }

    // (e2m1 * scale) * g in float, element 2j in the low nibble, 16-element blocks.
    static float[] RefDequantize(byte[] q, byte[] s, float g, long rows, long k)
    {
        var r = new float[rows * k];
        for (long i = 0; i < rows * k; i++)
        {
            int nib = (i & 1) == 0 ? q[i / 2] & 15 : q[i / 2] >> 4;
            float e = E2M1[nib & 7];
            if ((nib & 8) != 0) e = -e;
            float sc = DecodeE4M3(s[i / 16]);
            float v = e * sc;
            r[i] = v * g;
        }
        return r;
    }

    static double[] RefMatmulT(float[] x, long m, float[] w, long n, long k, float[] bias)
    {
        var y = new double[m * n];
        for (long i = 0; i < m; i++)
            for (long j = 0; j < n; j++)
            {
                double acc = bias == null ? 0 : bias[j];
                for (long t = 0; t < k; t++) acc += (double)x[i * k + t] * w[j * k + t];
                y[i * n + j] = acc;
            }
        return y;
    }

    static void CloseArrays(float[] got, double[] want, double rel, string what)
    {
        double maxAbs = 0, maxErr = 0;
        for (int i = 0; i < want.Length; i++) { maxAbs = Math.Max(maxAbs, Math.Abs(want[i])); maxErr = Math.Max(maxErr, Math.Abs(got[i] - want[i])); }
        Check(got.Length == want.Length && maxErr <= rel * (1 + maxAbs), what + ": max error " + maxErr + " (scale " + maxAbs + ")");
    }

    static float[] Random(int n, int seed, double scale = 1)
    {
        var r = new Random(seed);
        var a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float)((r.NextDouble() * 2 - 1) * scale);
        return a;
    }

    static bool Same(float[] a, float[] b)
    {
        if (a.Length != b.Length) return false;
        for (int i = 0; i < a.Length; i++) if (BitConverter.ToInt32(BitConverter.GetBytes(a[i]), 0) != BitConverter.ToInt32(BitConverter.GetBytes(b[i]), 0)) return false;
        return true;
    }

    // float -> IEEE half bits for values that are exactly representable (asserted by the round trip).
    static ushort ToHalf(float f)
    {
        uint b = (uint)BitConverter.ToInt32(BitConverter.GetBytes(f), 0);
        uint sign = (b >> 16) & 0x8000;
        int exp = (int)((b >> 23) & 0xff);
        uint man = b & 0x7fffff;
        if (exp == 0 && man == 0) return (ushort)sign;
        int e = exp - 127 + 15;
        if (e <= 0 || e >= 31 || (man & 0x1fff) != 0) throw new ArgumentException("not an exact normal half: " + f);
        return (ushort)(sign | ((uint)e << 10) | (man >> 13));
    }

    static ushort ToBf16(float f)
    {
        uint b = (uint)BitConverter.ToInt32(BitConverter.GetBytes(f), 0);
        if ((b & 0xffff) != 0) throw new ArgumentException("not an exact bf16: " + f);
        return (ushort)(b >> 16);
    }
}
