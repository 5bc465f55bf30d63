//! The gradients of Samudra's k×k convolutions (stride 1, unpadded, dilation d) on the CPU as k²
//! GEMMs over views of the NCHW planes, one per kernel tap, for the shapes that none of
//! [`crate::winograd`], [`crate::direct`] and [`crate::tiles`] takes: many channels on a small
//! grid (and, for the data gradient, a grid small against the kernel's span); and the GEMM call
//! every GEMM path shares.
//!
//! The trick that makes every tap one GEMM on a plain strided view: the output is taken at the
//! input's width `W_in` ("wide"), so that a tap's window of an input channel, flattened, is one
//! run of `n = H·W_in − (k−1)·d` values starting at `ky·d·W_in + kx·d`. The gradient is widened
//! with zero columns past `W`, so those positions add nothing. Per sample and tap
//! (`W_t = w[:, :, ky, kx]`, `X_b` as `(C_in, H_in·W_in)`):
//! - data gradient: `dX_b[:, s_t .. s_t + n] += W_tᵀ · G_wide`;
//! - weight gradient: `dW_t += G_wide · X_b[:, s_t .. s_t + n]ᵀ`, summed over the batch.
//!
//! Each pass does exactly the convolution's multiply-adds, on the `gemm` crate (the kernels flex
//! itself uses), parallel over rayon's pool. The sums run in another order than a direct loop's,
//! so results agree with a float64 reference to float32 rounding (`tests/conv.rs`).
//!
//! `gemm::gemm` takes raw pointers and strides, so this is one of om4-samudra's two `unsafe`
//! modules (with `wide`): every call, here and in [`crate::winograd`] and [`crate::tiles`], goes
//! through [`gemm_into`], which checks that each matrix's last element lies inside its slice
//! before the call.

use rayon::prelude::*;

/// The shapes of one convolution: input `(b, cin, hp, wp)`, weight `(cout, cin, k, k)`,
/// dilation `d`, output `(b, cout, h, w)` with `h = hp − (k−1)·d`, `w = wp − (k−1)·d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taps {
    pub(crate) b: usize,
    pub(crate) cin: usize,
    pub(crate) cout: usize,
    pub(crate) k: usize,
    pub(crate) d: usize,
    pub(crate) hp: usize,
    pub(crate) wp: usize,
}

impl Taps {
    fn span(&self) -> usize {
        (self.k - 1) * self.d
    }

    /// Output height and width.
    pub(crate) fn out(&self) -> (usize, usize) {
        (self.hp - self.span(), self.wp - self.span())
    }

    /// Values in a tap's run: `H·W_in − (k−1)·d`.
    fn n(&self) -> usize {
        self.out().0 * self.wp - self.span()
    }

    /// Where tap `t` (row-major over the kernel) starts in a flattened input plane.
    pub(crate) fn start(&self, t: usize) -> usize {
        t / self.k * self.d * self.wp + t % self.k * self.d
    }

    pub(crate) fn kk(&self) -> usize {
        self.k * self.k
    }

    /// Panics unless the window lies inside the input and each slice given (the input, the
    /// weight, the output gradient) has the length the shapes say: before any GEMM reads them.
    pub(crate) fn check(&self, x: Option<&[f32]>, weight: Option<&[f32]>, grad: Option<&[f32]>) {
        let s = self;
        assert!(s.k >= 1 && s.d >= 1 && s.hp > s.span() && s.wp > s.span(), "a window inside the input: {s:?}");
        let (h, w) = s.out();
        for (slice, len, what) in [
            (x, s.b * s.cin * s.hp * s.wp, "input"),
            (weight, s.cout * s.cin * s.kk(), "weight"),
            (grad, s.b * s.cout * h * w, "output gradient"),
        ] {
            if let Some(slice) = slice {
                assert_eq!(slice.len(), len, "{what} of {s:?}");
            }
        }
    }

