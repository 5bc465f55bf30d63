//! The OM4 Zarr store as om4-pipeline's [`BatchSource`]: a validated time split, its channels,
//! statistics and masks, read concurrently on a shared [`ReadPool`].

use std::sync::Arc;

use om4_batch::{Grid, NormOrder, Normalization, Precision, ReadGroup, ReadPool, Roles};
use om4_pipeline::BatchSource;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::{ChannelSet, DateRange, Om4Store, Selection, StatsStore, StoreLocation};

/// Data settings with Samudra's words: store paths, channels, normalization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `OM4.zarr`: a local path or, with feature `s3`, a store on S3 (as `means` and `stds`). In
    /// configuration files a path, an `s3://bucket/path` URL (options from the `AWS_*`
    /// environment variables), or Samudra's table `{type: s3, bucket, path, endpoint_url, anon}`
    /// (see [`StoreLocation`]).
    pub data: StoreLocation,
    /// `OM4_means.zarr`.
    pub means: StoreLocation,
    /// `OM4_stds.zarr`.
    pub stds: StoreLocation,
    /// Prognostic channels, in model order (Samudra: `uo_0..18, vo_*, thetao_*, so_*, zos`).
    pub prognostic: Vec<String>,
    /// Boundary channels (Samudra: `tauuo, tauvo, hfds`); may be empty.
    #[serde(default)]
    pub boundary: Vec<String>,
    /// Normalize before masking (Samudra's default `true`).
    #[serde(default = "yes")]
    pub normalize_before_mask: bool,
    /// Value of land cells (`masked_fill_value`, default 0).
    #[serde(default)]
    pub masked_fill_value: f32,
}

fn yes() -> bool {
    true
}

impl SourceConfig {
    /// Samudra's channels for a store with `levels` levels: prognostic `uo_*, vo_*, thetao_*, so_*, zos`,
    /// boundary `tauuo, tauvo, hfds`; normalize before masking, land filled with 0.
    pub fn samudra(
        data: impl Into<StoreLocation>,
        means: impl Into<StoreLocation>,
        stds: impl Into<StoreLocation>,
        levels: usize,
    ) -> Self {
        let names = crate::channel_names(levels);
        let n_prog = crate::DEPTH_VARS.len() * levels + 1;
        Self {
            data: data.into(),
            means: means.into(),
            stds: stds.into(),
            prognostic: names[..n_prog].to_vec(),
            boundary: names[n_prog..n_prog + 3].to_vec(),
            normalize_before_mask: true,
            masked_fill_value: 0.0,
        }
    }
}

/// One time split of an OM4 store, validated and ready to read: resolve once, share freely.
#[derive(Debug, Clone)]
pub struct Om4Source {
    store: Arc<Om4Store>,
    sets: Vec<ChannelSet>,
    normalizations: Vec<Normalization>,
    selection: Selection,
    pool: ReadPool,
}

impl Om4Source {
    /// Opens the store, validates the channels and loads statistics and masks; every time is
    /// selected ([`with_range`](Self::with_range) takes a split).
    ///
    /// # Errors
    /// Any store, validation or statistics error; [`Error::Config`] for an empty prognostic list.
    pub fn open(config: &SourceConfig, pool: ReadPool) -> Result<Self> {
        Self::from_store(Arc::new(Om4Store::open_location(&config.data)?), config, pool)
    }

    /// [`Om4Source::open`] on a store already open (`config.data` is not opened again).
    ///
    /// # Errors
    /// As [`Om4Source::open`].
    pub fn from_store(store: Arc<Om4Store>, config: &SourceConfig, pool: ReadPool) -> Result<Self> {
        if config.prognostic.is_empty() {
            return Err(Error::Config { field: "prognostic", reason: "at least one channel is needed".into() });
        }
        let means = StatsStore::open_location(&config.means)?;
        let stds = StatsStore::open_location(&config.stds)?;
        let order =
            if config.normalize_before_mask { NormOrder::NormalizeThenMask } else { NormOrder::MaskThenNormalize };
        let mut sets = vec![store.channels(&config.prognostic)?];
        if !config.boundary.is_empty() {
            sets.push(store.channels(&config.boundary)?);
        }
        let normalizations = sets
            .iter()
            .map(|set| {
                // Samudra normalizes in the statistics' dtype: float64 stores give float64 arithmetic.
                let (mean, p_mean) = means.values_with_precision(set)?;
                let (std, p_std) = stds.values_with_precision(set)?;
                let precision =
                    if p_mean == Precision::F64 || p_std == Precision::F64 { Precision::F64 } else { Precision::F32 };
                Ok(Normalization::with_precision(
                    mean,
                    std,
                    precision,
                    store.masks(set)?,
                    order,
                    config.masked_fill_value,
                )?)
            })
            .collect::<Result<Vec<_>>>()?;
        let selection = sets[0].all_rows();
        Ok(Self { store, sets, normalizations, selection, pool })
    }

    /// The same source over the times of `range` (both ends included, as Samudra's splits),
    /// sharing the open store, channels and pool; [`DateRange::ALL`] is every time, also in a store
    /// without a time coordinate.
    ///
    /// # Errors
    /// A bounded range on a store without a CF time axis, or a range outside its times.
    pub fn with_range(&self, range: &DateRange) -> Result<Self> {
        let selection = if range.is_all() { self.sets[0].all_rows() } else { self.store.select(range)? };
        Ok(Self { selection, ..self.clone() })
    }

    /// The selected physical rows.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The store.
    pub fn store(&self) -> &Om4Store {
        &self.store
    }
}

impl BatchSource for Om4Source {
    fn grid(&self) -> Grid {
        self.sets[Roles::PROGNOSTIC].grid()
    }
    fn time_len(&self) -> usize {
        self.selection.len()
    }
    fn channels(&self) -> Vec<usize> {
        self.sets.iter().map(ChannelSet::len).collect()
    }
    fn roles(&self) -> Roles {
        if self.sets.len() > 1 { Roles::samudra() } else { Roles::prognostic_only() }
    }
    fn normalizations(&self) -> &[Normalization] {
        &self.normalizations
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        Ok(self.store.reader(&self.pool, &self.sets[group.source], &self.selection).read(&group.times, out)?)
    }

    fn read_pool(&self) -> Option<&ReadPool> {
        Some(&self.pool)
    }

    /// 2 for a store on object storage: the next batch's requests go out while this one's answers
    /// are decoded (`om4 bench batch --prefetch 2` from S3 at 50 ms per request: see
    /// docs/benchmarks.md); 1 for local files, where a second read only delays the first batch.
    fn batch_reads_in_flight(&self) -> usize {
        if self.store.location().is_remote() { 2 } else { 1 }
    }
}
