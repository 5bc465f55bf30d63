//! Samudra's k×k convolutions (stride 1, unpadded, dilation d) on the CPU as im2col in tiles:
//! the forwards that neither Winograd nor [`crate::direct`] takes, and the weight gradients of
//! layers with few channels, where the per-tap GEMMs of [`crate::taps`] are thin and every tap
//! passes over the whole output again. (The data gradient here is what `ConvPlan::Tiles` forces;
//! the direct correlation took it over where it paid.)
//!
//! The output positions of one sample are cut into tiles of whole rows. Per tile, the `K` rows of
//! an im2col matrix (`K = C_in·k²` for the forward and the weight gradient: channel `ci`'s values
//! under tap `t` at the tile's positions) are gathered into a per-thread buffer small enough to
//! stay in cache ([`TILE_BYTES`]), and one single-threaded GEMM of the `gemm` crate takes all of
//! the tile's multiply-adds: the tiles run in parallel on rayon's pool.
//! - forward: `Y_tile = W · X_tile`, `W` the weight as `(C_out, C_in·k²)`, its own layout;
//! - data gradient: the correlation of the output gradient, read with the taps' offsets backwards
//!   (zero outside it), by the transposed weight: `dX_tile = Wᵀ' · G_tile`, with `G_tile`'s row
//!   `co·k² + t` holding `g[co, i − ky_t, j − kx_t]` at input position `(i, j)` and `Wᵀ'` the
//!   weight as `(C_in, C_out·k²)`; the zeros past the gradient's edges are multiplied too, so this
//!   pays only where the grid is large against the kernel's span ([`pays_data_gradient`]);
//! - weight gradient: `dW += G[:, tile] · X_tileᵀ`, summed per group of tiles and the groups'
//!   sums added in a fixed order; tiles and groups follow from the shapes alone, so results do
//!   not depend on the number of threads.
//!
//! A tile's GEMM writes its own `(rows, columns)` block of a scratch buffer; the blocks are then
//! copied into the NCHW result (with the bias, for the forward), one plane per task.
//!
//! Each pass does the convolution's multiply-adds in another order than a direct loop, so
//! results agree with a float64 reference to float32 rounding (the tests below and
//! `tests/conv.rs`).

use std::ops::Range;

use rayon::prelude::*;

use crate::scratch::Scratch;
use crate::taps::{Mat, ONE_THREAD, Taps, gemm_into};

/// Gathered values per tile, at most (in bytes): a tile's im2col block and the GEMM's packed
/// copies of it stay in a core's L2 cache (1 MiB on Zen 4, 2 MiB on the Xeon measured), with room
/// for the weight; 64 KiB to 1 MiB measured no better (docs/benchmarks.md).
const TILE_BYTES: usize = 256 << 10;

/// The weight gradient's groups of tiles: each sums its tiles' products into a partial gradient
/// of its own, then the partials are added in order.
const GROUPS: usize = 16;

/// Whether the weight gradient of `s` runs here rather than as per-tap GEMMs (where Winograd
/// does not take it; the forward always does): fewer than 128 channels on some side, so that the
/// per-tap GEMMs are thin, while the gathered rows (`C_in·k²`) stay few enough for a tile to hold
/// several output rows. docs/benchmarks.md has the measurements.
pub(crate) fn pays(s: &Taps) -> bool {
    s.cin.min(s.cout) < 128
}

/// Whether the data gradient of `s` runs here: as [`pays`], and a padded input at most twice the
/// output, so that the multiplied padding zeros are at most half of the work (not so for the
/// 8-dilated layers on the coarsest grids).
pub(crate) fn pays_data_gradient(s: &Taps) -> bool {
    let (h, w) = s.out();
    pays(s) && s.hp * s.wp <= 2 * h * w
}

/// `y[b, co] = bias[co] + Σ_{ci, tap} w[co, ci, tap] · x[b, ci, window of tap]`, `(b, cout, h, w)`.
pub(crate) fn forward(x: &[f32], weight: &[f32], bias: &[f32], s: &Taps) -> Vec<f32> {
    s.check(Some(x), Some(weight), None);
    assert_eq!(bias.len(), s.cout, "one bias per output channel");
    let (h, w) = s.out();
    let kdim = s.cin * s.kk();
    let lhs = Mat { data: weight, offset: 0, rows: s.cout, cols: kdim, rs: kdim, cs: 1 };
    let plane_in = s.cin * s.hp * s.wp;
    let tiles = Tiles::new(s.b, (h, w), kdim);
    tiles.multiply(lhs, Some(bias), |b, rows, cols| gather_input(&x[b * plane_in..][..plane_in], s, rows, cols))
}