    /// The weight `(cout, cin, k, k)` as `(cin, cout·k²)`: element `(ci, co·k² + t)` is
    /// `w[co, ci, t]`, or with `turned` `w[co, ci, k² − 1 − t]` (each kernel turned by 180°): the
    /// left operand of a data gradient computed as a correlation of the output gradient.
    pub(crate) fn by_input(&self, weight: &[f32], turned: bool) -> Vec<f32> {
        let (kk, row) = (self.kk(), self.cout * self.kk());
        let mut out = vec![0f32; self.cin * row];
        out.par_chunks_mut(row).enumerate().for_each(|(ci, row)| {
            for (co, taps) in row.chunks_mut(kk).enumerate() {
                let kernel = &weight[(co * self.cin + ci) * kk..][..kk];
                taps.copy_from_slice(kernel);
                if turned {
                    taps.reverse();
                }
            }
        });
        out
    }

    fn multiply_adds(&self) -> usize {
        let (h, w) = self.out();
        self.b * self.cout * self.cin * self.kk() * h * w
    }
}

/// `dx[b, ci, window of tap] += Σ_co w[co, ci, tap] · g[b, co]` over the taps, `(b, cin, hp, wp)`.
pub(crate) fn data_gradient(grad: &[f32], weight: &[f32], s: &Taps) -> Vec<f32> {
    s.check(None, Some(weight), Some(grad));
    let plane_in = s.hp * s.wp;
    let mut dx = vec![0f32; s.b * s.cin * plane_in];
    let mut wide = vec![0f32; s.cout * s.out().0 * s.wp];
    for b in 0..s.b {
        widen(grad, b, s, &mut wide);
        let dxb = &mut dx[b * s.cin * plane_in..][..s.cin * plane_in];
        for t in 0..s.kk() {
            let lhs = Mat { data: weight, offset: t, rows: s.cin, cols: s.cout, rs: s.kk(), cs: s.cin * s.kk() };
            let rhs = Mat { data: &wide, offset: 0, rows: s.cout, cols: s.n(), rs: s.out().0 * s.wp, cs: 1 };
            gemm_into(dxb, s.start(t), plane_in, 1, true, lhs, rhs, s.multiply_adds());
        }
    }
    dx
}

/// `dw[co, ci, tap] = Σ_b Σ g[b, co] · x[b, ci, window of tap]`, `(cout, cin, k, k)`.
///
/// Each tap's `(cout, cin)` block is summed contiguously (a GEMM result with unit column
/// stride), then laid out tap-innermost.
pub(crate) fn weight_gradient(x: &[f32], grad: &[f32], s: &Taps) -> Vec<f32> {
    s.check(Some(x), None, Some(grad));
    let (plane_in, block) = (s.hp * s.wp, s.cout * s.cin);
    let mut wide = vec![0f32; s.cout * s.out().0 * s.wp];
    let mut per_tap = vec![0f32; s.kk() * block];
    for b in 0..s.b {
        widen(grad, b, s, &mut wide);
        let (xb, wide) = (&x[b * s.cin * plane_in..][..s.cin * plane_in], &wide);
        // The taps' blocks are apart: one GEMM per task, each as large as its own work allows
        // (their `(cout, cin)` results are too small for the GEMM to split well; sums long).
        per_tap.par_chunks_mut(block).enumerate().for_each(|(t, out)| {
            let lhs = Mat { data: wide, offset: 0, rows: s.cout, cols: s.n(), rs: s.out().0 * s.wp, cs: 1 };
            let rhs = Mat { data: xb, offset: s.start(t), rows: s.n(), cols: s.cin, rs: 1, cs: plane_in };
            gemm_into(out, 0, s.cin, 1, b > 0, lhs, rhs, s.multiply_adds() / s.kk());
        });
    }
    let mut dw = vec![0f32; s.kk() * block];
    for (i, d) in dw.chunks_mut(s.kk()).enumerate() {
        for (t, d) in d.iter_mut().enumerate() {
            *d = per_tap[t * block + i];
        }
    }
    dw
}

