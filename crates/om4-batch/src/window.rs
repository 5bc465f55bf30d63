//! Samudra's sampling windows: history, rollout steps and stride.
//!
//! For sample `i` and rollout step `k`, the input states sit at time positions
//! `i + k(h+1)s + j·s` for `j = 0..=h`, the labels at the next `h+1` positions (offset by `(h+1)s`),
//! and boundary forcing at the input positions. So step `k+1`'s input is step `k`'s label.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Window settings as written in a configuration file (Samudra's `hist`, `steps`, `data_stride`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Past states given to the model besides the current one (`hist`).
    #[serde(default = "default_history", alias = "hist")]
    pub history: usize,
    /// Autoregressive rollout steps per sample.
    #[serde(default = "default_steps")]
    pub steps: usize,
    /// Time positions between consecutive states (`data_stride`).
    #[serde(default = "default_stride", alias = "data_stride")]
    pub stride: usize,
}

fn default_history() -> usize {
    1
}
fn default_steps() -> usize {
    4
}
fn default_stride() -> usize {
    1
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self { history: default_history(), steps: default_steps(), stride: default_stride() }
    }
}

impl WindowConfig {
    /// Checks the values and returns the typed spec.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `steps` or `stride` is zero.
    pub fn validate(&self) -> Result<WindowSpec> {
        WindowSpec::new(self.history, self.steps, self.stride)
    }
}

/// A validated window: `history ≥ 0`, `steps ≥ 1`, `stride ≥ 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowSpec {
    history: usize,
    steps: NonZeroUsize,
    stride: NonZeroUsize,
}

impl WindowSpec {
    /// Builds a spec.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `steps` or `stride` is zero, or when one sample would span
    /// more time positions than a `usize` counts (no store holds such a window).
    pub fn new(history: usize, steps: usize, stride: usize) -> Result<Self> {
        let steps_nz = NonZeroUsize::new(steps)
            .ok_or_else(|| Error::InvalidConfig { field: "steps", reason: "must be at least 1".into() })?;
        let stride_nz = NonZeroUsize::new(stride)
            .ok_or_else(|| Error::InvalidConfig { field: "stride", reason: "must be at least 1".into() })?;
        // span = ((steps + 1)(h + 1) − 1)·s + 1 = steps(h+1)s + h·s + 1, and every time position
        // computed from a spec stays below it; checked once here, so the rest can multiply freely.
        let span = history
            .checked_add(1)
            .and_then(|states| states.checked_mul(steps.checked_add(1)?))
            .and_then(|n| (n - 1).checked_mul(stride))
            .and_then(|n| n.checked_add(1));
        if span.is_none() {
            return Err(Error::InvalidConfig {
                field: "history",
                reason: format!(
                    "history {history}, steps {steps} and stride {stride} make a window longer than any store"
                ),
            });
        }
        Ok(Self { history, steps: steps_nz, stride: stride_nz })
    }

    /// History length `h`.
    pub fn history(&self) -> usize {
        self.history
    }
    /// Rollout steps.
    pub fn steps(&self) -> usize {
        self.steps.get()
    }
    /// Stride `s`.
    pub fn stride(&self) -> usize {
        self.stride.get()
    }
    /// States per input (and per label): `h + 1`.
    pub fn states(&self) -> usize {
        self.history + 1
    }

    /// The same window with another rollout length (Samudra's `step_transition`, or validation's `steps = 1`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `steps` is zero.
    pub fn with_steps(&self, steps: usize) -> Result<Self> {
        Self::new(self.history, steps, self.stride())
    }

    /// Time positions one sample spans from its first to its last state, inclusive.
    pub fn span(&self) -> usize {
        self.steps() * self.states() * self.stride() + self.history * self.stride() + 1
    }

    /// Number of samples in a selection of `len` time positions: `len − steps(h+1)s − h·s`, or 0.
    pub fn num_samples(&self, len: usize) -> usize {
        len.saturating_sub(self.span() - 1)
    }

