//! Nanoseconds per element of the capped GELU and its gradient, one thread, 16 Mi elements of
//! `4·sin(0.618·i)` (the gradient against `cos(0.377·i)`): libm's scalar `erff` formula (Burn
//! flex's `gelu` and `gelu_backward`) against om4's (`erf.rs`), the latter at the widest width this
//! build and CPU allow, in interleaved rounds. Build the widths with `RUSTFLAGS`:
//!
//!     cargo run --release --manifest-path benches/gelu/Cargo.toml --target-dir target/bench-gelu
//!     RUSTFLAGS="-C target-feature=+avx2" cargo run --release ... --target-dir target/bench-gelu-avx2
//!     RUSTFLAGS="-C target-feature=+avx512f" cargo run --release ... --target-dir target/bench-gelu-avx512
//!
//! om4's training picks the width at run time (`crates/om4-samudra/src/wide.rs`).

#[allow(dead_code, unreachable_pub)]
#[path = "../../../crates/om4-samudra/src/erf.rs"]
mod erf;

use erf::{gelu_capped, gelu_capped_grad};

const CAP: f32 = 10.0;

fn libm_gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x / core::f32::consts::SQRT_2))
}

fn libm_capped(x: f32) -> f32 {
    let y = libm_gelu(x);
    if y > CAP { CAP } else { y }
}

fn libm_grad(x: f32, g: f32) -> f32 {
    let g = if libm_gelu(x) > CAP { 0.0 } else { g };
    let inv_sqrt_2pi: f32 = 1.0 / (2.0 * core::f32::consts::PI).sqrt();
    let cdf = 0.5 * (1.0 + libm::erff(x / core::f32::consts::SQRT_2));
    g * (cdf + x * inv_sqrt_2pi * (-0.5 * x * x).exp())
}

#[inline(never)]
fn forward(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

#[inline(never)]
fn backward(src: &[f32], g: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for (d, (&s, &g)) in dst.iter_mut().zip(src.iter().zip(g)) {
        *d = f(s, g);
    }
}

fn main() {
    let n = 1 << 24;
    let src: Vec<f32> = (0..n).map(|i| (i as f32 * 0.618_034).sin() * 4.0).collect();
    let g: Vec<f32> = (0..n).map(|i| (i as f32 * 0.377).cos()).collect();
    let mut dst = vec![1f32; n];
    let ns = |f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e9 / n as f64
    };
    let width = if cfg!(target_feature = "avx512f") {
        "AVX-512"
    } else if cfg!(target_feature = "avx2") {
        "AVX2"
    } else {
        "baseline"
    };
    println!("round  forward libm  forward om4 ({width})  backward libm  backward om4  (ns per element)");
    for round in 0..5 {
        let a = ns(&mut || forward(&src, &mut dst, libm_capped));
        let b = ns(&mut || forward(&src, &mut dst, gelu_capped));
        let c = ns(&mut || backward(&src, &g, &mut dst, libm_grad));
        let d = ns(&mut || backward(&src, &g, &mut dst, gelu_capped_grad));
        println!("{round:>5} {a:>13.2} {b:>12.2} {:>13} {c:>14.2} {d:>13.2}   ({:.1}x, {:.1}x)", "", a / b, c / d);
    }
    std::hint::black_box(&dst);
}
