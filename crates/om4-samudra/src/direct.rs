//! Samudra's k×k convolutions with few channels (stride 1, unpadded, dilation d) on the CPU as a
//! direct correlation in SIMD registers: the forward, and the data gradient as the same
//! correlation of the zero-padded output gradient with the flipped, transposed weight.
//!
//! Where a layer has few channels, a GEMM's sums are short (`C_in·k²`) and an im2col copy
//! ([`crate::tiles`]) writes and reads k² times the input for as many multiply-adds per value;
//! here every tap reads the source in place. The correlation is taken at the source's width
//! ("wide", as [`crate::taps`] does): position `j` of the flattened output plane reads
//! `src[c][j + o_t]` for tap `t` at offset `o_t = ky·d·W_src + kx·d`, so a block of consecutive
//! positions is one contiguous run of each source plane per tap, whatever rows it crosses; the
//! columns past the output's width are computed and dropped. A block is `NV` vectors of
//! positions for `CB` output channels, its `CB·NV` sums held in registers over every source
//! channel and tap (`dst[co][j] = Σ_c Σ_t w[co][c][t] · src[c][j + o_t]`, each sum in that order,
//! one fused multiply-add per term). The last block of a run, and of the channels, starts early
//! so as to end at the run's end: positions and channels it computes twice get the same sums
//! in the same order, so the same bits. For the data gradient the blocks skip taps that read only
//! the padding's zero rows (on the coarse, 8-dilated grids most of them).
//!
//! Vectors are [`pulp`]'s (AVX-512 or AVX2 with FMA, detected at run time, else scalars, every
//! width the same sums bit for bit): safe code, no `unsafe` here. Samples and runs of output rows
//! run in parallel on rayon's pool; each result depends on the shapes alone, not on the threads.

use std::ops::Range;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::scratch::Scratch;
use crate::taps::Taps;

/// Source positions per task: a task takes this many over the source's width of output rows
/// (at least one row).
const RUN: usize = 512;

/// Whether the forward of `s` runs here rather than in tiles (where Winograd does not take it):
/// at most 160 channels on either side (a block's source rows stay in a core's first caches) and
/// 512+ output positions (on fewer, the columns past the output's width are most of the work).
/// docs/benchmarks.md has the measurements.
pub(crate) fn pays(s: &Taps) -> bool {
    let (h, w) = s.out();
    s.cin.max(s.cout) <= 160 && h * w >= 512
}

/// Whether the data gradient of `s` runs here (where [`crate::scatter`] does not take it): at
/// most 160 channels on either side, and a padded input at most 5× the output (the zeros of the
/// padding are multiplied too).
pub(crate) fn pays_data_gradient(s: &Taps) -> bool {
    let (h, w) = s.out();
    s.cin.max(s.cout) <= 160 && s.hp * s.wp <= 5 * h * w
}

/// `y[b, co] = bias[co] + Σ_{ci, tap} w[co, ci, tap] · x[b, ci, window of tap]`, `(b, cout, h, w)`.
pub(crate) fn forward(x: &[f32], weight: &[f32], bias: &[f32], s: &Taps) -> Vec<f32> {
    s.check(Some(x), Some(weight), None);
    assert_eq!(bias.len(), s.cout, "one bias per output channel");
    correlate(x, 0..s.hp, weight, s, s.out(), Some(bias))
}

/// `dx[b, ci, window of tap] += Σ_co w[co, ci, tap] · g[b, co]` over the taps, `(b, cin, hp, wp)`:
/// the correlation of the gradient padded by the kernel's span on every side with the weight
/// as `(cin, cout, k, k)`, each kernel turned by 180°.
pub(crate) fn data_gradient(grad: &[f32], weight: &[f32], s: &Taps) -> Vec<f32> {
    s.check(None, Some(weight), Some(grad));
    let (h, w) = s.out();
    let span = s.hp - h;
    let (ph, pw) = (h + 2 * span, w + 2 * span);
    // A reused buffer: every value written, the gradient's and the padding's zeros.
    let mut padded = Scratch::take(s.b * s.cout * ph * pw);
    padded.par_chunks_mut(ph * pw).zip(grad.par_chunks(h * w)).for_each(|(p, g)| {
        let (above, rest) = p.split_at_mut(span * pw);
        let (rows, below) = rest.split_at_mut(h * pw);
        above.fill(0.0);
        below.fill(0.0);
        for (dst, src) in rows.chunks_mut(pw).zip(g.chunks(w)) {
            dst[..span].fill(0.0);
            dst[span..span + w].copy_from_slice(src);
            dst[span + w..].fill(0.0);
        }
    });
    // The correlation's shapes: the padded gradient its source, the input its output.
    let turned = Taps { b: s.b, cin: s.cout, cout: s.cin, k: s.k, d: s.d, hp: ph, wp: pw };
    correlate(&padded, span..span + h, &s.by_input(weight, true), &turned, (s.hp, s.wp), None)
}

