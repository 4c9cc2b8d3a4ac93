// F# quickstart for the libNVFP4 .NET binding (the flow of examples/Quickstart.cs,
// which the tests compile and run):
//   dotnet fsi quickstart.fsx path/to/model.safetensors
// NVFP4.dll must be built (dotnet build bindings/dotnet/NVFP4.csproj, or the CMake
// target nvfp4_dotnet); libNVFP4 is found through NVFP4_LIBRARY, next to NVFP4.dll,
// or as libNVFP4.so.1 on the system loader path.
#r "NVFP4.dll"

open NVFP4
open NVFP4.Native

let path = fsi.CommandLineArgs.[1]

// Optional: load now, so that a missing library fails here (the API loads it on first use).
Library.Load()

let run () =
    use ckpt = Checkpoint.Open(path)

    // 1. schema from the tensor keys
    let keys = ckpt.TensorDescs()
    let summary = Schema.Detect(keys)
    let linears = Schema.DetectLinears(keys)
    printfn "schema: %s %s, %d linear(s)" summary.FormatName summary.FamilyName summary.NumLinears
    let prefix = linears.[0].Prefix

    // 2. a session and a linear
    use session = new Session()
    use linear = session.CreateLinear(ckpt, prefix)

    // 3. forward: x [2, K] -> y [2, N]
    let info = linear.Info
    let x = Array.init (2 * int info.in_features) (fun i -> float32 (i % 7) * 0.25f - 0.75f)
    let y = linear.Forward(x, 2L)
    printfn "%s: y[0] = %f (N = %d)" prefix y.[0] info.out_features

    // 4. diagnostics
    printfn "backend %d, isa %s, fell back %d" info.backend (Library.IsaName info.isa) info.fell_back
    printfn "%s" (linear.Diagnostics())
    printfn "forwards: %d" session.Stats.forwards

try
    run ()
with :? Q4Exception as e ->
    // Status, Q4_status_string and this thread's Q4_last_error()
    eprintfn "libNVFP4 error %A: %s" e.Status e.NativeMessage
    exit 1
