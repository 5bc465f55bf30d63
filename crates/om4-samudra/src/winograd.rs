//! Samudra's 3×3 convolutions (stride 1, unpadded, dilation d) on the CPU by Winograd's minimal
//! filtering F(2×2, 3×3): all three passes with 2.25 times fewer multiply-adds than the per-tap
//! GEMMs of [`crate::taps`].
//!
//! A dilated 3×3 convolution is d² undilated ones on the sub-grids of rows and columns of equal
//! residue mod d, so a tile is two outputs `p, p + d` by two `q, q + d` (its anchors are the
//! positions `p` with `p mod 2d < d`, which cover every output once) and reads the 4 × 4 inputs
//! `p + d·a, q + d·b`. Per tile and channel the input is transformed (`V = Bᵀ·x·B`), per kernel
//! `U = G·w·Gᵀ`; then for each of the 16 transformed positions one GEMM of the `gemm` crate sums
//! over the input channels (`M_k = U_k · V_k`, the tiles as columns), and the output transform
//! `Aᵀ·M·A` gives the 2 × 2 outputs. Outputs past the edge are not written; inputs past it read
//! as zero.
//!
//! The data gradient is the same correlation of the output gradient, read with an offset of
//! `2d` (zero outside), with the kernel transposed and rotated by half a turn: no padded copy.
//! The weight gradient is the forward's adjoint: the output gradient's tiles transformed by
//! `A·g·Aᵀ`, per position one GEMM over the tiles with the input's transformed tiles, and
//! `Gᵀ·dU·G` per kernel.
//!
//! The transforms' coefficients (0, ±1, ±½) add rounding of their own: results agree with a
//! float64 reference to a few float32 ulps of the largest value, like the per-tap path's
//! (`tests/conv.rs` and the tests below hold both within 1e-5 of it).

use rayon::prelude::*;

use crate::scratch::Scratch;
use crate::taps::{Mat, ONE_THREAD, Taps, gemm_into};

/// Whether the three passes of `s` run here rather than in [`crate::tiles`] or as per-tap GEMMs:
/// a 3×3 kernel, channels enough for the 16 GEMMs to run at the GEMM's rate and tiles enough to
/// share the transforms' cost (64 channels on 64 × 64 outputs, or 128 on half as many; at 22 × 45
/// with 480 channels the per-tap gradients were faster). docs/benchmarks.md has the measurements.
pub(crate) fn pays(s: &Taps) -> bool {
    let (h, w) = s.out();
    let channels = s.cin.min(s.cout);
    s.k == 3 && ((channels >= 64 && h * w >= 64 * 64) || (channels >= 128 && h * w >= 32 * 64))
}

/// `y[b, co] = bias[co] + Σ_{ci, tap} w[co, ci, tap] · x[b, ci, window of tap]`, `(b, cout, h, w)`.
pub(crate) fn forward(x: &[f32], weight: &[f32], bias: &[f32], s: &Taps) -> Vec<f32> {
    check(s, Some(x), Some(weight), None);
    assert_eq!(bias.len(), s.cout, "one bias per output channel");
    let (h, w) = s.out();
    let u = transform_kernels(weight, s.cout, s.cin, |o, i, a, b| ((o * s.cin + i) * 3 + a) * 3 + b);
    let mut y = vec![0f32; s.b * s.cout * h * w];
    for (x, y) in x.chunks(s.cin * s.hp * s.wp).zip(y.chunks_mut(s.cout * h * w)) {
        correlate(x, (s.cin, s.hp, s.wp), &u, s.cout, (h, w), s.d, 0, Some(bias), y);
    }
    y
}