/// Sample `b` of the gradient `(b, cout, h, w)` at the input's width: zeros past column `w`.
fn widen(grad: &[f32], b: usize, s: &Taps, wide: &mut [f32]) {
    let (h, w) = s.out();
    let gb = &grad[b * s.cout * h * w..][..s.cout * h * w];
    wide.par_chunks_mut(s.wp).zip(gb.par_chunks(w)).for_each(|(wide, g)| {
        wide[..w].copy_from_slice(g);
        wide[w..].fill(0.0);
    });
}

/// A strided matrix view: element `(i, j)` is `data[offset + i·rs + j·cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) offset: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl Mat<'_> {
    /// Index one past the last element (`offset` for an empty matrix).
    fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        self.offset + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs + 1
    }
}

/// The `work` to give [`gemm_into`] for a GEMM that runs on the calling thread alone (one of
/// several that run in parallel).
pub(crate) const ONE_THREAD: usize = 0;

/// `dst[offset + i·rs + j·cs] (+)= Σ_l lhs(i, l) · rhs(l, j)`: accumulated when `accumulate`,
/// else overwritten. Parallel over rayon's pool unless the whole convolution (`work`
/// multiply-adds) is small or `work` is [`ONE_THREAD`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into(
    dst: &mut [f32],
    offset: usize,
    rs: usize,
    cs: usize,
    accumulate: bool,
    lhs: Mat<'_>,
    rhs: Mat<'_>,
    work: usize,
) {
    let (m, n, k) = (lhs.rows, rhs.cols, lhs.cols);
    assert_eq!(rhs.rows, k, "inner dimensions");
    assert!(lhs.end() <= lhs.data.len() && rhs.end() <= rhs.data.len(), "operands inside their slices");
    let out = Mat { data: &[], offset, rows: m, cols: n, rs, cs };
    assert!(out.end() <= dst.len(), "result inside its slice");
    if m == 0 || n == 0 {
        return;
    }
    let parallelism = if work >= 1 << 21 { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    // SAFETY: the asserts above put every element that `gemm` reads (lhs: offset + i·rs + l·cs for
    // i < m, l < k; rhs likewise for l < k, j < n) and writes (dst: offset + i·rs + j·cs for
    // i < m, j < n) inside its slice; strides are non-negative and at most the slices' lengths,
    // so they fit in isize; `dst` is borrowed mutably, so it aliases neither operand; and
    // `gemm` does not keep the pointers past the call. With `read_dst` false it ignores `alpha`
    // and writes every element of the result.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(offset),
            cs as isize,
            rs as isize,
            accumulate,
            lhs.data.as_ptr().add(lhs.offset),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr().add(rhs.offset),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scratch::tests::poison;

    /// The three passes by direct loops in float64 (also [`crate::winograd`]'s reference).
    pub(crate) fn reference(x: &[f32], w: &[f32], g: &[f32], s: &Taps) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (h, wo) = s.out();
        let mut y = vec![0f64; s.b * s.cout * h * wo];
        let mut dx = vec![0f64; x.len()];
        let mut dw = vec![0f64; w.len()];
        for b in 0..s.b {
            for co in 0..s.cout {
                for ci in 0..s.cin {
                    for t in 0..s.kk() {
                        let (ky, kx) = (t / s.k * s.d, t % s.k * s.d);
                        let wi = (co * s.cin + ci) * s.kk() + t;
                        for r in 0..h {
                            for c in 0..wo {
                                let yi = ((b * s.cout + co) * h + r) * wo + c;
                                let xi = ((b * s.cin + ci) * s.hp + r + ky) * s.wp + c + kx;
                                y[yi] += f64::from(w[wi]) * f64::from(x[xi]);
                                dx[xi] += f64::from(w[wi]) * f64::from(g[yi]);
                                dw[wi] += f64::from(g[yi]) * f64::from(x[xi]);
                            }
                        }
                    }
                }
            }
        }
        (y, dx, dw)
    }

    pub(crate) fn close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        assert!(got.iter().all(|v| v.is_finite()), "{what}: not finite");
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = got.iter().zip(want).fold(0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
        assert!(err <= 1e-5 * scale, "{what}: off by {err:e} of {scale:e}");
    }

    /// Deterministic test values in [-1, 1].
    pub(crate) fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + seed) * 0.618_034).sin()).collect()
    }

    /// One convolution's test inputs (input, weight, output gradient, bias) and its three passes
    /// by [`reference`], the output with the bias added.
    pub(crate) struct Case {
        pub(crate) x: Vec<f32>,
        pub(crate) wt: Vec<f32>,
        pub(crate) g: Vec<f32>,
        pub(crate) bias: Vec<f32>,
        pub(crate) ry: Vec<f64>,
        pub(crate) rdx: Vec<f64>,
        pub(crate) rdw: Vec<f64>,
    }

    impl Case {
        pub(crate) fn new(s: &Taps) -> Case {
            let (h, w) = s.out();
            let x = values(s.b * s.cin * s.hp * s.wp, 0.0);
            let wt = values(s.cout * s.cin * s.kk(), 7.0);
            let g = values(s.b * s.cout * h * w, 3.0);
            let bias = values(s.cout, 11.0);
            let (ry, rdx, rdw) = reference(&x, &wt, &g, s);
            let ry = ry.iter().enumerate().map(|(i, v)| v + f64::from(bias[i / (h * w) % s.cout])).collect();
            Case { x, wt, g, bias, ry, rdx, rdw }
        }
    }

    /// A pass of one module: forward `(x, weight, bias)`, data gradient `(grad, weight)`, weight
    /// gradient `(x, grad)`.
    pub(crate) struct Passes {
        pub(crate) forward: Forward,
        pub(crate) data_gradient: Gradient,
        pub(crate) weight_gradient: Gradient,
    }

    type Forward = fn(&[f32], &[f32], &[f32], &Taps) -> Vec<f32>;
    type Gradient = fn(&[f32], &[f32], &Taps) -> Vec<f32>;

    /// Each of the three `passes` on `s` against [`reference`], every one after filling this
    /// thread's scratch pool with `scratch` NaNs: a buffer left partly unwritten fails.
    pub(crate) fn check_passes(s: &Taps, scratch: usize, passes: &Passes) {
        let Case { x, wt, g, bias, ry, rdx, rdw } = Case::new(s);
        poison(scratch);
        close(&(passes.forward)(&x, &wt, &bias, s), &ry, &format!("{s:?} output"));
        poison(scratch);
        close(&(passes.data_gradient)(&g, &wt, s), &rdx, &format!("{s:?} data gradient"));
        poison(scratch);
        close(&(passes.weight_gradient)(&x, &g, s), &rdw, &format!("{s:?} weight gradient"));
    }

    #[test]
    fn the_gradients_match_float64_loops() {
        // Past gemm's blocking (channels over 64), dilation 2, batch 2, one row only, 1×1.
        for s in [
            Taps { b: 2, cin: 70, cout: 33, k: 3, d: 1, hp: 9, wp: 14 },
            Taps { b: 1, cin: 5, cout: 80, k: 3, d: 2, hp: 12, wp: 11 },
            Taps { b: 1, cin: 3, cout: 2, k: 3, d: 1, hp: 3, wp: 7 },
            Taps { b: 3, cin: 4, cout: 6, k: 1, d: 1, hp: 5, wp: 6 },
        ] {
            let Case { x, wt, g, rdx, rdw, .. } = Case::new(&s);
            close(&weight_gradient(&x, &g, &s), &rdw, &format!("{s:?} weight gradient"));
            close(&data_gradient(&g, &wt, &s), &rdx, &format!("{s:?} data gradient"));
        }
    }

    #[test]
    #[should_panic(expected = "input of")]
    fn a_short_input_is_refused_before_any_gemm() {
        let s = Taps { b: 1, cin: 2, cout: 2, k: 3, d: 1, hp: 4, wp: 4 };
        weight_gradient(&[0.0; 31], &[0.0; 8], &s);
    }
}
