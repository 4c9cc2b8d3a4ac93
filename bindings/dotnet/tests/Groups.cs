using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Threading;
using NVFP4;
using NVFP4.Native;

public static unsafe partial class Tests
{
    // ---- resolver ----------------------------------------------------------------
    static void Resolver()
    {
        Library.Load();
        var env = Environment.GetEnvironmentVariable("NVFP4_LIBRARY");
        if (!string.IsNullOrEmpty(env))
        {
            Check(Loader.LoadedBy == "NVFP4_LIBRARY" && Loader.LoadedPath == env, "NVFP4_LIBRARY wins: " + Loader.LoadedBy + " " + Loader.LoadedPath);
            Check(Loader.Candidates()[0].Key == "NVFP4_LIBRARY", "NVFP4_LIBRARY is the first candidate");
        }
        Check(Loader.Candidates().Last().Value == "libNVFP4.so.1", "system SONAME is the last candidate");
        Check(Library.AbiVersion == Q4.ABI_VERSION, "Q4_abi_version() == 1");
        Console.WriteLine("  loaded " + Loader.LoadedPath + " by " + Loader.LoadedBy + ", .NET resolver " +
                          (Loader.ResolverInstalled ? "installed" : "not available (Mono/netfx)"));
        if (string.IsNullOrEmpty(env) || !File.Exists(env)) { Console.WriteLine("  (child-process checks need NVFP4_LIBRARY)"); return; }

        // Child processes in a scratch directory holding copies of the assemblies and the library,
        // with NVFP4_LIBRARY and LD_LIBRARY_PATH removed: the copy next to the assembly must be found.
        var dir = Path.Combine(Path.GetTempPath(), "nvfp4_dotnet_resolver_" + Process.GetCurrentProcess().Id);
        Directory.CreateDirectory(dir);
        try
        {
            File.Copy(typeof(Library).Assembly.Location, Path.Combine(dir, "NVFP4.dll"), true);
            File.Copy(typeof(Tests).Assembly.Location, Path.Combine(dir, "NVFP4.Tests.exe"), true);
            File.Copy(env, Path.Combine(dir, "libNVFP4.so.1"), true);
            string output;
            int rc = RunChild(dir, null, out output);
            Check(rc == 0 && output.Contains("loaded-by assembly-directory " + Path.Combine(dir, "libNVFP4.so.1")),
                  "assembly-directory copy is found (rc " + rc + "): " + output.Trim());
            rc = RunChild(dir, "/nonexistent/libNVFP4.so", out output);
            Check(rc == 3 && output.Contains("DllNotFoundException") && output.Contains("/nonexistent/libNVFP4.so"),
                  "a bad NVFP4_LIBRARY is an error naming it (rc " + rc + "): " + output.Trim());
        }
        finally { try { Directory.Delete(dir, true); } catch (Exception) { } }
    }

    static int RunChild(string dir, string nvfp4Library, out string output)
    {
        var mono = Process.GetCurrentProcess().MainModule.FileName; // the runtime running us (mono)
        bool isMono = Type.GetType("Mono.Runtime") != null;
        var psi = new ProcessStartInfo(isMono ? mono : Path.Combine(dir, "NVFP4.Tests.exe"),
                                       (isMono ? "\"" + Path.Combine(dir, "NVFP4.Tests.exe") + "\" " : "") + "--resolver-child");
        psi.UseShellExecute = false;
        psi.RedirectStandardOutput = true;
        psi.RedirectStandardError = true;
        psi.WorkingDirectory = "/";
        psi.EnvironmentVariables.Remove("LD_LIBRARY_PATH");
        psi.EnvironmentVariables.Remove("NVFP4_LIBRARY");
        if (nvfp4Library != null) psi.EnvironmentVariables["NVFP4_LIBRARY"] = nvfp4Library;
        using (var p = Process.Start(psi))
        {
            output = p.StandardOutput.ReadToEnd() + p.StandardError.ReadToEnd();
            p.WaitForExit();
            return p.ExitCode;
        }
    }

    static int ResolverChild()
    {
        try
        {
            Library.Load();
            Console.WriteLine("loaded-by " + Loader.LoadedBy + " " + Loader.LoadedPath + " abi " + Library.AbiVersion);
            return 0;
        }
        catch (Exception e)
        {
            for (var x = e; x != null; x = x.InnerException) Console.WriteLine(x.GetType().Name + ": " + x.Message);
            return 3;
        }
    }