/// `dx[b, ci, window of tap] += Σ_co w[co, ci, tap] · g[b, co]` over the taps, `(b, cin, hp, wp)`.
pub(crate) fn data_gradient(grad: &[f32], weight: &[f32], s: &Taps) -> Vec<f32> {
    check(s, None, Some(weight), Some(grad));
    let (h, w) = s.out();
    // dx[i, p, q] = Σ_o Σ_{a,b} w[o, i, 2 − a, 2 − b] · g[o, p + d·a − 2d, q + d·b − 2d].
    let u = transform_kernels(weight, s.cin, s.cout, |i, o, a, b| ((o * s.cin + i) * 3 + 2 - a) * 3 + 2 - b);
    let mut dx = vec![0f32; s.b * s.cin * s.hp * s.wp];
    for (g, dx) in grad.chunks(s.cout * h * w).zip(dx.chunks_mut(s.cin * s.hp * s.wp)) {
        correlate(g, (s.cout, h, w), &u, s.cin, (s.hp, s.wp), s.d, 2 * s.d, None, dx);
    }
    dx
}

/// `dw[co, ci, tap] = Σ_b Σ g[b, co] · x[b, ci, window of tap]`, `(cout, cin, 3, 3)`.
///
/// The forward's adjoint: per tile the output gradient's transform `A·g·Aᵀ` (`dM`, 4 × 4), per
/// position k one GEMM over the tiles `dU_k = dM_k · V_kᵀ` (summed over the batch), and per kernel
/// `dw = Gᵀ·dU·G`, in float64 and rounded once.
pub(crate) fn weight_gradient(x: &[f32], grad: &[f32], s: &Taps) -> Vec<f32> {
    check(s, Some(x), None, Some(grad));
    let (h, w) = s.out();
    let (rows, cols) = (anchors(h, s.d), anchors(w, s.d));
    let tiles = rows.len() * cols.len();
    // dU[k][i][o] = V_k · dM_kᵀ: the input's tiles as the left operand (rows along the tiles) and
    // the gradient's laid out tile-major (rows along the channels), the layouts the GEMM runs
    // fastest on (about 250 GFLOP/s here against 190 with both operands read along the tiles).
    let block = s.cout * s.cin;
    let mut du = vec![0f32; 16 * block];
    let samples = x.chunks(s.cin * s.hp * s.wp).zip(grad.chunks(s.cout * h * w));
    for (b, (x, g)) in samples.enumerate() {
        let v = transform_tiles(x, (s.cin, s.hp, s.wp), (&rows, &cols), s.d, 0);
        let dm = transform_gradient(g, (s.cout, h, w), (&rows, &cols), s.d);
        du.par_chunks_mut(block).enumerate().for_each(|(k, du)| {
            let lhs = Mat { data: &v, offset: k * tiles, rows: s.cin, cols: tiles, rs: 16 * tiles, cs: 1 };
            let rhs = Mat { data: &dm, offset: k * s.cout, rows: tiles, cols: s.cout, rs: 16 * s.cout, cs: 1 };
            gemm_into(du, 0, s.cout, 1, b > 0, lhs, rhs, ONE_THREAD);
        });
    }
    let mut dw = vec![0f32; block * 9];
    dw.par_chunks_mut(9).enumerate().for_each(|(oi, dw)| {
        let (o, i) = (oi / s.cin, oi % s.cin);
        let du = |k: usize, l: usize| f64::from(du[(k * 4 + l) * block + i * s.cout + o]);
        // r = Gᵀ·dU (3 × 4), then dw = r·G (3 × 3).
        let r: [[f64; 4]; 3] = [
            std::array::from_fn(|l| du(0, l) + (du(1, l) + du(2, l)) / 2.0),
            std::array::from_fn(|l| (du(1, l) - du(2, l)) / 2.0),
            std::array::from_fn(|l| (du(1, l) + du(2, l)) / 2.0 + du(3, l)),
        ];
        for (a, r) in r.iter().enumerate() {
            let row = [r[0] + (r[1] + r[2]) / 2.0, (r[1] - r[2]) / 2.0, (r[1] + r[2]) / 2.0 + r[3]];
            for (b, v) in row.into_iter().enumerate() {
                dw[a * 3 + b] = v as f32;
            }
        }
    });
    dw
}