/// `dx[b, ci, window of tap] += Σ_co w[co, ci, tap] · g[b, co]` over the taps, `(b, cin, hp, wp)`.
pub(crate) fn data_gradient(grad: &[f32], weight: &[f32], s: &Taps) -> Vec<f32> {
    s.check(None, Some(weight), Some(grad));
    let (h, w) = s.out();
    let kdim = s.cout * s.kk();
    let wt = s.by_input(weight, false);
    let lhs = Mat { data: &wt, offset: 0, rows: s.cin, cols: kdim, rs: kdim, cs: 1 };
    let plane_out = s.cout * h * w;
    let tiles = Tiles::new(s.b, (s.hp, s.wp), kdim);
    tiles.multiply(lhs, None, |b, rows, cols| gather_gradient(&grad[b * plane_out..][..plane_out], s, rows, cols))
}

/// `dw[co, ci, tap] = Σ_b Σ g[b, co] · x[b, ci, window of tap]`, `(cout, cin, k, k)`.
pub(crate) fn weight_gradient(x: &[f32], grad: &[f32], s: &Taps) -> Vec<f32> {
    s.check(Some(x), None, Some(grad));
    let (h, w) = s.out();
    let kdim = s.cin * s.kk();
    let (plane_in, plane_out, size) = (s.cin * s.hp * s.wp, s.cout * h * w, s.cout * kdim);
    let tiles = Tiles::new(s.b, (h, w), kdim);
    let list = tiles.list();
    let per_group = list.len().div_ceil(GROUPS.min(list.len()));
    let mut partial = vec![0f32; list.len().div_ceil(per_group) * size];
    partial.par_chunks_mut(size).zip(list.par_chunks(per_group)).for_each(|(dw, group)| {
        for (i, &(b, r0, r1)) in group.iter().enumerate() {
            let mut cols = Scratch::take(kdim * (r1 - r0) * w);
            gather_input(&x[b * plane_in..][..plane_in], s, r0..r1, &mut cols);
            let n = (r1 - r0) * w;
            let lhs = Mat { data: grad, offset: b * plane_out + r0 * w, rows: s.cout, cols: n, rs: h * w, cs: 1 };
            let rhs = Mat { data: &cols, offset: 0, rows: n, cols: kdim, rs: 1, cs: n };
            gemm_into(dw, 0, kdim, 1, i > 0, lhs, rhs, ONE_THREAD);
        }
    });
    let mut dw = vec![0f32; size];
    dw.par_chunks_mut(kdim).enumerate().for_each(|(co, dw)| {
        for part in partial.chunks(size) {
            for (d, p) in dw.iter_mut().zip(&part[co * kdim..][..kdim]) {
                *d += p;
            }
        }
    });
    dw
}

/// The tiles of a result of `b` samples with `(h, w)` positions each, `kdim` gathered rows deep.
struct Tiles {
    b: usize,
    h: usize,
    w: usize,
    /// Rows of positions per tile (the last tile of a sample may have fewer).
    rows: usize,
    kdim: usize,
}

impl Tiles {
    fn new(b: usize, (h, w): (usize, usize), kdim: usize) -> Tiles {
        let rows = (TILE_BYTES / (kdim * w * std::mem::size_of::<f32>())).clamp(1, h);
        Tiles { b, h, w, rows, kdim }
    }

    /// Every tile as (sample, first row, end row).
    fn list(&self) -> Vec<(usize, usize, usize)> {
        let per_sample = (0..self.h).step_by(self.rows).map(|r0| (r0, (r0 + self.rows).min(self.h)));
        (0..self.b).flat_map(|b| per_sample.clone().map(move |(r0, r1)| (b, r0, r1))).collect()
    }

    /// `lhs · gathered + bias[row]` as `(b, lhs.rows, h, w)`, `gather(b, rows, cols)` filling a
    /// tile's `(kdim, positions)` block. Each tile's GEMM writes its `(lhs.rows, positions)` block
    /// into a scratch buffer, per sample one after another, copied into place after.
    fn multiply(
        &self,
        lhs: Mat<'_>,
        bias: Option<&[f32]>,
        gather: impl Fn(usize, Range<usize>, &mut [f32]) + Sync,
    ) -> Vec<f32> {
        let (m, plane) = (lhs.rows, self.h * self.w);
        let mut staged = Scratch::take(self.b * m * plane);
        let blocks = staged.par_chunks_mut(m * plane).enumerate().flat_map(|(b, sample)| {
            sample.par_chunks_mut(m * self.rows * self.w).enumerate().map(move |(t, out)| (b, t, out))
        });
        blocks.for_each(|(b, t, out)| {
            let r0 = t * self.rows;
            let n = ((r0 + self.rows).min(self.h) - r0) * self.w;
            let mut cols = Scratch::take(self.kdim * n);
            gather(b, r0..r0 + n / self.w, &mut cols);
            let rhs = Mat { data: &cols, offset: 0, rows: self.kdim, cols: n, rs: n, cs: 1 };
            gemm_into(out, 0, n, 1, false, lhs, rhs, ONE_THREAD);
        });
        let mut out = vec![0f32; self.b * m * plane];
        out.par_chunks_mut(plane).enumerate().for_each(|(i, out)| {
            let (b, row) = (i / m, i % m);
            let add = bias.map_or(0.0, |bias| bias[row]);
            for r0 in (0..self.h).step_by(self.rows) {
                let n = ((r0 + self.rows).min(self.h) - r0) * self.w;
                let src = &staged[b * m * plane + r0 * self.w * m + row * n..][..n];
                for (o, &v) in out[r0 * self.w..][..n].iter_mut().zip(src) {
                    *o = v + add;
                }
            }
        });
        out
    }
}

