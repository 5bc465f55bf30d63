//! The data gradient of Samudra's k×k convolutions (stride 1, unpadded, dilation d) on the CPU as
//! GEMMs over the output's own positions and a scatter-add ("col2im"), for small grids under a
//! wide kernel span: the 8-dilated layers on the coarsest grids, where the other ways multiply
//! mostly zeros or columns they drop ([`crate::direct`] and [`crate::tiles`] run over the padded
//! input's positions, up to 10× the output's; [`crate::taps`] over the output at the input's
//! width, 2.5× there) and where each of k² per-tap GEMMs is too small to split across threads.
//!
//! Per sample and group of [`GROUP`] input channels (one rayon task each), one single-threaded
//! GEMM `C = Wᵀ_group · G_b` of the weight as `(C_in·k², C_out)` (row `ci·k² + t`: `w[:, ci, t]`)
//! by the sample's output gradient `(C_out, H·W)`: exactly the pass's multiply-adds. Then each
//! row of `C` is added into the group's own input-gradient plane at its tap's offset, taps in
//! order; the groups' planes are apart, so tasks write nothing in common. Each value is the
//! same sums in the same order however many threads run (the groups follow from the shapes), and
//! agrees with a float64 reference to float32 rounding (the tests below and `tests/conv.rs`).

use rayon::prelude::*;

use crate::scratch::Scratch;
use crate::taps::{Mat, ONE_THREAD, Taps, gemm_into};

/// Input channels per task: Samudra's channel counts are multiples of 8, and a group's GEMM
/// (`8·k²` rows) still fills the GEMM's register blocks.
const GROUP: usize = 8;

/// Whether the data gradient of `s` runs here (where Winograd does not take it): outputs of at
/// most 1024 positions (22 × 45 and smaller at 2°), with any number of channels; on 45 × 90 the
/// direct correlation was as fast or faster. docs/benchmarks.md has the measurements.
pub(crate) fn pays(s: &Taps) -> bool {
    let (h, w) = s.out();
    h * w <= 1024
}

/// `dx[b, ci, window of tap] += Σ_co w[co, ci, tap] · g[b, co]` over the taps, `(b, cin, hp, wp)`.
pub(crate) fn data_gradient(grad: &[f32], weight: &[f32], s: &Taps) -> Vec<f32> {
    s.check(None, Some(weight), Some(grad));
    let (h, w) = s.out();
    let (kk, plane_in, plane_out) = (s.kk(), s.hp * s.wp, h * w);
    let mut dx = vec![0f32; s.b * s.cin * plane_in];
    let tasks = dx.par_chunks_mut(s.cin * plane_in).enumerate().flat_map(|(b, sample)| {
        sample.par_chunks_mut(GROUP * plane_in).enumerate().map(move |(i, planes)| (b, i * GROUP, planes))
    });
    tasks.for_each(|(b, c0, planes)| {
        let rows = planes.len() / plane_in * kk;
        let mut cols = Scratch::take(rows * plane_out);
        let lhs = Mat { data: weight, offset: c0 * kk, rows, cols: s.cout, rs: 1, cs: s.cin * kk };
        let rhs =
            Mat { data: grad, offset: b * s.cout * plane_out, rows: s.cout, cols: plane_out, rs: plane_out, cs: 1 };
        gemm_into(&mut cols, 0, plane_out, 1, false, lhs, rhs, ONE_THREAD);
        for (dst, cols) in planes.chunks_mut(plane_in).zip(cols.chunks(kk * plane_out)) {
            for (t, tap) in cols.chunks(plane_out).enumerate() {
                let dst = &mut dst[s.start(t)..];
                for (r, src) in tap.chunks(w).enumerate() {
                    for (d, v) in dst[r * s.wp..][..w].iter_mut().zip(src) {
                        *d += v;
                    }
                }
            }
        }
    });
    dx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::tests::poison;
    use crate::taps::tests::{Case, close};

    #[test]
    fn the_data_gradient_matches_float64_loops() {
        // A group cut short (12 = 8 + 4 channels), batch 2, dilation 8 on a plane smaller than
        // the span, more channels than the GEMM's blocks, one output row, a 5×5 kernel.
        for s in [
            Taps { b: 2, cin: 12, cout: 6, k: 3, d: 8, hp: 21, wp: 27 },
            Taps { b: 1, cin: 70, cout: 96, k: 3, d: 2, hp: 9, wp: 14 },
            Taps { b: 1, cin: 3, cout: 5, k: 3, d: 1, hp: 3, wp: 7 },
            Taps { b: 3, cin: 9, cout: 4, k: 5, d: 1, hp: 8, wp: 6 },
        ] {
            let Case { wt, g, rdx, .. } = Case::new(&s);
            poison(s.cin * s.kk() * s.hp * s.wp);
            close(&data_gradient(&g, &wt, &s), &rdx, &format!("{s:?} data gradient"));
        }
    }

    #[test]
    fn the_result_does_not_depend_on_the_threads() {
        let s = Taps { b: 2, cin: 24, cout: 16, k: 3, d: 4, hp: 14, wp: 19 };
        let Case { wt, g, .. } = Case::new(&s);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a pool");
        let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool");
        let a = one.install(|| data_gradient(&g, &wt, &s));
        let b = three.install(|| data_gradient(&g, &wt, &s));
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "1 and 3 threads differ");
    }
}