/// [`Taps::check`] for a 3×3 kernel.
fn check(s: &Taps, x: Option<&[f32]>, weight: Option<&[f32]>, grad: Option<&[f32]>) {
    assert_eq!(s.k, 3, "a 3×3 kernel: {s:?}");
    s.check(x, weight, grad);
}

/// `U = G·k·Gᵀ` for every `(row, col)` kernel `k[a][b] = weight[at(row, col, a, b)]`, laid out
/// `[16][rows][cols]`; computed in float64 and rounded once.
fn transform_kernels(
    weight: &[f32],
    rows: usize,
    cols: usize,
    at: impl Fn(usize, usize, usize, usize) -> usize + Sync,
) -> Vec<f32> {
    let mut u = vec![0f32; 16 * rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let k = |a: usize, b: usize| f64::from(weight[at(r, c, a, b)]);
            // s = G·k (4 × 3), then U = s·Gᵀ (4 × 4).
            let s: [[f64; 3]; 4] = [
                std::array::from_fn(|b| k(0, b)),
                std::array::from_fn(|b| (k(0, b) + k(1, b) + k(2, b)) / 2.0),
                std::array::from_fn(|b| (k(0, b) - k(1, b) + k(2, b)) / 2.0),
                std::array::from_fn(|b| k(2, b)),
            ];
            for (a, s) in s.iter().enumerate() {
                let row = [s[0], (s[0] + s[1] + s[2]) / 2.0, (s[0] - s[1] + s[2]) / 2.0, s[2]];
                for (b, v) in row.into_iter().enumerate() {
                    u[((a * 4 + b) * rows + r) * cols + c] = v as f32;
                }
            }
        }
    }
    u
}

/// Output tile anchors along an axis of `n` outputs (see the module documentation).
fn anchors(n: usize, d: usize) -> Vec<usize> {
    (0..n).filter(|p| p % (2 * d) < d).collect()
}

/// `V = Bᵀ·x·B` for every tile of every channel of `src` `(ci, sh, sw)`, laid out `[ci][16][tiles]`
/// (a channel's block is contiguous, so the channels transform in parallel; position k's matrix
/// has row stride `16·tiles`). Tile `(p, q)` reads `src[p + d·a − shift, q + d·b − shift]` for
/// `a, b < 4`, zero outside.
///
/// A tile row at a time, as whole lines: its four input lines copied out with zeros past the
/// edges, `t = Bᵀ·x` on the lines, then each `V[a][b]` for all the row's tiles by one loop over
/// them (the same operations in the same order as tile by tile, so the same values).
fn transform_tiles(
    src: &[f32],
    (ci, sh, sw): (usize, usize, usize),
    (rows, cols): (&[usize], &[usize]),
    d: usize,
    shift: usize,
) -> Scratch {
    let (nr, nc) = (rows.len(), cols.len());
    let tiles = nr * nc;
    let mut v = Scratch::take(ci * 16 * tiles);
    let Some(&last) = cols.last() else { return v };
    let len = last + 3 * d + 1;
    v.par_chunks_mut(16 * tiles).zip(src.par_chunks(sh * sw)).for_each(|(v, plane)| {
        let mut x = vec![0f32; 4 * len];
        let mut t = vec![0f32; 4 * len];
        for (tr, &p) in rows.iter().enumerate() {
            for (a, line) in x.chunks_mut(len).enumerate() {
                let y = (p + d * a).checked_sub(shift).filter(|&y| y < sh);
                extend(y.map(|y| &plane[y * sw..][..sw]), shift, line);
            }
            let [x0, x1, x2, x3] = lines(&x, len);
            let [t0, t1, t2, t3] = lines_mut(&mut t, len);
            for j in 0..len {
                t0[j] = x0[j] - x2[j];
                t1[j] = x1[j] + x2[j];
                t2[j] = x2[j] - x1[j];
                t3[j] = x1[j] - x3[j];
            }
            // V[a][·] = t_a·B: [t0 − t2, t1 + t2, t2 − t1, t1 − t3] at the tile's columns.
            for (a, t) in t.chunks(len).enumerate() {
                let mut out = v.chunks_mut(tiles).skip(4 * a).map(|v| &mut v[tr * nc..][..nc]);
                let mut next = || out.next().expect("16 positions");
                across(next(), t, cols, d, [0, 2], |a, b| a - b);
                across(next(), t, cols, d, [1, 2], |a, b| a + b);
                across(next(), t, cols, d, [2, 1], |a, b| a - b);
                across(next(), t, cols, d, [1, 3], |a, b| a - b);
            }
        }
    });
    v
}

