//! Normalization and land masking of planes, once per unique plane.
//!
//! Samudra's default, `normalize_before_mask`: `x → nan_to_num((x − mean)/std, nan = 0)`, then
//! `where(mask, x, fill)`. The other order masks first, then normalizes. The arithmetic is in the
//! statistics' precision ([`Precision`]), as torch promotes it; `nan_to_num` maps NaN to 0 and, in
//! float32, `±inf` to `±f32::MAX`, as torch does.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Spatial size of every plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grid {
    /// Rows (latitude, `y`).
    pub y: usize,
    /// Columns (longitude, `x`).
    pub x: usize,
}

impl Grid {
    /// Values per plane.
    pub fn plane(&self) -> usize {
        self.y * self.x
    }
}

/// The order of normalization and masking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormOrder {
    /// Normalize, replace NaN by 0, then mask (Samudra's default).
    #[default]
    NormalizeThenMask,
    /// Mask, then normalize and replace NaN by 0.
    MaskThenNormalize,
}

/// `torch.nan_to_num(x, nan=0)`.
#[inline]
pub fn nan_to_num(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else if x == f32::INFINITY {
        f32::MAX
    } else if x == f32::NEG_INFINITY {
        f32::MIN
    } else {
        x
    }
}

/// The precision normalization is computed in: that of the statistics, as torch promotes the
/// float32 data to the statistics' dtype in Samudra's `(x - mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// float32 statistics: float32 arithmetic; `nan_to_num` maps NaN to 0 and ±inf to ±f32::MAX.
    #[default]
    F32,
    /// float64 statistics: float64 arithmetic rounded to float32 at the end; `nan_to_num` maps
    /// NaN to 0 and ±inf to ±f64::MAX, which round to ±inf.
    F64,
}

/// One value through normalization and masking, in the given order and precision. Every path
/// (host, reference, device tests) is checked against this.
#[inline]
pub fn prepare_value(x: f32, mean: f64, std: f64, wet: bool, order: NormOrder, fill: f32, precision: Precision) -> f32 {
    let normalize = |v: f32| match precision {
        Precision::F32 => nan_to_num((v - mean as f32) / std as f32),
        Precision::F64 => {
            let y = (f64::from(v) - mean) / std;
            if y.is_nan() { 0.0 } else { y as f32 }
        }
    };
    match order {
        NormOrder::NormalizeThenMask => {
            if wet {
                normalize(x)
            } else {
                fill
            }
        }
        NormOrder::MaskThenNormalize => normalize(if wet { x } else { fill }),
    }
}

/// Wet (ocean) cells per channel, `(channels, y, x)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandMask {
    channels: usize,
    plane: usize,
    wet: Vec<bool>,
}

impl LandMask {
    /// A mask from `channels × plane` wet flags.
    ///
    /// # Errors
    /// [`Error::BufferLength`] when `wet` does not hold `channels × plane` values.
    pub fn new(channels: usize, plane: usize, wet: Vec<bool>) -> Result<Self> {
        if wet.len() != channels * plane {
            return Err(Error::BufferLength { what: "land mask".into(), expected: channels * plane, found: wet.len() });
        }
        Ok(Self { channels, plane, wet })
    }
    /// Every cell wet.
    pub fn all_wet(channels: usize, plane: usize) -> Self {
        Self { channels, plane, wet: vec![true; channels * plane] }
    }
    /// Channels.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// Wet flags of one channel.
    pub fn channel(&self, c: usize) -> &[bool] {
        &self.wet[c * self.plane..(c + 1) * self.plane]
    }
    /// All flags, `(channels, y, x)`.
    pub fn as_slice(&self) -> &[bool] {
        &self.wet
    }
    /// Values per plane.
    pub fn plane(&self) -> usize {
        self.plane
    }
    /// The mask repeated `times` times along channels: Samudra's `label_mask` for `times = h + 1`.
    pub fn repeat(&self, times: usize) -> Self {
        Self { channels: self.channels * times, plane: self.plane, wet: self.wet.repeat(times) }
    }
}