/// The forward's im2col block of one sample's input `(cin, hp, wp)` for output rows `rows`: row
/// `ci·k² + t` holds `x[ci, r + ky_t, c + kx_t]` at output position `(r, c)`.
fn gather_input(xb: &[f32], s: &Taps, rows: Range<usize>, cols: &mut [f32]) {
    let w = s.out().1;
    let n = rows.len() * w;
    for (k, dst) in cols.chunks_mut(n).enumerate() {
        let (ci, t) = (k / s.kk(), k % s.kk());
        let (ky, kx) = (t / s.k * s.d, t % s.k * s.d);
        let plane = &xb[ci * s.hp * s.wp..][..s.hp * s.wp];
        for (dst, r) in dst.chunks_mut(w).zip(rows.clone()) {
            dst.copy_from_slice(&plane[(r + ky) * s.wp + kx..][..w]);
        }
    }
}

/// The data gradient's block of one sample's output gradient `(cout, h, w)` for input rows
/// `rows`: row `co·k² + t` holds `g[co, i − ky_t, j − kx_t]` at input position `(i, j)`, zero
/// where that lies outside the gradient.
fn gather_gradient(gb: &[f32], s: &Taps, rows: Range<usize>, cols: &mut [f32]) {
    let (h, w) = s.out();
    let n = rows.len() * s.wp;
    for (k, dst) in cols.chunks_mut(n).enumerate() {
        let (co, t) = (k / s.kk(), k % s.kk());
        let (ky, kx) = (t / s.k * s.d, t % s.k * s.d);
        let plane = &gb[co * h * w..][..h * w];
        for (dst, i) in dst.chunks_mut(s.wp).zip(rows.clone()) {
            match i.checked_sub(ky).filter(|&r| r < h) {
                Some(r) => {
                    dst[..kx].fill(0.0);
                    dst[kx..kx + w].copy_from_slice(&plane[r * w..][..w]);
                    dst[kx + w..].fill(0.0);
                }
                None => dst.fill(0.0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taps::tests::{Case, Passes, check_passes};

    const PASSES: Passes = Passes { forward, data_gradient, weight_gradient };

    #[test]
    fn the_three_passes_match_float64_loops() {
        // Several tiles per sample with a short last one (rows not a multiple), one tile, dilation
        // 3 with the span near the grid, a 5×5 kernel, batch 3 (tiles of several samples in one
        // weight-gradient group and groups across samples), more gathered rows than one tile holds.
        for s in [
            Taps { b: 2, cin: 16, cout: 24, k: 3, d: 1, hp: 40, wp: 182 },
            Taps { b: 1, cin: 3, cout: 2, k: 3, d: 1, hp: 3, wp: 7 },
            Taps { b: 1, cin: 5, cout: 7, k: 3, d: 3, hp: 11, wp: 13 },
            Taps { b: 3, cin: 4, cout: 6, k: 5, d: 2, hp: 21, wp: 19 },
            Taps { b: 1, cin: 300, cout: 3, k: 3, d: 1, hp: 8, wp: 40 },
        ] {
            // Gathered blocks come from scratch buffers full of NaN: any value left unwritten
            // fails the comparison.
            check_passes(&s, s.cin.max(s.cout) * s.kk() * s.hp * s.wp, &PASSES);
        }
    }

    #[test]
    fn the_weight_gradient_does_not_depend_on_the_threads() {
        let s = Taps { b: 2, cin: 8, cout: 8, k: 3, d: 2, hp: 70, wp: 100 };
        let Case { x, g, .. } = Case::new(&s);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let three = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let a = one.install(|| weight_gradient(&x, &g, &s));
        let b = three.install(|| weight_gradient(&x, &g, &s));
        assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()), "bit for bit on 1 and 3 threads");
    }

    #[test]
    #[should_panic(expected = "output gradient of")]
    fn a_short_gradient_is_refused_before_any_gemm() {
        let s = Taps { b: 1, cin: 2, cout: 2, k: 3, d: 1, hp: 4, wp: 4 };
        weight_gradient(&[0.0; 32], &[0.0; 3], &s);
    }
}