    // ---- static strings returned as IntPtr -----------------------------------------
    static void Strings()
    {
        // Declared `string`, these would be freed by the marshaller: free(): invalid size.
        string lastVersion = null, lastIsa = null, lastErr = null;
        int chars = 0;
        for (int i = 0; i < 20000; i++)
        {
            lastVersion = Library.VersionString;
            chars += Library.StatusString(i % 25).Length;
            lastIsa = Library.IsaName(Q4.ISA_SCALAR);
            chars += Schema.SchemaName(i % 5).Length;
            chars += Schema.FormatName(i % 4).Length;
            chars += Schema.DtypeName(i % 17).Length;
            lastErr = Library.LastError;
            chars += lastErr.Length;
            Text.FromStatic(NativeMethods.Q4_status_string(99));
        }
        Check(chars > 0 && lastErr != null, "texts read");
        Check(lastVersion == "0.1.0" || lastVersion.Split('.').Length == 3, "version string " + lastVersion);
        int v = Library.Version;
        Check(lastVersion == (v / 10000) + "." + (v / 100 % 100) + "." + (v % 100), "Q4_version matches Q4_version_string");
        Check(Library.StatusString(0).Length > 0 && Library.StatusString(12345).Length > 0, "status strings never empty");
        Check(lastIsa == "scalar", "Q4_isa_name(SCALAR) = scalar: " + lastIsa);
        Check(Schema.SchemaName(Q4.SCHEMA_NVFP4_MODELOPT).Length > 0 && Schema.FormatName(Q4.FORMAT_NF4).Length > 0 &&
              Schema.DtypeName(Q4.DTYPE_F8_E4M3).Length > 0, "schema/format/dtype names");
        Library.ClearError();
        Check(Library.LastError == "", "Q4_last_error() is empty after Q4_clear_error");
        Console.WriteLine("  20000 x 8 static-text calls; status 3 = '" + Library.StatusString(3) + "', F8_E4M3 = '" +
                          Schema.DtypeName(Q4.DTYPE_F8_E4M3) + "'");
    }

    // ---- errors -> exceptions ----------------------------------------------------------
    static void Errors()
    {
        foreach (Q4Status s in Enum.GetValues(typeof(Q4Status)))
        {
            if (s == Q4Status.Ok) continue;
            var e = Q4Exception.Create((int)s, "m");
            Check(e.Status == s && e.GetType().Name == s + "Exception" && e.GetType().BaseType == typeof(Q4Exception),
                  "status " + (int)s + " -> " + e.GetType().Name);
            Check(e.Message.Contains(Library.StatusString((int)s)), "message carries Q4_status_string for " + s);
        }
        var unknown = Q4Exception.Create(1234, "x");
        Check(unknown.GetType() == typeof(Q4Exception) && unknown.Code == 1234, "unknown code -> Q4Exception");

        var e1 = Throws<Q4Exception>(() => Nvfp4.Quantize(new float[48], 2, 24), "K % 16 != 0");
        if (e1 != null) Check(e1.NativeMessage.Contains("multiple of 16") && e1.Message.Contains("multiple of 16"), "message: " + e1.Message);
        Check(Library.LastError.Contains("multiple of 16"), "Q4_last_error keeps the message");

        var bad = new float[16];
        bad[3] = float.NaN;
        var e2 = Throws<NonFiniteException>(() => Nvfp4.Quantize(bad, 1, 16), "NaN input");
        if (e2 != null) Check(e2.Status == Q4Status.NonFinite && e2.NativeMessage.Contains("flat index 3"), "NaN message: " + e2.NativeMessage);

        Q4_session_stats st = default(Q4_session_stats);
        st.struct_size = (uint)sizeof(Q4_session_stats);
        int rc = NativeMethods.Q4_session_get_stats(IntPtr.Zero, &st);
        Check(rc == (int)Q4Status.NullPointer, "NULL session -> Q4_ERR_NULL_POINTER, got " + rc);
        rc = NativeMethods.Q4_session_set_stream(IntPtr.Zero, IntPtr.Zero);
        Check(rc == (int)Q4Status.NullPointer, "set_stream: NULL session -> Q4_ERR_NULL_POINTER, got " + rc);

        // Thread-local: a failure on another thread does not change this thread's message.
        Library.ClearError();
        var t = new Thread(() => { try { Nvfp4.Quantize(new float[48], 2, 24); } catch (Q4Exception) { } });
        t.Start();
        t.Join();
        Check(Library.LastError == "", "errors are thread-local");

        // Wrong shape through DLTensorRef: out too small.
        using (var x = DLTensorRef.FromArray(new float[32], 2, 16))
        using (var q = DLTensorRef.FromArray(new byte[8], 1, 8))
        using (var s = DLTensorRef.FromArray(new byte[2], 2, 1))
        {
            var e3 = Throws<Q4Exception>(() => Nvfp4.Quantize(x, q, s), "qdata too small");
            if (e3 != null) Check(e3.NativeMessage.Length > 0 && e3.Status != Q4Status.Internal, "qdata too small: " + e3.Message);
        }
        Throws<ArgumentException>(() => DLTensorRef.FromArray(new float[4], 2, 4), "shape larger than the array");
    }