/// How one variable set is normalized: statistics (and the precision they are applied in), land
/// mask, order and fill value.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    mean: Vec<f64>,
    std: Vec<f64>,
    precision: Precision,
    mask: LandMask,
    order: NormOrder,
    fill: f32,
}

impl Normalization {
    /// Normalization with float32 statistics (float32 arithmetic); `fill` is Samudra's
    /// `masked_fill_value` (0 by default).
    ///
    /// # Errors
    /// [`Error::BufferLength`] when means, stds and mask disagree on the channel count.
    pub fn new(mean: Vec<f32>, std: Vec<f32>, mask: LandMask, order: NormOrder, fill: f32) -> Result<Self> {
        let wide = |v: Vec<f32>| v.into_iter().map(f64::from).collect();
        Self::with_precision(wide(mean), wide(std), Precision::F32, mask, order, fill)
    }

    /// Normalization with statistics of the given precision (Samudra computes in the dtype of
    /// its statistics stores: float64 ones give float64 arithmetic). With [`Precision::F32`] the
    /// statistics are rounded to float32 first.
    ///
    /// # Errors
    /// [`Error::BufferLength`] when means, stds and mask disagree on the channel count.
    pub fn with_precision(
        mean: Vec<f64>,
        std: Vec<f64>,
        precision: Precision,
        mask: LandMask,
        order: NormOrder,
        fill: f32,
    ) -> Result<Self> {
        for (what, n) in [("stds", std.len()), ("land mask channels", mask.channels())] {
            if n != mean.len() {
                return Err(Error::BufferLength { what: what.into(), expected: mean.len(), found: n });
            }
        }
        let round = |v: Vec<f64>| match precision {
            Precision::F32 => v.into_iter().map(|x| f64::from(x as f32)).collect(),
            Precision::F64 => v,
        };
        Ok(Self { mean: round(mean), std: round(std), precision, mask, order, fill })
    }
    /// Channels.
    pub fn channels(&self) -> usize {
        self.mean.len()
    }
    /// Per-channel means (float32 values when the precision is [`Precision::F32`]).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }
    /// Per-channel standard deviations.
    pub fn std(&self) -> &[f64] {
        &self.std
    }
    /// The arithmetic precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }
    /// The land mask.
    pub fn mask(&self) -> &LandMask {
        &self.mask
    }
    /// The order.
    pub fn order(&self) -> NormOrder {
        self.order
    }
    /// Value of masked cells.
    pub fn fill(&self) -> f32 {
        self.fill
    }

    /// Prepares one plane of `channel` in place.
    ///
    /// The loops restate [`prepare_value`] without branches (NaN → 0 by a select, ±inf → ±MAX by a
    /// clamp) so that they vectorize; the property tests hold them to `prepare_value` bit for bit.
    pub fn prepare_plane(&self, channel: usize, plane: &mut [f32]) {
        match self.precision {
            Precision::F32 => {
                let (mean, std) = (self.mean[channel] as f32, self.std[channel] as f32);
                self.prepare_plane_with(channel, plane, |x: f32| {
                    let y = (x - mean) / std;
                    if y.is_nan() { 0.0 } else { y.clamp(f32::MIN, f32::MAX) }
                });
            }
            Precision::F64 => {
                let (mean, std) = (self.mean[channel], self.std[channel]);
                self.prepare_plane_with(channel, plane, |x: f32| {
                    let y = (f64::from(x) - mean) / std;
                    if y.is_nan() { 0.0 } else { y as f32 }
                });
            }
        }
    }

    fn prepare_plane_with(&self, channel: usize, plane: &mut [f32], normalize: impl Fn(f32) -> f32) {
        let fill = self.fill;
        let mask = self.mask.channel(channel);
        match self.order {
            NormOrder::NormalizeThenMask => {
                for (x, &wet) in plane.iter_mut().zip(mask) {
                    let y = normalize(*x);
                    *x = if wet { y } else { fill };
                }
            }
            NormOrder::MaskThenNormalize => {
                for (x, &wet) in plane.iter_mut().zip(mask) {
                    *x = normalize(if wet { *x } else { fill });
                }
            }
        }
    }

