//! `cargo:rustc-link-arg` from nvfp4-sys applies to nvfp4-sys's own targets
//! only; repeat the rpath here (from `DEP_NVFP4_LIB_DIR`, exported by
//! nvfp4-sys through `links = "NVFP4"`) so this crate's tests, examples and
//! doc tests find libNVFP4 without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_NVFP4_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_NVFP4_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
