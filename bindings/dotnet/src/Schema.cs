// Checkpoint schema detection from tensor keys.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;
using NVFP4.Native;

namespace NVFP4
{
    /// <summary>One checkpoint tensor: name, Q4_DTYPE_* (0 unknown), shape (null unknown).</summary>
    public sealed class TensorDesc
    {
        public string Name;
        public int Dtype;
        public long[] Shape;
        public TensorDesc(string name, int dtype = Q4.DTYPE_UNKNOWN, long[] shape = null) { Name = name; Dtype = dtype; Shape = shape; }
        public override string ToString() { return Name; }
    }

    public sealed class SchemaSummary
    {
        public int Format, Family, NumLinears, NumIncomplete;
        public int[] FamilyCounts = new int[8];
        /// <summary>Q4_last_error() when detection reported Q4_ERR_SCHEMA (the summary is still filled).</summary>
        public string Error;
        public string FormatName { get { return Schema.FormatName(Format); } }
        public string FamilyName { get { return Schema.SchemaName(Family); } }

        internal static unsafe SchemaSummary From(Q4_schema_summary* s)
        {
            var r = new SchemaSummary { Format = s->format, Family = s->family, NumLinears = s->num_linears,
                                        NumIncomplete = s->num_incomplete };
            for (int i = 0; i < 8; i++) r.FamilyCounts[i] = s->family_counts[i];
            return r;
        }
    }

    public sealed class LinearSchema
    {
        public string Prefix;
        public int Format, Family;
        public bool GlobalScaleInverted;
        /// <summary>Tensor index per Q4_ROLE_* (-1 absent).</summary>
        public int[] Roles = new int[Q4.MAX_ROLES];
        /// <summary>Tensor name per Q4_ROLE_* (null absent).</summary>
        public string[] RoleNames = new string[Q4.MAX_ROLES];
        public override string ToString() { return Prefix + " (" + Schema.SchemaName(Family) + ")"; }
    }

    public static unsafe class Schema
    {
        public static string SchemaName(int family) { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_schema_name(family)); }
        public static string FormatName(int format) { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_format_name(format)); }
        public static string DtypeName(int dtype) { Boot.Require(Boot.Ready); return Text.FromStatic(NativeMethods.Q4_dtype_name(dtype)); }

        // Native copies of the descriptors; names in unmanaged UTF-8 memory freed by Free.
        static Q4_tensor_desc[] ToNative(IList<TensorDesc> tensors, List<IntPtr> allocs)
        {
            var d = new Q4_tensor_desc[tensors.Count];
            for (int i = 0; i < d.Length; i++)
            {
                var t = tensors[i];
                var bytes = Text.Utf8Z(t.Name ?? "");
                var p = Marshal.AllocHGlobal(bytes.Length);
                allocs.Add(p);
                Marshal.Copy(bytes, 0, p, bytes.Length);
                d[i].name = p;
                d[i].dtype = t.Dtype;
                if (t.Shape == null) d[i].ndim = -1;
                else
                {
                    if (t.Shape.Length > Q4.MAX_NDIM) throw new ArgumentException(t.Name + ": more than 8 dimensions");
                    d[i].ndim = t.Shape.Length;
                    fixed (long* s = d[i].shape) for (int j = 0; j < t.Shape.Length; j++) s[j] = t.Shape[j];
                }
            }
            return d;
        }

        static void Free(List<IntPtr> allocs) { foreach (var p in allocs) Marshal.FreeHGlobal(p); }

        /// <summary>
        /// Summary of a tensor list. Throws SchemaException for an incomplete/ambiguous linear unless
        /// throwOnSchemaError is false, in which case the summary carries the message in Error.
        /// </summary>
        public static SchemaSummary Detect(IList<TensorDesc> tensors, bool throwOnSchemaError = true)
        {
            Boot.Require(Boot.Ready);
            var allocs = new List<IntPtr>();
            try
            {
                var d = ToNative(tensors, allocs);
                Q4_schema_summary s = default(Q4_schema_summary);
                s.struct_size = (uint)sizeof(Q4_schema_summary);
                int st;
                fixed (Q4_tensor_desc* p = d) st = NativeMethods.Q4_detect_schema(p, (UIntPtr)d.Length, &s);
                if (st == (int)Q4Status.Schema && !throwOnSchemaError)
                {
                    var r = SchemaSummary.From(&s);
                    r.Error = Library.LastError;
                    return r;
                }
                Q4Exception.Check(st);
                return SchemaSummary.From(&s);
            }
            finally { Free(allocs); }
        }

        /// <summary>The complete linears in order of first appearance.</summary>
        public static LinearSchema[] DetectLinears(IList<TensorDesc> tensors)
        {
            Boot.Require(Boot.Ready);
            var allocs = new List<IntPtr>();
            try
            {
                var d = ToNative(tensors, allocs);
                UIntPtr found = UIntPtr.Zero;
                Q4_linear_schema[] outs;
                fixed (Q4_tensor_desc* p = d)
                {
                    int st = NativeMethods.Q4_detect_linears(p, (UIntPtr)d.Length, null, UIntPtr.Zero, &found);
                    if (st != 0 && st != (int)Q4Status.BufferTooSmall) Q4Exception.Check(st);
                    outs = new Q4_linear_schema[(int)found.ToUInt64()];
                    for (int i = 0; i < outs.Length; i++) outs[i].struct_size = (uint)sizeof(Q4_linear_schema);
                    if (outs.Length > 0)
                        fixed (Q4_linear_schema* o = outs)
                            Q4Exception.Check(NativeMethods.Q4_detect_linears(p, (UIntPtr)d.Length, o,
                                                                              (UIntPtr)outs.Length, &found));
                }
                var r = new LinearSchema[outs.Length];
                for (int i = 0; i < outs.Length; i++)
                {
                    var l = new LinearSchema { Format = outs[i].format, Family = outs[i].family,
                                               GlobalScaleInverted = outs[i].global_scale_inverted != 0 };
                    var nameBytes = Text.Utf8Z(tensors[outs[i].prefix_tensor].Name);
                    l.Prefix = Encoding.UTF8.GetString(nameBytes, 0, outs[i].prefix_len);
                    fixed (int* roles = outs[i].roles)
                        for (int k = 0; k < Q4.MAX_ROLES; k++)
                        {
                            l.Roles[k] = roles[k];
                            l.RoleNames[k] = roles[k] >= 0 ? tensors[roles[k]].Name : null;
                        }
                    r[i] = l;
                }
                return r;
            }
            finally { Free(allocs); }
        }
    }
}
