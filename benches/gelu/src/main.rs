//! Nanoseconds per element of the capped GELU and its gradient, one thread: libm's scalar `erff`
//! formula (Burn flex's `gelu` and `gelu_backward`) against om4's (`erf.rs`), the latter at the
//! widest width this build and CPU allow, in interleaved rounds, two ways: streamed over 16 Mi
//! elements of `4·sin(0.618·i)` (the gradient against `cos(0.377·i)`), where memory bounds it,
//! and over one block of 1 Ki elements in cache, repeated, as instance norm's fused pass runs it
//! (`norm.rs`), where the arithmetic does. Build the widths with `RUSTFLAGS` (om4's `erf` uses
//! fused multiply-adds: without `fma` in the build they are libm calls):
//!
//!     cargo run --release --manifest-path benches/gelu/Cargo.toml --target-dir target/bench-gelu
//!     RUSTFLAGS="-C target-feature=+avx2,+fma" cargo run --release ... --target-dir target/bench-gelu-avx2
//!     RUSTFLAGS="-C target-feature=+avx512f,+fma" cargo run --release ... --target-dir target/bench-gelu-avx512
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
    let block = 1 << 10;
    let width = if cfg!(target_feature = "avx512f") {
        "AVX-512"
    } else if cfg!(target_feature = "avx2") {
        "AVX2"
    } else {
        "baseline"
    };
    println!("{width}, ns per element: forward libm / om4, backward libm / om4");
    println!("round  streamed ({n} elements)                  in cache ({block} elements, repeated)");
    for round in 0..5 {
        // Streamed: each pass once over all of `src`. In cache: the first block, n / block times.
        let mut times = [0f64; 8];
        for (k, t) in times.iter_mut().enumerate() {
            let (len, reps) = if k < 4 { (n, 1) } else { (block, n / block) };
            let (s, g, d) = (&src[..len], &g[..len], &mut dst[..len]);
            let t0 = std::time::Instant::now();
            for _ in 0..reps {
                match k % 4 {
                    0 => forward(s, d, libm_capped),
                    1 => forward(s, d, gelu_capped),
                    2 => backward(s, g, d, libm_grad),
                    _ => backward(s, g, d, gelu_capped_grad),
                }
                std::hint::black_box(&mut *d);
            }
            *t = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
        }
        let [a, b, c, d, e, f, h, i] = times;
        println!(
            "{round:>5}  {a:6.2} / {b:4.2}  {c:6.2} / {d:4.2} ({:4.1}x, {:4.1}x)    {e:6.2} / {f:4.2}  {h:6.2} / {i:4.2} ({:4.1}x, {:4.1}x)",
            a / b,
            c / d,
            e / f,
            h / i
        );
    }
    std::hint::black_box(&dst);
}