    // ---- struct layouts vs layout_probe --------------------------------------------------
    static void Layouts()
    {
        var probe = Environment.GetEnvironmentVariable("NVFP4_LAYOUT_PROBE");
        if (string.IsNullOrEmpty(probe) || !File.Exists(probe))
        {
            Check(false, "NVFP4_LAYOUT_PROBE must name the built layout_probe executable (got '" + probe + "')");
            return;
        }
        var psi = new ProcessStartInfo(probe) { UseShellExecute = false, RedirectStandardOutput = true };
        string text;
        using (var p = Process.Start(psi)) { text = p.StandardOutput.ReadToEnd(); p.WaitForExit(); Check(p.ExitCode == 0, "probe exit code"); }
        var asm = typeof(DLTensor).Assembly;
        var seen = new HashSet<string>();
        int fields = 0;
        foreach (var line in text.Split('\n'))
        {
            var w = line.Trim().Split(' ');
            if (w.Length < 3) continue;
            var type = asm.GetType("NVFP4.Native." + w[1]);
            if (type == null) { Check(false, "no C# struct for " + w[1]); continue; }
            if (w[0] == "S")
            {
                seen.Add(w[1]);
                Check(Marshal.SizeOf(type) == int.Parse(w[2]), w[1] + ": Marshal.SizeOf " + Marshal.SizeOf(type) + " vs sizeof " + w[2]);
                var cs = type.GetFields(BindingFlags.Public | BindingFlags.Instance).Select(f => f.Name);
                var c = text.Split('\n').Where(l => l.StartsWith("F " + w[1] + " ")).Select(l => l.Split(' ')[2]);
                Check(new HashSet<string>(cs).SetEquals(c), w[1] + ": same field set in C and C# (C#: " + string.Join(",", cs) + ")");
            }
            else if (w[0] == "F")
            {
                fields++;
                long off = -1;
                try { off = (long)Marshal.OffsetOf(type, w[2]); } catch (ArgumentException) { }
                Check(off == long.Parse(w[3]), w[1] + "." + w[2] + ": Marshal.OffsetOf " + off + " vs offsetof " + w[3]);
            }
        }
        // Every public mirror struct of NVFP4.Native is probed.
        foreach (var t in asm.GetTypes().Where(t => t.IsValueType && !t.IsEnum && !t.IsNested && t.IsPublic && t.Namespace == "NVFP4.Native"))
            Check(seen.Contains(t.Name), "struct " + t.Name + " is covered by layout_probe");
        // The managed (blittable) size equals the marshalled size, so pointers to these structs can be passed as is.
        Check(sizeof(Q4_capabilities) == Marshal.SizeOf(typeof(Q4_capabilities)) && sizeof(Q4_weight_bundle) == Marshal.SizeOf(typeof(Q4_weight_bundle)) &&
              sizeof(DLManagedTensorVersioned) == Marshal.SizeOf(typeof(DLManagedTensorVersioned)), "blittable sizes");
        Console.WriteLine("  " + seen.Count + " structs, " + fields + " fields compared");
    }

    // ---- capabilities, ISA, logging, tuner --------------------------------------------------
    static void Capabilities()
    {
        var c = Library.GetCapabilities();
        Check(c.abi_version == 1 && c.num_cpus > 0, "capabilities abi " + c.abi_version + " cpus " + c.num_cpus);
        Check(c.CpuVendor.Length > 0 && c.isa_best >= 0, "cpu vendor '" + c.CpuVendor + "', best isa " + Library.IsaName(c.isa_best));
        Console.WriteLine("  " + c.CpuBrand.Trim() + "; cuda_state " + c.cuda_state + "; " + c.NativeLoadState);
        var o = Library.DefaultOptions();
        Check(o.struct_size == (uint)sizeof(Q4_op_options) && o.compute_path == Q4.PATH_AUTO, "Q4_op_options_init");

        var w = Nvfp4.Quantize(Random(32 * 64, 5), 32, 64);
        var x = Random(2 * 64, 6);
        var yBest = Nvfp4.Linear(x, 2, w);
        Library.SetMaxIsa(Q4.ISA_SCALAR);
        var yScalar = Nvfp4.Linear(x, 2, w);
        Check(Library.LastIsaUsed == Q4.ISA_SCALAR, "Q4_set_max_isa(SCALAR) -> last isa " + Library.LastIsaUsed);
        Library.SetMaxIsa(Q4.ISA_BEST);
        CloseArrays(yScalar, yBest.Select(v => (double)v).ToArray(), 1e-5, "scalar vs best ISA");
        if ((c.cpu_features & Q4.CPU_NEON) == 0)
            Throws<UnsupportedException>(() => Library.SetMaxIsa(Q4.ISA_NEON), "NEON on x86 is unsupported");

        int level = Library.LogLevel;
        Library.LogLevel = Q4.LOG_DEBUG;
        Check(Library.LogLevel == Q4.LOG_DEBUG, "log level set/get");
        var messages = new List<string>();
        Library.SetLogCallback((lvl, msg) => { lock (messages) messages.Add(lvl + ": " + msg); });
        using (var s = new Session()) { }
        Library.SetLogCallback(null);
        Library.LogLevel = level;
        Console.WriteLine("  log callback received " + messages.Count + " message(s)" + (messages.Count > 0 ? ", e.g. " + messages[0] : ""));
        Check(true, "log callback install/remove");

        var t = Library.TuneMatmul(64, 1, false);
        Check(t.dim == 64 && t.candidates > 0 && t.persisted == 0, "Q4_tune_matmul: " + t.candidates + " candidates, best " + t.best_ms + " ms");
    }
}