/// `line[j] = src[j − shift]`, zero outside `src` (all zeros without one).
fn extend(src: Option<&[f32]>, shift: usize, line: &mut [f32]) {
    line.fill(0.0);
    if let Some(src) = src {
        let from = shift.min(line.len());
        let n = src.len().min(line.len() - from);
        line[from..from + n].copy_from_slice(&src[..n]);
    }
}

fn lines(x: &[f32], len: usize) -> [&[f32]; 4] {
    std::array::from_fn(|a| &x[a * len..][..len])
}

fn lines_mut(x: &mut [f32], len: usize) -> [&mut [f32]; 4] {
    let (a, rest) = x.split_at_mut(len);
    let (b, rest) = rest.split_at_mut(len);
    let (c, rest) = rest.split_at_mut(len);
    [a, b, c, &mut rest[..len]]
}

/// `out[tc] = f(line[q + d·i], line[q + d·j])` for the tile columns `q = cols[tc]`; with `d = 1`
/// the columns are `0, 2, 4, …`, written as such so that the loop vectorizes.
#[inline(always)]
fn across(out: &mut [f32], line: &[f32], cols: &[usize], d: usize, [i, j]: [usize; 2], f: impl Fn(f32, f32) -> f32) {
    if d == 1 {
        let line = &line[..2 * out.len() + i.max(j) - 1];
        for (tc, o) in out.iter_mut().enumerate() {
            *o = f(line[2 * tc + i], line[2 * tc + j]);
        }
    } else {
        for (o, &q) in out.iter_mut().zip(cols) {
            *o = f(line[q + d * i], line[q + d * j]);
        }
    }
}

