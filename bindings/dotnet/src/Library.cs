// Library-wide functions: version, errors, capabilities, ISA, tuner, logging.
using System;
using System.Runtime.InteropServices;
using NVFP4.Native;

namespace NVFP4
{
    public static unsafe class Library
    {
        /// <summary>Loads libNVFP4 now (otherwise the first call does) and checks its ABI version.</summary>
        public static void Load() { Loader.EnsureLoaded(); }

        public static int Version { get { Boot.Require(Boot.Ready); return NativeMethods.Q4_version(); } }
        public static string VersionString { get { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_version_string()); } }
        public static int AbiVersion { get { Boot.Require(Boot.Ready); return NativeMethods.Q4_abi_version(); } }
        public static string StatusString(int status) { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_status_string(status)); }
        /// <summary>This thread's last error message ("" if none).</summary>
        public static string LastError { get { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_last_error()); } }
        public static void ClearError() { Boot.Require(Boot.Ready); NativeMethods.Q4_clear_error(); }

        /// <summary>Q4_op_options with the library defaults (what a null options argument means).</summary>
        public static Q4_op_options DefaultOptions()
        {
            Boot.Require(Boot.Ready);
            Q4_op_options o;
            o.struct_size = (uint)sizeof(Q4_op_options);
            Q4Exception.Check(NativeMethods.Q4_op_options_init(&o));
            return o;
        }

        public static Q4_capabilities GetCapabilities()
        {
            Boot.Require(Boot.Ready);
            Q4_capabilities c = default(Q4_capabilities);
            c.struct_size = (uint)sizeof(Q4_capabilities);
            Q4Exception.Check(NativeMethods.Q4_get_capabilities(&c));
            return c;
        }

        public static string IsaName(int isa) { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_isa_name(isa)); }
        public static void SetMaxIsa(int isa) { Boot.Require(Boot.Ready); Q4Exception.Check(NativeMethods.Q4_set_max_isa(isa)); }
        public static int LastIsaUsed { get { Boot.Require(Boot.Ready); return NativeMethods.Q4_last_isa_used(); } }

        public static Q4_tune_result TuneMatmul(int dim, int runs, bool persist)
        {
            Boot.Require(Boot.Ready);
            Q4_tune_result r = default(Q4_tune_result);
            r.struct_size = (uint)sizeof(Q4_tune_result);
            Q4Exception.Check(NativeMethods.Q4_tune_matmul(dim, runs, persist ? 1 : 0, &r));
            return r;
        }

        public static int LogLevel
        {
            get { Boot.Require(Boot.Ready); return NativeMethods.Q4_get_log_level(); }
            set { Boot.Require(Boot.Ready); Q4Exception.Check(NativeMethods.Q4_set_log_level(value)); }
        }

#pragma warning disable 414 // written only to keep the delegate alive while installed
        static Q4_log_callback nativeCallback;
#pragma warning restore 414
        static Action<int, string> managedCallback;

        /// <summary>
        /// Installs (null: removes) the process-wide log callback. It may be invoked from any thread;
        /// exceptions it throws are swallowed (they must not unwind through native frames).
        /// </summary>
        public static void SetLogCallback(Action<int, string> callback)
        {
            Boot.Require(Boot.Ready);
            lock (typeof(Library))
            {
                if (callback == null)
                {
                    Q4Exception.Check(NativeMethods.Q4_set_log_callback(null, IntPtr.Zero));
                    nativeCallback = null;
                    managedCallback = null;
                    return;
                }
                managedCallback = callback;
                Q4_log_callback cb = OnLog;
                Q4Exception.Check(NativeMethods.Q4_set_log_callback(cb, IntPtr.Zero));
                nativeCallback = cb;
            }
        }

        static void OnLog(int level, IntPtr message, IntPtr user)
        {
            try
            {
                var cb = managedCallback;
                if (cb != null) cb(level, Text.FromUtf8(message));
            }
            catch (Exception) { }
        }
    }

    /// <summary>Session configuration helper.</summary>
    public static unsafe class SessionConfig
    {
        /// <summary>Q4_session_config with the library defaults.</summary>
        public static Q4_session_config Default()
        {
            Boot.Require(Boot.Ready);
            Q4_session_config c = default(Q4_session_config);
            c.struct_size = (uint)sizeof(Q4_session_config);
            Q4Exception.Check(NativeMethods.Q4_session_config_init(&c));
            return c;
        }
    }
}
