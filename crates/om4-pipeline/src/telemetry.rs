//! Per-batch timings and an epoch summary with percentiles.

use std::time::Duration;

use om4_batch::PlaneCount;

/// What one batch cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchTelemetry {
    /// Time the consumer waited for the batch (exposed data wait): on the host path this includes
    /// the preparation done on the consumer's thread.
    pub wait: Duration,
    /// Time the producer spent reading its planes.
    pub read: Duration,
    /// Time spent uploading, normalizing, masking and gathering.
    pub prepare: Duration,
    /// Bytes decoded.
    pub bytes: u64,
    /// Planes requested against unique planes.
    pub planes: PlaneCount,
    /// Unique planes served from a resident device copy instead of read (see
    /// [`Loader::resident`](crate::Loader::resident)).
    pub resident_planes: usize,
}

/// Percentiles of one quantity.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// Sum.
    pub total: Duration,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values`.
    pub fn of(mut values: Vec<Duration>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let rank = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Self { p50: rank(0.50), p95: rank(0.95), total: values.iter().sum() }
    }
}

/// Summary of an epoch's batches.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EpochSummary {
    /// Batches.
    pub batches: usize,
    /// Consumer wait.
    pub wait: Percentiles,
    /// Reads.
    pub read: Percentiles,
    /// Normalization.
    pub prepare: Percentiles,
    /// Bytes decoded.
    pub bytes: u64,
    /// Planes requested against read.
    pub planes: PlaneCount,
}

impl EpochSummary {
    /// Summarizes per-batch telemetry.
    pub fn of(batches: &[BatchTelemetry]) -> Self {
        Self {
            batches: batches.len(),
            wait: Percentiles::of(batches.iter().map(|b| b.wait).collect()),
            read: Percentiles::of(batches.iter().map(|b| b.read).collect()),
            prepare: Percentiles::of(batches.iter().map(|b| b.prepare).collect()),
            bytes: batches.iter().map(|b| b.bytes).sum(),
            planes: batches.iter().fold(PlaneCount::default(), |a, b| PlaneCount {
                requested: a.requested + b.planes.requested,
                unique: a.unique + b.planes.unique,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let p = Percentiles::of((1..=20).map(ms).collect());
        assert_eq!((p.p50, p.p95, p.total), (ms(10), ms(19), ms(210)));
        assert_eq!(Percentiles::of(vec![]), Percentiles::default());
    }
}
