//! Version, capabilities, ISA, tuner, logging and the CUDA helpers.
//! Process-wide settings (ISA cap, log level/callback) are exercised in one
//! test so parallel tests do not race on them.
use nvfp4::*;
use std::sync::{Arc, Mutex};

#[test]
fn version_and_abi() {
    check_abi().unwrap();
    assert_eq!(abi_version(), sys::NVFP4_ABI_VERSION);
    assert_eq!(version_string(), sys::NVFP4_VERSION_STRING);
    assert_eq!(version(), sys::NVFP4_VERSION_NUMBER);
}

#[test]
fn capabilities_isa_options_and_cuda_helpers() {
    let c = capabilities().unwrap();
    assert_eq!(c.abi_version, sys::NVFP4_ABI_VERSION);
    assert!(c.num_cpus >= 1);
    assert!(c.isa_best.is_some() && c.isa_active.is_some());
    assert!(!isa_name(Isa::Scalar).is_empty());
    assert!(c.cuda_state.is_some());

    // Defaults of the options mirror Q4_op_options_init.
    let o = OpOptions::default();
    assert_eq!((o.compute_path, o.target, o.math_mode), (ComputePath::Auto, Target::Auto, MathMode::Exact));
    let raw = o.raw();
    assert_eq!(raw.struct_size as usize, std::mem::size_of::<sys::Q4_op_options>());

    // An op records the ISA it ran on this thread.
    let x = vec![1.0f32; 32];
    Nvfp4Matrix::quantize(&x, 1, 32, ScaleLayout::Linear, 0.0).unwrap();
    assert!(last_isa_used().is_some());

    // Releasing the CUDA caches is always allowed (a no-op without CUDA).
    empty_cache().unwrap();
    // CUDA helpers without a device report "no" or NotAvailable.
    if c.cuda_state != Some(CudaState::Ready) {
        assert!(!can_use_managed(0).unwrap());
        assert!(!is_managed_tensor(&TensorView::from_slice(&x)).unwrap());
        assert_eq!(memory_info(0).unwrap_err().status, Status::NotAvailable);
        assert_eq!(cuda_synchronize(0, 0).unwrap_err().status, Status::NotAvailable);
        assert_eq!(to_managed(&TensorView::from_slice(&x), 0, 0).unwrap_err().status, Status::NotAvailable);
    } else {
        let (free, total) = memory_info(0).unwrap();
        assert!(free <= total && total > 0);
        let m = to_managed(&TensorView::from_slice(&x), 0, sys::Q4_MANAGED_REPORT_MANAGED).unwrap();
        assert_ne!(m.flags() & sys::DLPACK_FLAG_BITMASK_IS_COPIED, 0);
        managed_prefetch(&m, -1, 0).unwrap();
        cuda_synchronize(0, 0).unwrap();
    }
}

#[test]
fn process_wide_settings_isa_cap_logging_and_tuner() {
    // ISA cap: scalar is always available; Best removes the cap.
    set_max_isa(Isa::Scalar).unwrap();
    let x = vec![0.5f32; 32];
    Nvfp4Matrix::quantize(&x, 1, 32, ScaleLayout::Linear, 0.0).unwrap();
    assert_eq!(last_isa_used(), Some(Isa::Scalar));
    assert_eq!(capabilities().unwrap().isa_active, Some(Isa::Scalar));
    set_max_isa(Isa::Best).unwrap();
    #[cfg(target_arch = "x86_64")]
    assert_eq!(set_max_isa(Isa::Neon).unwrap_err().status, Status::Unsupported);

    // Log level and a Rust closure as callback.
    let before = log_level().unwrap();
    set_log_level(LogLevel::Debug).unwrap();
    assert_eq!(log_level(), Some(LogLevel::Debug));
    let seen: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = seen.clone();
    set_log_callback(move |lvl, msg| sink.lock().unwrap().push((lvl, msg.to_string()))).unwrap();
    // Work that may log at debug level (session create, tuner).
    let s = Session::with_defaults().unwrap();
    drop(s);

    // Tuner: argument errors name the argument; a tiny run works.
    let e = tune_matmul(8, 1, false).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("'dim'"), "{e}");
    let r = tune_matmul(16, 1, false).unwrap();
    assert_eq!((r.dim, r.runs, r.persisted), (16, 1, false));
    assert!(r.candidates >= 1 && r.best_ms >= 0.0);

    clear_log_callback().unwrap();
    set_log_level(before).unwrap();
    for (lvl, msg) in seen.lock().unwrap().iter() {
        assert!(*lvl != LogLevel::Off && !msg.is_empty());
    }
    eprintln!("log messages received: {}", seen.lock().unwrap().len());
}