/// `dM = A·g·Aᵀ` for every tile of every channel of the output gradient `g` `(co, oh, ow)`, laid
/// out `[tiles][16][co]` (a tile row's block is contiguous, so the tile rows transform in
/// parallel; position k's matrix, tiles by channels, has row stride `16·co`); tile `(p, q)` reads
/// `g[p + d·a, q + d·b]` for `a, b < 2`, zero past the edge (outputs the forward does not write).
///
/// Per tile row, its two gradient rows are first laid out channel-innermost (`[x][co]`, in
/// blocks of [`BLOCK`] × [`BLOCK`]), so that each tile's 16 positions are computed as loops over
/// the channels, reading and writing runs.
fn transform_gradient(
    g: &[f32],
    (co, oh, ow): (usize, usize, usize),
    (rows, cols): (&[usize], &[usize]),
    d: usize,
) -> Scratch {
    assert_eq!(g.len(), co * oh * ow, "one output gradient plane per channel");
    let nc = cols.len();
    let mut dm = Scratch::take(rows.len() * nc * 16 * co);
    dm.par_chunks_mut(nc * 16 * co).zip(rows).for_each(|(dm, &p)| {
        // The rows p and p + d, [a][x][o], zero past the edge.
        let mut nhwc = vec![0f32; 2 * (ow + d) * co];
        for (a, line) in nhwc.chunks_mut((ow + d) * co).enumerate() {
            let y = p + d * a;
            if y >= oh {
                continue;
            }
            for o0 in (0..co).step_by(BLOCK) {
                for x0 in (0..ow).step_by(BLOCK) {
                    let n = BLOCK.min(ow - x0);
                    for o in o0..(o0 + BLOCK).min(co) {
                        let src = &g[(o * oh + y) * ow + x0..][..n];
                        for (x, &v) in src.iter().enumerate() {
                            line[(x0 + x) * co + o] = v;
                        }
                    }
                }
            }
        }
        let (r0, r1) = nhwc.split_at(nhwc.len() / 2);
        let mut t = vec![0f32; 2 * co];
        for (&q, dm) in cols.iter().zip(dm.chunks_mut(16 * co)) {
            let (g00, g01) = (&r0[q * co..][..co], &r0[(q + d) * co..][..co]);
            let (g10, g11) = (&r1[q * co..][..co], &r1[(q + d) * co..][..co]);
            let mut out = dm.chunks_mut(co);
            for a in 0..4 {
                // t_a = row a of A·g (2 columns): [g0, g0 + g1, g0 − g1, −g1].
                let (ta0, ta1) = t.split_at_mut(co);
                for o in 0..co {
                    (ta0[o], ta1[o]) = match a {
                        0 => (g00[o], g01[o]),
                        1 => (g00[o] + g10[o], g01[o] + g11[o]),
                        2 => (g00[o] - g10[o], g01[o] - g11[o]),
                        _ => (-g10[o], -g11[o]),
                    };
                }
                // dM[a][·] = t_a·Aᵀ: [t0, t0 + t1, t0 − t1, −t1].
                let mut next = || out.next().expect("16 positions");
                next().copy_from_slice(ta0);
                for (d, (&x, &y)) in next().iter_mut().zip(ta0.iter().zip(ta1.iter())) {
                    *d = x + y;
                }
                for (d, (&x, &y)) in next().iter_mut().zip(ta0.iter().zip(ta1.iter())) {
                    *d = x - y;
                }
                for (d, &y) in next().iter_mut().zip(ta1.iter()) {
                    *d = -y;
                }
            }
        }
    });
    dm
}

/// Channels and columns per block of [`transform_gradient`]'s transposition.
const BLOCK: usize = 16;