/// `out[b, co, r, c] = bias[co] + Σ_{ci, t} w[co, ci, t] · src[b, ci, r + ky_t·d, c + kx_t·d]`
/// for `(r, c)` in `out`'s `(h, w)`, with `s` the shapes of this correlation (`src` as
/// `(s.b, s.cin, s.hp, s.wp)`, zero outside rows `live`; `w` as `(s.cout, s.cin, k, k)`).
fn correlate(
    src: &[f32],
    live: Range<usize>,
    weight: &[f32],
    s: &Taps,
    (h, w): (usize, usize),
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let (plane, width) = (s.hp * s.wp, s.wp);
    let offsets: Vec<usize> = (0..s.kk()).map(|t| s.start(t)).collect();
    // Output row r's positions are r·W_src .. r·W_src + w; the last tap of the last position
    // reads the plane's last value.
    assert_eq!((h - 1) * width + w + offsets[s.kk() - 1], plane, "a window inside the source: {s:?}");
    // One task per sample and run of whole output rows, each with its rows of every output plane.
    let rows = (RUN / width).clamp(1, h);
    let runs = h.div_ceil(rows);
    let mut out = vec![0f32; s.b * s.cout * h * w];
    let mut tasks: Vec<Vec<&mut [f32]>> = (0..s.b * runs).map(|_| Vec::with_capacity(s.cout)).collect();
    for (i, out) in out.chunks_mut(h * w).enumerate() {
        for (r, rows) in out.chunks_mut(rows * w).enumerate() {
            tasks[i / s.cout * runs + r].push(rows);
        }
    }
    tasks.into_par_iter().enumerate().for_each(|(i, mut outs)| {
        let (b, r0) = (i / runs, i % runs * rows);
        let r1 = (r0 + rows).min(h);
        let (j0, j1) = (r0 * width, (r1 - 1) * width + w);
        let planes = &src[b * s.cin * plane..][..s.cin * plane];
        let task = Task { planes, plane, channels: s.cin, weight, cout: s.cout, offsets: &offsets, j0, j1 };
        let live = Rows { width, live: live.clone() };
        let len = j1 - j0;
        let mut wide = Scratch::take(s.cout * len);
        widest(Run { task, rows: live, out: &mut wide });
        for (co, out) in outs.iter_mut().enumerate() {
            let add = bias.map_or(0.0, |bias| bias[co]);
            for (r, row) in out.chunks_mut(w).enumerate() {
                for (o, v) in row.iter_mut().zip(&wide[co * len + r * width..][..w]) {
                    *o = v + add;
                }
            }
        }
    });
    out
}

/// `op` at the widest vectors this CPU has. (pulp's own `Arch` picks AVX2 only with its `x86-v3`
/// feature, which `gemm` does not turn on: turning it on would build `gemm`, and flex with it, again.)
fn widest<Op: WithSimd>(op: Op) -> Op::Output {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V4::try_new() {
            return Simd::vectorize(simd, op);
        }
        if let Some(simd) = pulp::x86::V3::try_new() {
            return Simd::vectorize(simd, op);
        }
    }
    pulp::Arch::new().dispatch(op)
}

/// One task's correlation: positions `j0 .. j1` of every output channel of one sample.
struct Task<'a> {
    planes: &'a [f32],
    plane: usize,
    channels: usize,
    weight: &'a [f32],
    cout: usize,
    offsets: &'a [usize],
    j0: usize,
    j1: usize,
}

/// Which source rows hold values (the rest are zeros a block may skip).
struct Rows {
    width: usize,
    live: Range<usize>,
}

struct Run<'a> {
    task: Task<'a>,
    rows: Rows,
    /// `(cout, j1 − j0)`.
    out: &'a mut [f32],
}

impl WithSimd for Run<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        // AVX-512's 32 registers hold 4 × 4 sums and the operands; AVX2's 16, 4 × 2.
        if S::F32_LANES >= 16 { self.blocks::<S, 8, 3>(simd) } else { self.blocks::<S, 4, 2>(simd) }
    }
}

