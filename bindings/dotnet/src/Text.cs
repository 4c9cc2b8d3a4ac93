using System;
using System.Runtime.InteropServices;
using System.Text;

namespace NVFP4.Native
{
    /// <summary>String conversions at the boundary.</summary>
    public static unsafe class Text
    {
        /// <summary>Static library text (const char* the caller must not free) to a string; NULL gives "".</summary>
        public static string FromStatic(IntPtr p)
        {
            return p == IntPtr.Zero ? "" : Marshal.PtrToStringAnsi(p);
        }

        /// <summary>A NUL-terminated UTF-8 string owned by the library (e.g. a tensor name) to a string.</summary>
        public static string FromUtf8(IntPtr p)
        {
            if (p == IntPtr.Zero) return null;
            byte* b = (byte*)p;
            int n = 0;
            while (b[n] != 0) n++;
            return Encoding.UTF8.GetString(b, n);
        }

        /// <summary>A fixed char[cap] field (NUL-terminated or full) to a string.</summary>
        public static string FromFixed(byte* p, int cap)
        {
            int n = 0;
            while (n < cap && p[n] != 0) n++;
            return Encoding.UTF8.GetString(p, n);
        }

        /// <summary>NUL-terminated UTF-8 bytes of s (for byte* parameters; pin with fixed).</summary>
        public static byte[] Utf8Z(string s)
        {
            if (s == null) return null;
            var n = Encoding.UTF8.GetByteCount(s);
            var b = new byte[n + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, b, 0);
            return b;
        }
    }
}
