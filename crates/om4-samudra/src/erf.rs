//! The float32 arithmetic of Samudra's activation: the error function, `exp` of non-positive
//! arguments, and the capped GELU with its gradient, as branch-free polynomials (both pieces of a
//! piecewise function are evaluated and one is selected), so that a loop over them vectorizes
//! (see `wide`). Within 1.2 ulp (erf) and 1.5 ulp (exp) of the exact functions (tests). Plain
//! Rust with no dependency, so that `benches/gelu` times it beside libm's scalar `erff`.
//!
//! The polynomials are evaluated with fused multiply-adds (`f32::mul_add`, one rounding each),
//! which halve the operations of a Horner step: on AVX-512 the capped GELU took 0.61–0.73
//! instead of 1.22–1.31 ns per value and its gradient 0.80–0.89 instead of 1.54–1.68 (one
//! thread, values in cache; docs/benchmarks.md). A fused multiply-add is exactly rounded wherever it runs, in hardware
//! (`wide`'s AVX2 + FMA and AVX-512 variants, aarch64) or in software (libm's `fmaf`, on an
//! x86-64 without FMA, slowly), so every width computes the same bits.

/// The cap of Samudra's GELU.
pub(crate) const CAP: f32 = 10.0;

/// `erf(x) = x + x·R(x²)` below 1 (R: degree 6, `R(0) = 2/√π − 1`).
const ERF_SMALL: [f32; 7] =
    [0.128_379_17, -0.376_126_26, 0.112_835_854, -0.026_853_811, 0.005_188_327, -0.000_801_018_7, 0.000_078_538_425];
/// `erf(t) = 1 − exp(−F(t − 1))` from 1 to 3.93 (F: degree 9, a fit of `−ln erfc(t)`); above,
/// float32's erf is 1.
const ERF_LARGE: [f32; 10] = [
    1.849_605_6,
    2.638_967_8,
    0.843_104_6,
    0.041_576_546,
    -0.010_079_272,
    0.002_055_428_5,
    -0.000_320_575_43,
    0.000_032_937_827,
    -0.000_001_604_689_6,
    -0.000_000_004_773_068_6,
];
/// Where float32's erf reaches 1.
const ERF_ONE: f32 = 3.93;

/// `p[0] + p[1]·x + …` by Horner's rule, a fused multiply-add a step.
#[inline(always)]
fn horner<const N: usize>(p: &[f32; N], x: f32) -> f32 {
    let mut acc = p[N - 1];
    for &c in p[..N - 1].iter().rev() {
        acc = acc.mul_add(x, c);
    }
    acc
}

/// `exp(y)` for `y ≤ 0` (below −87, as at −87: about 1.6e-38), branch-free: `2^k · e^r` with
/// `|r| ≤ ln2/2` and e^r to degree 7.
#[inline(always)]
pub(crate) fn exp_neg(y: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75; // ln 2 split so that k·LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5·2^23: adding and subtracting rounds to an integer
    const TAYLOR: [f32; 8] = [1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];
    let y = if y < -87.0 { -87.0 } else { y };
    let shifted = y.mul_add(LOG2E, ROUND);
    let k = shifted - ROUND;
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, y));
    // k (an integer in −126..=0) sits in `shifted`'s low mantissa bits: 2^k from integer
    // arithmetic, which vectorizes where a float-to-int conversion would not.
    let k_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(k_bits.wrapping_add(127) << 23);
    horner(&TAYLOR, r) * scale
}

/// The error function in float32, branch-free (both pieces are evaluated and one is selected, so
/// that a loop over it vectorizes); NaN stays NaN.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let t = x.abs();
    let small = x.mul_add(horner(&ERF_SMALL, x * x), x);
    let u = (if t < ERF_ONE { t } else { ERF_ONE }) - 1.0;
    let large = 1.0 - exp_neg(-horner(&ERF_LARGE, u));
    let large = if t < ERF_ONE { large } else { 1.0 }.copysign(x);
    let r = if t < 1.0 { small } else { large };
    if x.is_nan() { x } else { r }
}

/// flex's GELU formula, `0.5 · x · (1 + erf(x / √2))`, with `x · (1/√2)` for `x / √2` (a division
/// costs several multiplications on every width; the two arguments differ by at most an ulp).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * core::f32::consts::FRAC_1_SQRT_2))
}