    /// Like [`num_samples`](Self::num_samples), but an empty result is an error that says why.
    ///
    /// # Errors
    /// [`Error::TooShort`] when `len` holds no complete window.
    pub fn require_samples(&self, len: usize) -> Result<usize> {
        match self.num_samples(len) {
            0 => Err(Error::TooShort {
                len,
                history: self.history,
                steps: self.steps(),
                stride: self.stride(),
                needed: self.span(),
            }),
            n => Ok(n),
        }
    }

    /// Time position of input state `slot` (0..=h) of rollout step `step` of sample `sample`.
    pub fn input_time(&self, sample: usize, step: usize, slot: usize) -> usize {
        sample + (step * self.states() + slot) * self.stride()
    }

    /// Time position of label state `slot` of rollout step `step`: the input of step `step + 1`.
    pub fn label_time(&self, sample: usize, step: usize, slot: usize) -> usize {
        self.input_time(sample, step + 1, slot)
    }

    /// All time positions of one sample, in order, without repeats.
    pub fn sample_times(&self, sample: usize) -> impl Iterator<Item = usize> + use<> {
        let stride = self.stride();
        let n = (self.steps() + 1) * self.states();
        (0..n).map(move |k| sample + k * stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_longer_than_any_store_are_errors() {
        assert!(WindowSpec::new(usize::MAX, 1, 1).is_err());
        assert!(WindowSpec::new(1, usize::MAX, 1).is_err());
        assert!(WindowSpec::new(1, 1, usize::MAX).is_err());
        assert!(WindowSpec::new(1 << 32, 1 << 32, 1).is_err());
        // The largest window that fits: span = usize::MAX.
        let s = WindowSpec::new(0, 1, usize::MAX - 1).unwrap();
        assert_eq!(s.span(), usize::MAX);
        assert_eq!(s.num_samples(usize::MAX), 1);
        assert_eq!(s.num_samples(usize::MAX - 1), 0);
    }

    #[test]
    fn samudra_example_hist1_steps4() {
        let w = WindowSpec::new(1, 4, 1).unwrap();
        // step s input [i+2s, i+2s+1], label [i+2s+2, i+2s+3]
        for s in 0..4 {
            assert_eq!([w.input_time(5, s, 0), w.input_time(5, s, 1)], [5 + 2 * s, 6 + 2 * s]);
            assert_eq!([w.label_time(5, s, 0), w.label_time(5, s, 1)], [7 + 2 * s, 8 + 2 * s]);
        }
        // train split of 2829 steps gives 2820 windows; validation (steps 1) of 73 gives 70
        assert_eq!(w.num_samples(2829), 2820);
        assert_eq!(w.with_steps(1).unwrap().num_samples(73), 70);
        assert_eq!(w.sample_times(0).count(), 10);
    }

    #[test]
    fn too_short_says_how_much_is_needed() {
        let w = WindowSpec::new(1, 2, 2).unwrap();
        let err = w.require_samples(w.span() - 1).unwrap_err();
        assert_eq!(err, Error::TooShort { len: w.span() - 1, history: 1, steps: 2, stride: 2, needed: w.span() });
        assert_eq!(w.require_samples(w.span()).unwrap(), 1);
    }

    #[test]
    fn zero_steps_or_stride_rejected() {
        assert!(matches!(WindowSpec::new(0, 0, 1), Err(Error::InvalidConfig { field: "steps", .. })));
        assert!(matches!(WindowSpec::new(0, 1, 0), Err(Error::InvalidConfig { field: "stride", .. })));
        let cfg: WindowConfig = serde_json::from_str(r#"{"hist": 0, "steps": 2, "data_stride": 3}"#).unwrap();
        assert_eq!(cfg.validate().unwrap(), WindowSpec::new(0, 2, 3).unwrap());
    }
}
