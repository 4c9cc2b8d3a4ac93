//! Finds libNVFP4 for linking, in this order:
//!
//! 1. `NVFP4_LIB_DIR` (a directory holding `libNVFP4.so`);
//! 2. the `pkg-config` binary asked for the `nvfp4` package (`PKG_CONFIG`
//!    names another binary);
//! 3. the linker's default search path.
//!
//! For 1 and 2 the directory is also exported to dependent build scripts as
//! `DEP_NVFP4_LIB_DIR` (this crate declares `links = "NVFP4"`), and an rpath
//! is added to this package's tests so they run without LD_LIBRARY_PATH.
//! (`cargo:rustc-link-arg` only applies to the package that emits it, so the
//! safe crate's build script repeats the rpath from `DEP_NVFP4_LIB_DIR`.)
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config_libdir() -> Option<PathBuf> {
    let bin = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&bin).args(["--variable=libdir", "nvfp4"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if dir.is_empty() {
        return None;
    }
    Some(PathBuf::from(dir))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NVFP4_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let dir = match env::var_os("NVFP4_LIB_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => pkg_config_libdir(),
    };
    if let Some(dir) = dir {
        let dir = dir.canonicalize().unwrap_or(dir);
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=NVFP4");

    // Headers the declarations mirror, for the layout test: the repository's
    // own include/ (this crate lives in bindings/rust/nvfp4-sys), unless
    // NVFP4_INCLUDE_DIR names another copy.
    println!("cargo:rerun-if-env-changed=NVFP4_INCLUDE_DIR");
    let inc = match env::var_os("NVFP4_INCLUDE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../../include"),
    };
    let inc = inc.canonicalize().unwrap_or(inc);
    println!("cargo:rustc-env=NVFP4_SYS_INCLUDE_DIR={}", inc.display());
    println!("cargo:include={}", inc.display());
}