/// The cap as flex's `clamp_max` and autodiff's `mask_fill` apply it (NaN stays NaN).
#[inline(always)]
pub fn gelu_capped(x: f32) -> f32 {
    let y = gelu(x);
    if y > CAP { CAP } else { y }
}

/// The gradient of [`gelu_capped`] times `g`: zero where the cap applies (autodiff's `mask_fill`
/// backward), else flex's `gelu_backward` formula `g · (Φ(x) + x·φ(x))`.
#[inline(always)]
pub fn gelu_capped_grad(x: f32, g: f32) -> f32 {
    let e = erf(x * core::f32::consts::FRAC_1_SQRT_2);
    // `gelu(x)`'s own operations on the one erf.
    let g = if 0.5 * x * (1.0 + e) > CAP { 0.0 } else { g };
    let cdf = 0.5 * (1.0 + e);
    let inv_sqrt_2pi: f32 = 0.398_942_3;
    let pdf = inv_sqrt_2pi * exp_neg(-0.5 * x * x);
    g * x.mul_add(pdf, cdf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Float32 values to check: a dense grid over where the functions vary, and random bit
    /// patterns of every magnitude.
    fn samples(lo: f32, hi: f32) -> Vec<f32> {
        let n = 200_000;
        let mut v: Vec<f32> = (0..=n).map(|i| lo + (hi - lo) * i as f32 / n as f32).collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f32::from_bits(state as u32);
            if x.is_finite() && x >= lo && x <= hi {
                v.push(x);
            }
        }
        v
    }

    /// Error of `got` in units of the last place of the float32 nearest `exact`.
    fn ulps(got: f32, exact: f64) -> f64 {
        let nearest = exact as f32;
        let ulp = f64::from(f32::from_bits(nearest.abs().to_bits() + 1)) - f64::from(nearest.abs());
        (f64::from(got) - exact).abs() / ulp.max(f64::from(f32::from_bits(1)))
    }

    #[test]
    fn erf_and_exp_are_within_float32_rounding_of_the_exact_functions() {
        let worst = samples(-6.0, 6.0).into_iter().map(|x| ulps(erf(x), libm::erf(f64::from(x)))).fold(0.0, f64::max);
        assert!(worst <= 1.2, "erf: {worst} ulp");
        let worst = samples(-87.0, 0.0).into_iter().map(|y| ulps(exp_neg(y), f64::from(y).exp())).fold(0.0, f64::max);
        assert!(worst <= 1.5, "exp: {worst} ulp");
        assert!(erf(f32::NAN).is_nan() && erf(f32::INFINITY) == 1.0 && erf(f32::NEG_INFINITY) == -1.0);
        assert_eq!((erf(0.0).to_bits(), erf(-0.0).to_bits()), (0.0f32.to_bits(), (-0.0f32).to_bits()));
    }

    #[test]
    fn the_capped_gelu_and_its_gradient_are_within_float32_rounding() {
        let exact_cdf = |x: f64| 0.5 * (1.0 + libm::erf(x / core::f64::consts::SQRT_2));
        let exact_pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * core::f64::consts::PI).sqrt();
        for x in samples(-12.0, 12.0) {
            let e = f64::from(x);
            let (value, grad) = (e * exact_cdf(e), exact_cdf(e) + e * exact_pdf(e));
            // The formula itself cancels for large negative x (1 + erf → 0): errors relative to max(|v|, 1).
            let tol = |v: f64| 3.0 * f64::from(f32::EPSILON) * v.abs().max(1.0);
            if value > f64::from(CAP) + 1e-4 {
                assert_eq!((gelu_capped(x), gelu_capped_grad(x, 1.0)), (CAP, 0.0), "capped at {x}");
            } else if value < f64::from(CAP) - 1e-4 {
                assert!((f64::from(gelu_capped(x)) - value).abs() <= tol(value), "gelu({x}) = {}", gelu_capped(x));
                assert!((f64::from(gelu_capped_grad(x, 1.0)) - grad).abs() <= tol(grad), "gelu'({x})");
            }
        }
        assert!(gelu_capped(f32::NAN).is_nan() && gelu_capped_grad(f32::NAN, 1.0).is_nan());
    }
}
