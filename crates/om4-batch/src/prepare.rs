//! Normalization and land masking of planes, once per unique plane.
//!
//! Samudra's default, `normalize_before_mask`: `x → nan_to_num((x − mean)/std, nan = 0)`, then
//! `where(mask, x, fill)`. The other order masks first, then normalizes. `nan_to_num` also maps
//! `±inf` to `±f32::MAX`, as torch does.

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

/// One value through normalization and masking, in the given order. Every path (host, reference,
/// device tests) is checked against this.
#[inline]
pub fn prepare_value(x: f32, mean: f32, std: f32, wet: bool, order: NormOrder, fill: f32) -> f32 {
    match order {
        NormOrder::NormalizeThenMask => {
            if wet {
                nan_to_num((x - mean) / std)
            } else {
                fill
            }
        }
        NormOrder::MaskThenNormalize => nan_to_num((if wet { x } else { fill } - mean) / std),
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

/// Statistics, mask and order for the channels of one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    mean: Vec<f32>,
    std: Vec<f32>,
    mask: LandMask,
    order: NormOrder,
    fill: f32,
}

impl Normalization {
    /// Builds a preparation; `fill` is Samudra's `masked_fill_value` (0 by default).
    ///
    /// # Errors
    /// [`Error::BufferLength`] when means, stds and mask disagree on the channel count.
    pub fn new(mean: Vec<f32>, std: Vec<f32>, mask: LandMask, order: NormOrder, fill: f32) -> Result<Self> {
        for (what, n) in [("stds", std.len()), ("land mask channels", mask.channels())] {
            if n != mean.len() {
                return Err(Error::BufferLength { what: what.into(), expected: mean.len(), found: n });
            }
        }
        Ok(Self { mean, std, mask, order, fill })
    }
    /// Channels.
    pub fn channels(&self) -> usize {
        self.mean.len()
    }
    /// Per-channel means.
    pub fn mean(&self) -> &[f32] {
        &self.mean
    }
    /// Per-channel standard deviations.
    pub fn std(&self) -> &[f32] {
        &self.std
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
        let (mean, std, fill) = (self.mean[channel], self.std[channel], self.fill);
        let normalize = |x: f32| {
            let y = (x - mean) / std;
            if y.is_nan() { 0.0 } else { y.clamp(f32::MIN, f32::MAX) }
        };
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
        assert_eq!(prepare_value(10.0, m, s, true, NormOrder::NormalizeThenMask, 0.0), 2.0);
        assert_eq!(prepare_value(10.0, m, s, true, NormOrder::MaskThenNormalize, 0.0), 2.0);
        assert_eq!(prepare_value(f32::NAN, m, s, false, NormOrder::NormalizeThenMask, 0.0), 0.0);
        assert_eq!(prepare_value(f32::NAN, m, s, false, NormOrder::MaskThenNormalize, 0.0), -0.5);
        assert_eq!(prepare_value(f32::NAN, m, s, true, NormOrder::NormalizeThenMask, 0.0), 0.0);
        assert_eq!(prepare_value(1.0, 0.0, 0.0, true, NormOrder::NormalizeThenMask, 0.0), f32::MAX);
    }

    #[test]
    fn label_mask_repeats_channels() {
        let m = LandMask::new(2, 2, vec![true, false, false, true]).unwrap();
        assert_eq!(m.repeat(2).as_slice(), &[true, false, false, true, true, false, false, true]);
        assert!(LandMask::new(2, 2, vec![true]).is_err());
    }
}