/// One sample: `out[o, p, q] (+ bias[o]) = Σ_i Σ_{a,b < 3} k[o, i, a, b] · src[i, p + d·a − shift,
/// q + d·b − shift]`, `src` `(ci, sh, sw)` read as zero outside, `out` `(co, oh, ow)`, `u` the
/// transformed kernels `[16][co][ci]`.
#[allow(clippy::too_many_arguments)]
fn correlate(
    src: &[f32],
    (ci, sh, sw): (usize, usize, usize),
    u: &[f32],
    co: usize,
    (oh, ow): (usize, usize),
    d: usize,
    shift: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (rows, cols) = (anchors(oh, d), anchors(ow, d));
    let tiles = rows.len() * cols.len();
    let v = transform_tiles(src, (ci, sh, sw), (&rows, &cols), d, shift);
    // M_k = U_k · V_k for the 16 positions, M[k][o][t]: the 16 GEMMs in parallel, each on one
    // thread (5 % faster here than one after the other, each on every thread).
    let mut m = Scratch::take(16 * co * tiles);
    m.par_chunks_mut(co * tiles).enumerate().for_each(|(k, mk)| {
        let lhs = Mat { data: u, offset: k * co * ci, rows: co, cols: ci, rs: ci, cs: 1 };
        let rhs = Mat { data: &v, offset: k * tiles, rows: ci, cols: tiles, rs: 16 * tiles, cs: 1 };
        gemm_into(mk, 0, tiles, 1, false, lhs, rhs, ONE_THREAD);
    });
    // Y = Aᵀ·M·A per tile row (as the input transform, by loops over the row's tiles), through a
    // line long enough for the last tile, of which the part inside the output is kept.
    let (nc, len) = (cols.len(), cols.last().map_or(0, |&q| q + d + 1));
    out.par_chunks_mut(oh * ow).enumerate().for_each(|(o, out)| {
        let bias = bias.map_or(0.0, |b| b[o]);
        let mut r = vec![0f32; 8 * nc];
        let mut line = vec![0f32; len];
        for (tr, &p) in rows.iter().enumerate() {
            let mk = |k: usize| &m[(k * co + o) * tiles + tr * nc..][..nc];
            // r = Aᵀ·M (2 × 4): r[0][b] = M[0][b] + M[1][b] + M[2][b],
            // r[1][b] = M[1][b] − M[2][b] − M[3][b].
            for (b, r) in r.chunks_mut(nc).enumerate() {
                let (a, b) = (b / 4, b % 4);
                let (m0, m1, m2, m3) = (mk(b), mk(4 + b), mk(8 + b), mk(12 + b));
                if a == 0 {
                    for t in 0..nc {
                        r[t] = m0[t] + m1[t] + m2[t];
                    }
                } else {
                    for t in 0..nc {
                        r[t] = m1[t] - m2[t] - m3[t];
                    }
                }
            }
            // Y[a] = r[a]·A: [r0 + r1 + r2, r1 − r2 − r3] at columns q and q + d.
            for (a, r) in r.chunks(4 * nc).enumerate() {
                let y = p + d * a;
                if y >= oh {
                    continue;
                }
                let [r0, r1, r2, r3] = lines(r, nc);
                if d == 1 {
                    for (t, pair) in line.chunks_exact_mut(2).take(nc).enumerate() {
                        pair[0] = r0[t] + r1[t] + r2[t] + bias;
                        pair[1] = r1[t] - r2[t] - r3[t] + bias;
                    }
                } else {
                    for (t, &q) in cols.iter().enumerate() {
                        line[q] = r0[t] + r1[t] + r2[t] + bias;
                        line[q + d] = r1[t] - r2[t] - r3[t] + bias;
                    }
                }
                out[y * ow..][..ow].copy_from_slice(&line[..ow]);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taps::tests::{Passes, check_passes};

    const PASSES: Passes = Passes { forward, data_gradient, weight_gradient };

    #[test]
    fn the_three_passes_match_float64_loops() {
        // Odd and even sizes (partial tiles at both edges), dilations 1 to 3 (sub-grids of
        // unequal length), channels past gemm's blocking, batch 2, a single output row.
        for s in [
            Taps { b: 2, cin: 70, cout: 33, k: 3, d: 1, hp: 9, wp: 14 },
            Taps { b: 1, cin: 5, cout: 80, k: 3, d: 2, hp: 12, wp: 11 },
            Taps { b: 1, cin: 6, cout: 4, k: 3, d: 3, hp: 17, wp: 20 },
            Taps { b: 1, cin: 3, cout: 2, k: 3, d: 1, hp: 3, wp: 7 },
        ] {
            // Each pass takes scratch buffers full of NaN: a transform or product that leaves
            // any element unwritten fails the comparison.
            check_passes(&s, s.b * 16 * s.cin.max(s.cout) * s.hp * s.wp, &PASSES);
        }
    }

    #[test]
    fn anchors_cover_every_output_once() {
        for d in 1..5 {
            for n in 1..30 {
                let mut seen = vec![0; n];
                for p in anchors(n, d) {
                    seen[p] += 1;
                    if p + d < n {
                        seen[p + d] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "n {n}, d {d}: {seen:?}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "input of")]
    fn a_short_input_is_refused_before_any_gemm() {
        let s = Taps { b: 1, cin: 2, cout: 2, k: 3, d: 1, hp: 4, wp: 4 };
        forward(&[0.0; 31], &[0.0; 36], &[0.0; 2], &s);
    }
}
