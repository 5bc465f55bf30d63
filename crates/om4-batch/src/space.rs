//! The sample space of one training run: one part per Samudra dataset (one per `data_stride`).

use crate::error::{Error, Result};
use crate::window::WindowSpec;

/// One sample: its window and its first time position in the part's time selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sample {
    /// Window of the dataset the sample comes from.
    pub spec: WindowSpec,
    /// Position of the sample's first state in the time selection.
    pub start: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    spec: WindowSpec,
    offset: usize,
    count: usize,
    group: u64,
}

/// Global sample indices over several datasets, as Samudra concatenates them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SampleSpace {
    parts: Vec<Part>,
    len: usize,
}

impl SampleSpace {
    /// An empty space.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most samples a space holds: an epoch lists every sample index, so this bounds its
    /// memory (2 GiB of indices), far above any OM4 record (4,745 five-day steps).
    pub const MAX_SAMPLES: usize = 1 << 28;

    /// A space holding one dataset of `time_len` positions read with `spec`.
    ///
    /// # Errors
    /// [`Error::TooShort`] when the selection holds no window; [`Error::InvalidConfig`] past
    /// [`SampleSpace::MAX_SAMPLES`].
    pub fn single(spec: WindowSpec, time_len: usize) -> Result<Self> {
        let mut space = Self::new();
        space.push(spec, time_len, 0)?;
        Ok(space)
    }

    /// Appends a dataset. Datasets with the same `group` key (same grid) are batched together.
    ///
    /// # Errors
    /// [`Error::TooShort`] when the selection holds no window; [`Error::InvalidConfig`] when the
    /// space would hold more than [`SampleSpace::MAX_SAMPLES`] samples.
    pub fn push(&mut self, spec: WindowSpec, time_len: usize, group: u64) -> Result<()> {
        let count = spec.require_samples(time_len)?;
        if count > Self::MAX_SAMPLES - self.len {
            return Err(Error::InvalidConfig {
                field: "time_len",
                reason: format!(
                    "{} samples in all; om4 lists at most {} per epoch",
                    self.len as u128 + count as u128,
                    Self::MAX_SAMPLES
                ),
            });
        }
        self.parts.push(Part { spec, offset: self.len, count, group });
        self.len += count;
        Ok(())
    }

    /// Total number of samples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the space holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sample behind a global index.
    ///
    /// # Errors
    /// [`Error::SampleOutOfRange`] for an index past the end.
    pub fn sample(&self, index: usize) -> Result<Sample> {
        self.parts
            .iter()
            .find(|p| index >= p.offset && index < p.offset + p.count)
            .map(|p| Sample { spec: p.spec, start: index - p.offset })
            .ok_or(Error::SampleOutOfRange { index, len: self.len })
    }

    /// Samples of many indices.
    ///
    /// # Errors
    /// As [`sample`](Self::sample).
    pub fn samples(&self, indices: &[usize]) -> Result<Vec<Sample>> {
        indices.iter().map(|&i| self.sample(i)).collect()
    }

    /// Equivalence groups, ordered by key; each lists its global indices in order.
    pub fn groups(&self) -> Vec<Vec<usize>> {
        let mut keys: Vec<u64> = self.parts.iter().map(|p| p.group).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.iter()
            .map(|&k| self.parts.iter().filter(|p| p.group == k).flat_map(|p| p.offset..p.offset + p.count).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_strides_concatenate() {
        let mut s = SampleSpace::new();
        s.push(WindowSpec::new(1, 1, 1).unwrap(), 10, 0).unwrap(); // 10 - 2 - 1 = 7
        s.push(WindowSpec::new(1, 1, 2).unwrap(), 10, 0).unwrap(); // 10 - 4 - 2 = 4
        assert_eq!(s.len(), 11);
        assert_eq!(s.sample(8).unwrap(), Sample { spec: WindowSpec::new(1, 1, 2).unwrap(), start: 1 });
        assert_eq!(s.groups(), vec![(0..11).collect::<Vec<_>>()]);
        assert_eq!(s.sample(11), Err(Error::SampleOutOfRange { index: 11, len: 11 }));
    }
}
