//! Elementwise passes at the widest vector width the CPU has: AVX-512 or AVX2 when present
//! (checked at run time), else the build's baseline (SSE2 on x86-64). Each variant compiles the
//! same loop over the same inlined scalar function; with no fused multiply-add (Rust never
//! contracts `a * b + c`), every lane computes exactly what the scalar function does, so the
//! variants agree bit for bit (tested). Its `unsafe` is the calls of the `#[target_feature]`
//! variants once the feature has been detected (the crate's other `unsafe` module is `taps`).

/// `dst[i] = f(src[i])`.
pub(crate) fn unary(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the variant enables.
            return unsafe { x86::unary_avx512(src, dst, f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the variant enables.
            return unsafe { x86::unary_avx2(src, dst, f) };
        }
    }
    unary_loop(src, dst, f);
}

/// `dst[i] = f(a[i], b[i])`.
pub(crate) fn binary(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the variant enables.
            return unsafe { x86::binary_avx512(a, b, dst, f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the variant enables.
            return unsafe { x86::binary_avx2(a, b, dst, f) };
        }
    }
    binary_loop(a, b, dst, f);
}

#[inline(always)]
fn unary_loop(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

#[inline(always)]
fn binary_loop(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for (d, (&x, &y)) in dst.iter_mut().zip(a.iter().zip(b)) {
        *d = f(x, y);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f")]
    pub(super) fn unary_avx512(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
        super::unary_loop(src, dst, f);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn unary_avx2(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
        super::unary_loop(src, dst, f);
    }

    #[target_feature(enable = "avx512f")]
    pub(super) fn binary_avx512(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        super::binary_loop(a, b, dst, f);
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn binary_avx2(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
        super::binary_loop(a, b, dst, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_this_cpu_runs_equals_the_scalar_function_bit_for_bit() {
        let f = crate::erf::gelu_capped;
        let g = crate::erf::gelu_capped_grad;
        let n = 4099;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.618_034).sin() * 12.0).collect();
        let w: Vec<f32> = (0..n).map(|i| (i as f32 * 0.377).cos()).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
        let want_grad: Vec<f32> = x.iter().zip(&w).map(|(&v, &u)| g(v, u)).collect();
        let mut out = vec![0f32; n];
        unary_loop(&x, &mut out, f);
        assert_eq!(bits(&out), bits(&want), "baseline");
        binary_loop(&x, &w, &mut out, g);
        assert_eq!(bits(&out), bits(&want_grad), "baseline gradient");
        #[cfg(target_arch = "x86_64")]
        for (name, present) in [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ] {
            if !present {
                eprintln!("{name}: not on this CPU");
                continue;
            }
            // SAFETY: the feature was detected just above.
            unsafe {
                if name == "avx2" { x86::unary_avx2(&x, &mut out, f) } else { x86::unary_avx512(&x, &mut out, f) }
            }
            assert_eq!(bits(&out), bits(&want), "{name}");
            // SAFETY: as above.
            unsafe {
                if name == "avx2" {
                    x86::binary_avx2(&x, &w, &mut out, g)
                } else {
                    x86::binary_avx512(&x, &w, &mut out, g)
                }
            }
            assert_eq!(bits(&out), bits(&want_grad), "{name} gradient");
        }
    }
}
