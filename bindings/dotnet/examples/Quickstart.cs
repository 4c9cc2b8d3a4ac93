// The quickstart flow of README.md, compiled and run by CTest (dotnet_quickstart):
// write a small ModelOpt-style NVFP4 checkpoint, detect its schema from the
// tensor keys, create a session and a linear from it, forward, read diagnostics.
using System;
using System.IO;
using NVFP4;
using NVFP4.Native;

public static class Quickstart
{
    public static int Main(string[] args)
    {
        string path = Path.Combine(Path.GetTempPath(), "nvfp4_quickstart_" + Environment.TickCount + ".safetensors");
        try
        {
            WriteCheckpoint(path, 32, 64);
            Run(path);
            return 0;
        }
        finally { File.Delete(path); }
    }

    // A checkpoint with one NVFP4 linear "model.layers.0.mlp.up_proj" (N=32, K=64).
    static void WriteCheckpoint(string path, int n, int k)
    {
        var rnd = new Random(1);
        var w = new float[n * k];
        for (int i = 0; i < w.Length; i++) w[i] = (float)(rnd.NextDouble() - 0.5);
        Nvfp4Weight q = Nvfp4.Quantize(w, n, k);   // library quantizer, linear scale layout
        using (var writer = new CheckpointWriter())
        using (var qdata = DLTensorRef.FromArray(q.Qdata, n, k / 2))
        using (var scale = DLTensorRef.FromArray(q.Scale, DLDataType.Float8E4M3, n, k / 16))
        using (var g = DLTensorRef.FromArrayExact(new[] { q.GlobalScale }, DLDataType.Float32, new long[0]))
        {
            writer.Add("model.layers.0.mlp.up_proj.weight", Q4.DTYPE_U8, qdata);
            writer.Add("model.layers.0.mlp.up_proj.weight_scale", Q4.DTYPE_F8_E4M3, scale);
            writer.Add("model.layers.0.mlp.up_proj.weight_scale_2", Q4.DTYPE_F32, g);
            writer.Metadata("format", "pt");
            writer.Commit(path);
        }
    }

    // README: "Quick start"
    public static void Run(string path)
    {
        using (var ckpt = Checkpoint.Open(path))
        {
            // 1. schema from the tensor keys (names, dtypes, shapes)
            var keys = ckpt.TensorDescs();
            SchemaSummary summary = Schema.Detect(keys);
            LinearSchema[] linears = Schema.DetectLinears(keys);
            Console.WriteLine("schema: {0} {1}, {2} linear(s), first {3}",
                              summary.FormatName, summary.FamilyName, summary.NumLinears, linears[0].Prefix);

            // 2. a session and a linear
            using (var session = new Session())
            using (var linear = session.CreateLinear(ckpt, linears[0].Prefix))
            {
                // 3. forward: x [2, K] -> y [2, N]
                Q4_linear_info info = linear.Info;
                var x = new float[2 * info.in_features];
                for (int i = 0; i < x.Length; i++) x[i] = (i % 7) * 0.25f - 0.75f;
                float[] y = linear.Forward(x, 2);
                Console.WriteLine("y[0..3] = {0} {1} {2} {3}", y[0], y[1], y[2], y[3]);

                // 4. diagnostics
                Console.WriteLine("backend {0}, isa {1}, fell back {2}", info.backend,
                                  Library.IsaName(info.isa), info.fell_back);
                Console.WriteLine(linear.Diagnostics());
                Console.WriteLine("forwards so far: {0}", session.Stats.forwards);
            }
        }
    }
}