impl Run<'_> {
    #[inline(always)]
    fn blocks<S: Simd, const CB: usize, const NV: usize>(self, simd: S) {
        let Run { task, rows, out } = self;
        let len = task.j1 - task.j0;
        let positions = NV * S::F32_LANES;
        let kk = task.offsets.len();
        let mut live = Vec::with_capacity(kk);
        if len < positions || task.cout < CB {
            scalar(&task, out);
            return;
        }
        for p in (0..len).step_by(positions) {
            let p = p.min(len - positions);
            let j = task.j0 + p;
            // The taps whose source rows for these positions are not all padding.
            live.clear();
            live.extend(task.offsets.iter().map(|o| j + o).enumerate().filter(|&(_, at)| {
                let (first, last) = (at / rows.width, (at + positions - 1) / rows.width);
                first < rows.live.end && last >= rows.live.start
            }));
            for c in (0..task.cout).step_by(CB) {
                let c = c.min(task.cout - CB);
                let sums = block::<S, CB, NV>(simd, &task, &live, c);
                for (k, sums) in sums.iter().enumerate() {
                    S::as_mut_simd_f32s(&mut out[(c + k) * len + p..][..positions]).0.copy_from_slice(sums);
                }
            }
        }
    }
}

/// The sums of output channels `c .. c + CB` at `NV` vectors of positions over the taps `live`,
/// each as (tap, where its source values for the first position start in a plane).
#[inline(always)]
fn block<S: Simd, const CB: usize, const NV: usize>(
    simd: S,
    task: &Task<'_>,
    live: &[(usize, usize)],
    c: usize,
) -> [[S::f32s; NV]; CB] {
    let kk = task.offsets.len();
    let per_out = task.channels * kk;
    let w: [&[f32]; CB] = std::array::from_fn(|k| &task.weight[(c + k) * per_out..][..per_out]);
    let mut acc = [[simd.splat_f32s(0.0); NV]; CB];
    for ci in 0..task.channels {
        let plane = &task.planes[ci * task.plane..][..task.plane];
        let w: [&[f32]; CB] = std::array::from_fn(|k| &w[k][ci * kk..][..kk]);
        for &(t, at) in live {
            let (xs, _) = S::as_simd_f32s(&plane[at..][..NV * S::F32_LANES]);
            for (acc, w) in acc.iter_mut().zip(&w) {
                let wv = simd.splat_f32s(w[t]);
                for (a, x) in acc.iter_mut().zip(xs) {
                    *a = simd.mul_add_f32s(wv, *x, *a);
                }
            }
        }
    }
    acc
}

