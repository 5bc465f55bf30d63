//! Elementwise passes at the widest vector width the CPU has: AVX-512 or AVX2 with FMA when
//! present (checked at run time), else the build's baseline (SSE2 on x86-64, where `erf`'s fused
//! multiply-adds are libm's `fmaf` calls: right, and slow).
//!
//! Each pass is one loop over an inlined scalar function of `erf`, compiled once per width by
//! [`passes!`]: the loop calls the function by name inside each `#[target_feature]` variant, so
//! that the variant inlines and vectorizes it at its width. (A variant generic over the function,
//! `impl Fn(f32) -> f32`, does not: rustc leaves the call through `Fn` out of line, and the
//! AVX-512 loop over the capped GELU ran 11× slower than a direct call, 72 against 6.8 ms for
//! 5.2 M values on one core, slower even than the baseline's 26 ms.) Rust never contracts
//! `a * b + c`, and `f32::mul_add` is one exactly rounded operation at every width, so every lane
//! computes exactly what the scalar function does and the variants agree bit for bit (tested).
//! Its `unsafe` is the calls of the `#[target_feature]` variants once the features have been
//! detected (the crate's other `unsafe` module is `taps`).

/// A vector width a pass can run at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512F with FMA.
    Avx512,
}

impl Width {
    /// The widest width this CPU runs.
    pub(crate) fn widest() -> Width {
        [Width::Avx512, Width::Avx2].into_iter().find(|w| w.available()).unwrap_or(Width::Baseline)
    }

    /// Whether this CPU runs this width.
    pub(crate) fn available(self) -> bool {
        match self {
            Width::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            Width::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Width::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Defines each pass `$name(width, inputs…, dst)`: `dst[i] = $f(inputs…[i])`, at `width` if this
/// CPU runs it, else at the baseline.
macro_rules! passes {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident),+) = $f:path;)+) => {$(
        $(#[$doc])*
        pub(crate) fn $name(width: Width, $($arg: &[f32],)+ dst: &mut [f32]) {
            $(assert_eq!($arg.len(), dst.len(), "an input as long as the output");)+
            #[inline(always)]
            fn body($($arg: &[f32],)+ dst: &mut [f32]) {
                passes!(@loop dst, $f, $($arg),+);
            }
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                fn avx512($($arg: &[f32],)+ dst: &mut [f32]) {
                    body($($arg,)+ dst)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: &[f32],)+ dst: &mut [f32]) {
                    body($($arg,)+ dst)
                }
                if width == Width::Avx512 && width.available() {
                    // SAFETY: the CPU has AVX-512F and FMA (just checked), the only features the variant enables.
                    return unsafe { avx512($($arg,)+ dst) };
                }
                if width == Width::Avx2 && width.available() {
                    // SAFETY: the CPU has AVX2 and FMA (just checked), the only features the variant enables.
                    return unsafe { avx2($($arg,)+ dst) };
                }
            }
            let _ = width;
            body($($arg,)+ dst)
        }
    )+};
    (@loop $dst:ident, $f:path, $a:ident) => {
        for (d, &x) in $dst.iter_mut().zip($a) {
            *d = $f(x);
        }
    };
    (@loop $dst:ident, $f:path, $a:ident, $b:ident) => {
        for (d, (&x, &y)) in $dst.iter_mut().zip($a.iter().zip($b)) {
            *d = $f(x, y);
        }
    };
}

passes! {
    /// The capped GELU of each value.
    fn gelu_capped(x) = crate::erf::gelu_capped;
    /// The capped GELU's gradient at each `x` times the output gradient `g`.
    fn gelu_capped_grad(x, g) = crate::erf::gelu_capped_grad;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_this_cpu_runs_equals_the_scalar_function_bit_for_bit() {
        let n = 4099;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.618_034).sin() * 12.0).collect();
        let g: Vec<f32> = (0..n).map(|i| (i as f32 * 0.377).cos()).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let want: Vec<f32> = x.iter().map(|&v| crate::erf::gelu_capped(v)).collect();
        let want_grad: Vec<f32> = x.iter().zip(&g).map(|(&v, &u)| crate::erf::gelu_capped_grad(v, u)).collect();
        let mut out = vec![0f32; n];
        for width in [Width::Baseline, Width::Avx2, Width::Avx512] {
            if !width.available() {
                eprintln!("{width:?}: not on this CPU");
                continue;
            }
            gelu_capped(width, &x, &mut out);
            assert_eq!(bits(&out), bits(&want), "{width:?}");
            gelu_capped_grad(width, &x, &g, &mut out);
            assert_eq!(bits(&out), bits(&want_grad), "{width:?} gradient");
        }
    }

    #[test]
    #[should_panic(expected = "an input as long as the output")]
    fn inputs_of_another_length_are_refused() {
        gelu_capped_grad(Width::widest(), &[1.0; 3], &[1.0; 2], &mut [0.0; 3]);
    }
}
