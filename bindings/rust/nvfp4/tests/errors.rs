//! Errors carry the right status and a message naming the argument.
mod common;
use common::randoms;
use nvfp4::*;

fn quantize_into(x: &[f32], shape: &[i64], q: &mut [u8], s: &mut [u8]) -> Result<f32> {
    nvfp4_quantize(
        &TensorView::new(x, shape)?,
        &mut TensorViewMut::from_slice(q),
        &mut TensorViewMut::from_slice(s),
        ScaleLayout::Linear,
        0.0,
        None,
    )
}

#[test]
fn library_errors_name_status_and_argument() {
    // K not a multiple of 16.
    let x = randoms(2 * 24, 1, 1.0);
    let e = quantize_into(&x, &[2, 24], &mut [0u8; 24], &mut [0u8; 3]).unwrap_err();
    assert_eq!(e.status, Status::Shape);
    assert!(e.message.contains("NVFP4_quantize"), "{e}");
    assert!(e.message.contains("'x'"), "{e}");

    // qdata too small.
    let x = randoms(2 * 32, 2, 1.0);
    let e = quantize_into(&x, &[2, 32], &mut [0u8; 31], &mut [0u8; 4]).unwrap_err();
    assert_eq!(e.status, Status::Shape);
    assert!(e.message.contains("'qdata'"), "{e}");

    // NaN names the first offending flat index.
    let mut x = randoms(2 * 32, 3, 1.0);
    x[37] = f32::NAN;
    let e = quantize_into(&x, &[2, 32], &mut [0u8; 32], &mut [0u8; 4]).unwrap_err();
    assert_eq!(e.status, Status::NonFinite);
    assert!(e.message.contains("37"), "{e}");

    // Wrong dtype for the activations (int32).
    let xi = vec![0i32; 32];
    let e = nvfp4_quantize(
        &TensorView::new(&xi, &[1, 32]).unwrap(),
        &mut TensorViewMut::from_slice(&mut [0u8; 16]),
        &mut TensorViewMut::from_slice(&mut [0u8; 2]),
        ScaleLayout::Linear,
        0.0,
        None,
    )
    .unwrap_err();
    assert_eq!(e.status, Status::Dtype);
    assert!(e.message.contains("'x'"), "{e}");

    // Dequantize requires a finite global scale > 0.
    let (q, s) = (vec![0u8; 16], vec![0u8; 2]);
    let mut out = vec![0f32; 32];
    let e = nvfp4_dequantize(
        &TensorView::from_slice(&q),
        &TensorView::from_slice(&s),
        ScaleLayout::Linear,
        0.0,
        &mut TensorViewMut::new(&mut out, &[1, 32]).unwrap(),
        None,
    )
    .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("global_scale"), "{e}");

    // Display has the status text, code and message.
    let text = e.to_string();
    assert!(text.contains(&format!("({})", sys::Q4_ERR_INVALID_ARGUMENT)), "{text}");
    assert!(text.contains(status_string(sys::Q4_ERR_INVALID_ARGUMENT)), "{text}");

    // The last error is this thread's; another thread starts clean.
    assert!(last_error().contains("global_scale"));
    std::thread::spawn(|| assert_eq!(last_error(), "")).join().unwrap();
    clear_error();
    assert_eq!(last_error(), "");
}

#[test]
fn binding_side_checks_happen_before_the_call() {
    let x = vec![0f32; 10];
    let e = TensorView::new(&x, &[3, 4]).unwrap_err();
    assert_eq!(e.status, Status::Shape);
    assert!(e.message.contains("'shape'") && e.message.contains("10"), "{e}");
    let e = TensorView::new(&x, &[-1, 10]).unwrap_err();
    assert_eq!(e.status, Status::Shape);
    let e = Nvfp4Matrix::quantize(&x, 1, 10, ScaleLayout::Linear, 0.0).unwrap_err();
    assert_eq!(e.status, Status::Shape);
    assert!(e.message.contains("'k'"), "{e}");
}

#[test]
fn every_status_round_trips() {
    for code in (1..=21).chain([99]) {
        let s = Status::from_code(code);
        assert!(!matches!(s, Status::Unknown(_)), "code {code}");
        assert_eq!(s.code(), code);
        assert_ne!(s.as_str(), status_string(12345));
    }
    assert_eq!(Status::from_code(1234), Status::Unknown(1234));
    assert_eq!(status_string(sys::Q4_OK), status_string(sys::Q4_OK)); // static text
    assert!(!status_string(sys::Q4_ERR_BUSY).is_empty());
}