/// The same sums one position at a time, in the same order (runs shorter than a block, or
/// fewer output channels than [`CB`]).
fn scalar(task: &Task<'_>, out: &mut [f32]) {
    let len = task.j1 - task.j0;
    let kk = task.offsets.len();
    for co in 0..task.cout {
        let w = &task.weight[co * task.channels * kk..][..task.channels * kk];
        for (p, o) in out[co * len..][..len].iter_mut().enumerate() {
            let j = task.j0 + p;
            let mut sum = 0f32;
            for ci in 0..task.channels {
                let plane = &task.planes[ci * task.plane..][..task.plane];
                for t in 0..kk {
                    sum = w[ci * kk + t].mul_add(plane[j + task.offsets[t]], sum);
                }
            }
            *o = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taps::tests::{Passes, check_passes};

    const PASSES: Passes = Passes { forward, data_gradient, weight_gradient: crate::tiles::weight_gradient };

    #[test]
    fn forward_and_data_gradient_match_float64_loops() {
        // Many runs per sample, a run shorter than a block (the scalar path), output channels not a
        // multiple of the block, fewer channels than a block, dilation 8 on a grid smaller than
        // the kernel's span (taps skipped), a 5×5 kernel, batch 3.
        for s in [
            Taps { b: 2, cin: 16, cout: 24, k: 3, d: 2, hp: 40, wp: 182 },
            Taps { b: 1, cin: 3, cout: 2, k: 3, d: 1, hp: 3, wp: 7 },
            Taps { b: 1, cin: 5, cout: 7, k: 3, d: 3, hp: 21, wp: 23 },
            Taps { b: 2, cin: 12, cout: 10, k: 3, d: 8, hp: 27, wp: 38 },
            Taps { b: 3, cin: 4, cout: 6, k: 5, d: 2, hp: 21, wp: 19 },
            Taps { b: 1, cin: 16, cout: 154, k: 3, d: 1, hp: 22, wp: 42 },
        ] {
            check_passes(&s, s.cin.max(s.cout) * s.kk() * s.hp * s.wp, &PASSES);
        }
    }

    /// Every vector width's blocks (skipped padding taps, overlapping last blocks and channels
    /// included) equal the scalar loop, which sums in the same order: the same values.
    #[test]
    fn every_width_equals_the_scalar_sums() {
        let (channels, cout, k, d, width, height) = (5, 7, 3, 2, 37, 30);
        let plane = width * height;
        // Values everywhere but in the padding rows (the first and last 4), which are zeros.
        let mut planes = crate::taps::tests::values(channels * plane, 1.0);
        for (i, v) in planes.iter_mut().enumerate() {
            if !(4..height - 4).contains(&(i % plane / width)) {
                *v = 0.0;
            }
        }
        let weight = crate::taps::tests::values(cout * channels * k * k, 2.0);
        let offsets: Vec<usize> = (0..k * k).map(|t| (t / k * width + t % k) * d).collect();
        let n = plane - offsets[k * k - 1];
        let task =
            || Task { planes: &planes, plane, channels, weight: &weight, cout, offsets: &offsets, j0: 3, j1: n - 5 };
        let rows = || Rows { width, live: 4..height - 4 };
        let len = n - 8;
        let mut want = vec![0f32; cout * len];
        scalar(&task(), &mut want);
        let mut got = vec![f32::NAN; cout * len];
        Simd::vectorize(pulp::Scalar::new(), Run { task: task(), rows: rows(), out: &mut got });
        assert_eq!(got, want, "scalars");
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V3::try_new() {
                let mut got = vec![f32::NAN; cout * len];
                Simd::vectorize(simd, Run { task: task(), rows: rows(), out: &mut got });
                assert_eq!(got, want, "AVX2");
            }
            if let Some(simd) = pulp::x86::V4::try_new() {
                let mut got = vec![f32::NAN; cout * len];
                Simd::vectorize(simd, Run { task: task(), rows: rows(), out: &mut got });
                assert_eq!(got, want, "AVX-512");
            }
        }
    }
}

/// The per-method table of docs/benchmarks.md, run by hand (a measurement, not a check):
/// `cargo test --release -p om4-samudra --lib conv_methods_table -- --ignored --nocapture`.
#[cfg(test)]
mod timing {
    use super::*;

    /// Median milliseconds of 21 calls after one, on Samudra's small k×k shapes (tiny's, at 2°
    /// unless the row says 1°): forward in tiles, direct; data gradient in tiles, per tap, direct, scattered.
    #[test]
    #[ignore]
    fn conv_methods_table() {
        let shapes: Vec<(usize, usize, usize, usize, usize, usize)> = vec![
            (1, 16, 32, 2, 45, 90),
            (1, 32, 32, 2, 45, 90),
            (1, 24, 48, 4, 22, 45),
            (1, 48, 48, 4, 22, 45),
            (1, 32, 64, 8, 11, 22),
            (1, 64, 64, 8, 11, 22),
            (1, 48, 96, 8, 5, 11),
            (1, 96, 96, 8, 5, 11),
            (1, 48, 96, 8, 11, 22),
            (1, 96, 96, 8, 11, 22),
            (1, 32, 64, 4, 22, 45),
            (1, 64, 64, 4, 22, 45),
            (1, 24, 48, 2, 45, 90),
            (1, 48, 48, 2, 45, 90),
            (1, 16, 32, 2, 90, 180),
            (1, 32, 32, 2, 90, 180),
            (1, 16, 154, 1, 90, 180),
            (1, 32, 32, 2, 180, 360),
            (4, 48, 48, 4, 22, 45),
            (1, 1040, 1040, 8, 5, 11),
            (1, 1040, 1040, 8, 11, 22),
            (1, 960, 960, 4, 22, 45),
        ];
        let med = |f: &mut dyn FnMut()| {
            f();
            let mut t: Vec<f64> = (0..21)
                .map(|_| {
                    let start = std::time::Instant::now();
                    f();
                    start.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            t.sort_by(f64::total_cmp);
            t[10]
        };
        println!("| shape | forward: tiles | direct | data gradient: tiles | per tap | direct | scatter |");
        println!("|---|---|---|---|---|---|---|");
        for (b, cin, cout, d, h, w) in shapes {
            let s = Taps { b, cin, cout, k: 3, d, hp: h + 2 * d, wp: w + 2 * d };
            let x = crate::taps::tests::values(b * cin * s.hp * s.wp, 0.0);
            let wt = crate::taps::tests::values(cout * cin * 9, 1.0);
            let g = crate::taps::tests::values(b * cout * h * w, 2.0);
            let bias = vec![0f32; cout];
            let tf = med(&mut || {
                std::hint::black_box(crate::tiles::forward(&x, &wt, &bias, &s));
            });
            let df = med(&mut || {
                std::hint::black_box(forward(&x, &wt, &bias, &s));
            });
            let tg = med(&mut || {
                std::hint::black_box(crate::tiles::data_gradient(&g, &wt, &s));
            });
            let pg = med(&mut || {
                std::hint::black_box(crate::taps::data_gradient(&g, &wt, &s));
            });
            let dg = med(&mut || {
                std::hint::black_box(data_gradient(&g, &wt, &s));
            });
            let sg = med(&mut || {
                std::hint::black_box(crate::scatter::data_gradient(&g, &wt, &s));
            });
            println!("| b{b} {cin}→{cout} d{d} {h}×{w} | {tf:.3} | {df:.3} | {tg:.3} | {pg:.3} | {dg:.3} | {sg:.3} |");
        }
    }
}