    /// Prepares a `(times, channels, y, x)` group buffer in place, each plane once, in parallel on
    /// the current rayon pool.
    ///
    /// # Errors
    /// [`Error::BufferLength`] when `buf` is not a whole number of `channels × plane` blocks.
    pub fn prepare_group(&self, buf: &mut [f32]) -> Result<()> {
        let block = self.channels() * self.mask.plane;
        if block == 0 || !buf.len().is_multiple_of(block) {
            return Err(Error::BufferLength {
                what: "group buffer".into(),
                expected: buf.len().div_ceil(block.max(1)) * block,
                found: buf.len(),
            });
        }
        let channels = self.channels();
        buf.par_chunks_exact_mut(self.mask.plane)
            .enumerate()
            .for_each(|(i, plane)| self.prepare_plane(i % channels, plane));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_differ_on_land_only() {
        let (m, s) = (2.0, 4.0);
        for p in [Precision::F32, Precision::F64] {
            assert_eq!(prepare_value(10.0, m, s, true, NormOrder::NormalizeThenMask, 0.0, p), 2.0);
            assert_eq!(prepare_value(10.0, m, s, true, NormOrder::MaskThenNormalize, 0.0, p), 2.0);
            assert_eq!(prepare_value(f32::NAN, m, s, false, NormOrder::NormalizeThenMask, 0.0, p), 0.0);
            assert_eq!(prepare_value(f32::NAN, m, s, false, NormOrder::MaskThenNormalize, 0.0, p), -0.5);
            assert_eq!(prepare_value(f32::NAN, m, s, true, NormOrder::NormalizeThenMask, 0.0, p), 0.0);
            // NaN becomes 0 even with another fill value; land becomes the fill, or (fill - mean) / std.
            assert_eq!(prepare_value(f32::NAN, m, s, true, NormOrder::NormalizeThenMask, -3.5, p), 0.0);
            assert_eq!(prepare_value(1.0, m, s, false, NormOrder::MaskThenNormalize, -3.5, p), -1.375);
        }
        // Division by a zero std: ±f32::MAX in float32, ±inf through float64.
        assert_eq!(prepare_value(1.0, 0.0, 0.0, true, NormOrder::NormalizeThenMask, 0.0, Precision::F32), f32::MAX);
        assert_eq!(
            prepare_value(1.0, 0.0, 0.0, true, NormOrder::NormalizeThenMask, 0.0, Precision::F64),
            f32::INFINITY
        );
    }

    #[test]
    fn float64_statistics_round_once() {
        // (x - m) / s in float64 rounded once differs from float32 arithmetic for some values.
        let (m, s) = (0.1f64, 3.0f64);
        let differs = (0..1000).map(|i| i as f32 * 0.013).any(|x| {
            let wide = prepare_value(x, m, s, true, NormOrder::NormalizeThenMask, 0.0, Precision::F64);
            let narrow = prepare_value(x, m, s, true, NormOrder::NormalizeThenMask, 0.0, Precision::F32);
            wide.to_bits() != narrow.to_bits()
        });
        assert!(differs);
        let x = 0.7f32;
        let want = ((f64::from(x) - m) / s) as f32;
        assert_eq!(prepare_value(x, m, s, true, NormOrder::NormalizeThenMask, 0.0, Precision::F64), want);
    }

    #[test]
    fn label_mask_repeats_channels() {
        let m = LandMask::new(2, 2, vec![true, false, false, true]).unwrap();
        assert_eq!(m.repeat(2).as_slice(), &[true, false, false, true, true, false, false, true]);
        assert!(LandMask::new(2, 2, vec![true]).is_err());
    }
}
