// Finds and loads libNVFP4 before the first P/Invoke, without LD_LIBRARY_PATH.
//
// Order: 1. env NVFP4_LIBRARY (a full path; an error if it does not load),
//        2. libNVFP4.so.1 / libNVFP4.so next to this assembly,
//        3. the system loader with the SONAME libNVFP4.so.1.
// The chosen file is dlopen()ed with RTLD_NOW|RTLD_GLOBAL. The DllImport name
// is the SONAME, and glibc's dlopen() of a bare name first matches libraries
// already loaded by their SONAME, so every P/Invoke (Mono and .NET alike)
// binds to the preloaded file. On .NET Core 3+ a DllImportResolver is also
// installed (through reflection: this assembly targets netstandard2.0, where
// System.Runtime.InteropServices.NativeLibrary does not exist).
using System;
using System.Collections.Generic;
using System.IO;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace NVFP4.Native
{
    public static class Loader
    {
        const int RTLD_NOW = 2, RTLD_GLOBAL = 0x100;
        static readonly object Gate = new object();
        static bool loaded;
        static string abiError; // a wrong ABI keeps failing on every later call
        static IntPtr libHandle;

        /// <summary>The file that was loaded (a path, or the SONAME when the system loader found it).</summary>
        public static string LoadedPath { get; private set; }
        /// <summary>Which rule chose it: "NVFP4_LIBRARY", "assembly-directory" or "system".</summary>
        public static string LoadedBy { get; private set; }
        /// <summary>Whether a .NET Core DllImportResolver was installed.</summary>
        public static bool ResolverInstalled { get; private set; }

        [DllImport("libc.so.6", EntryPoint = "dlopen")] static extern IntPtr dlopen_c(string path, int flags);
        [DllImport("libc.so.6", EntryPoint = "dlerror")] static extern IntPtr dlerror_c();
        [DllImport("libdl.so.2", EntryPoint = "dlopen")] static extern IntPtr dlopen_dl(string path, int flags);
        [DllImport("libdl.so.2", EntryPoint = "dlerror")] static extern IntPtr dlerror_dl();

        static bool useLibdl;

        static IntPtr DlOpen(string path, out string error)
        {
            error = null;
            IntPtr h = IntPtr.Zero;
            if (!useLibdl)
            {
                try
                {
                    h = dlopen_c(path, RTLD_NOW | RTLD_GLOBAL);
                    if (h == IntPtr.Zero) error = Text.FromStatic(dlerror_c());
                    return h;
                }
                catch (EntryPointNotFoundException) { useLibdl = true; } // glibc < 2.34: dlopen lives in libdl
                catch (DllNotFoundException) { useLibdl = true; }
            }
            h = dlopen_dl(path, RTLD_NOW | RTLD_GLOBAL);
            if (h == IntPtr.Zero) error = Text.FromStatic(dlerror_dl());
            return h;
        }

        /// <summary>The candidate files in resolution order (for diagnostics and tests).</summary>
        public static IList<KeyValuePair<string, string>> Candidates()
        {
            var list = new List<KeyValuePair<string, string>>();
            var env = Environment.GetEnvironmentVariable("NVFP4_LIBRARY");
            if (!string.IsNullOrEmpty(env)) list.Add(new KeyValuePair<string, string>("NVFP4_LIBRARY", env));
            string dir = null;
            try { dir = Path.GetDirectoryName(typeof(Loader).Assembly.Location); } catch (Exception) { }
            if (!string.IsNullOrEmpty(dir))
            {
                foreach (var name in new[] { NativeMethods.LibName, "libNVFP4.so" })
                {
                    var p = Path.Combine(dir, name);
                    if (File.Exists(p)) list.Add(new KeyValuePair<string, string>("assembly-directory", p));
                }
            }
            list.Add(new KeyValuePair<string, string>("system", NativeMethods.LibName));
            return list;
        }

        /// <summary>Loads the library (once) and checks Q4_abi_version(). Thread-safe.</summary>
        public static void EnsureLoaded()
        {
            lock (Gate)
            {
                if (abiError != null) throw new NotSupportedException(abiError);
                if (loaded) return;
                var errors = new List<string>();
                foreach (var c in Candidates())
                {
                    string err;
                    var h = DlOpen(c.Value, out err);
                    if (h != IntPtr.Zero)
                    {
                        libHandle = h;
                        LoadedPath = c.Value;
                        LoadedBy = c.Key;
                        break;
                    }
                    errors.Add(c.Key + " " + c.Value + ": " + err);
                    if (c.Key == "NVFP4_LIBRARY")
                        throw new DllNotFoundException("NVFP4_LIBRARY=" + c.Value + " could not be loaded: " + err);
                }
                if (libHandle == IntPtr.Zero)
                    throw new DllNotFoundException("libNVFP4 not found (tried: " + string.Join("; ", errors) +
                                                   "); set NVFP4_LIBRARY to the full path of libNVFP4.so");
                InstallNetCoreResolver();
                loaded = true; // before the first P/Invoke: NativeMethods' static constructor calls us
            }
            int abi = ReadAbiVersion();
            if (abi != Q4.ABI_VERSION)
            {
                abiError = "libNVFP4 at " + LoadedPath + " has ABI version " + abi + ", this binding needs " + Q4.ABI_VERSION;
                throw new NotSupportedException(abiError);
            }
        }

        // A separate, never-inlined method: Mono binds the P/Invoke when it compiles this method,
        // which happens at its first call, after the dlopen above.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static int ReadAbiVersion() { return NativeMethods.Q4_abi_version(); }

        // NativeLibrary.SetDllImportResolver(assembly, (name, asm, path) => handle), found by reflection.
        static void InstallNetCoreResolver()
        {
            try
            {
                var nl = Type.GetType("System.Runtime.InteropServices.NativeLibrary, System.Runtime.InteropServices", false)
                         ?? Type.GetType("System.Runtime.InteropServices.NativeLibrary", false);
                if (nl == null) return;
                var set = nl.GetMethod("SetDllImportResolver", BindingFlags.Public | BindingFlags.Static);
                if (set == null) return;
                var delegateType = set.GetParameters()[1].ParameterType; // DllImportResolver
                var target = typeof(Loader).GetMethod("Resolve", BindingFlags.NonPublic | BindingFlags.Static);
                var del = Delegate.CreateDelegate(delegateType, target);
                set.Invoke(null, new object[] { typeof(Loader).Assembly, del });
                ResolverInstalled = true;
            }
            catch (Exception) { /* the SONAME preload still works */ }
        }

        // Signature of System.Runtime.InteropServices.DllImportResolver.
        static IntPtr Resolve(string libraryName, Assembly assembly, DllImportSearchPath? searchPath)
        {
            return libraryName == NativeMethods.LibName ? libHandle : IntPtr.Zero;
        }
    }
}

namespace NVFP4
{
    /// <summary>
    /// Load guard of the safe API. Mono resolves a P/Invoke target when it JIT-compiles the calling
    /// method (not at the call), so the library must be preloaded before that. Mono runs the static
    /// initializer of a beforefieldinit class (this one: no explicit static constructor) while compiling
    /// the first method that reads one of its fields. Every method of the safe API that calls
    /// NativeMethods therefore starts with Boot.Require(Boot.Ready): the field read loads the library
    /// before the JIT reaches the P/Invoke calls below it. On .NET, P/Invokes bind at the first call,
    /// and the same read simply loads the library first.
    /// </summary>
    internal static class Boot
    {
        internal static readonly bool Ready = Load();

        static bool Load()
        {
            NVFP4.Native.Loader.EnsureLoaded();
            return true;
        }

        internal static void Require(bool ready)
        {
            if (!ready) throw new InvalidOperationException("libNVFP4 is not loaded");
        }
    }
}
