using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using NVFP4;
using NVFP4.Native;

public static partial class Tests
{
    // Every exported symbol has exactly one DllImport, and every DllImport binds (Marshal.Prelink).
    static void AbiCoverage()
    {
        var path = Environment.GetEnvironmentVariable("NVFP4_SYMBOLS");
        if (string.IsNullOrEmpty(path) || !File.Exists(path))
        {
            Check(false, "NVFP4_SYMBOLS must name abi/libNVFP4.symbols (got '" + path + "')");
            return;
        }
        var symbols = File.ReadAllLines(path).Select(l => l.Trim()).Where(l => l.Length > 0 && !l.StartsWith("#")).ToList();
        Library.Load();
        var imports = typeof(NativeMethods).GetMethods(BindingFlags.Public | BindingFlags.Static)
            .Select(m => new { Method = m, Attr = (DllImportAttribute)m.GetCustomAttributes(typeof(DllImportAttribute), false).FirstOrDefault() })
            .Where(x => x.Attr != null).ToList();
        var names = imports.Select(x => x.Attr.EntryPoint ?? x.Method.Name).ToList();
        foreach (var s in symbols) Check(names.Count(n => n == s) == 1, "one DllImport for " + s);
        foreach (var n in names) Check(symbols.Contains(n), n + " is an exported symbol");
        foreach (var x in imports)
        {
            Check(x.Attr.Value == NativeMethods.LibName && x.Attr.CallingConvention == CallingConvention.Cdecl, x.Method.Name + ": library name and cdecl");
            try { Marshal.Prelink(x.Method); passed++; }
            catch (Exception e) { Check(false, "Prelink " + x.Method.Name + ": " + e.GetType().Name); }
        }
        // const char* results are IntPtr, never string (the marshaller would free static text).
        foreach (var x in imports) Check(x.Method.ReturnType != typeof(string), x.Method.Name + " does not return string");
        Console.WriteLine("  " + symbols.Count + " symbols, " + imports.Count + " DllImports bound");
    }
}
