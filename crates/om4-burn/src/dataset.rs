//! Burn `Dataset` and `Batcher` adapters, for users of Burn's `DataLoaderBuilder`.
//!
//! [`Om4Dataset::get_many`] reads a batch's planes deduplicated (each unique plane once) and hands
//! each sample its own copy; [`Om4Batcher`] prepares every sample on the device and concatenates
//! them. This gives correct batches through Burn's loaders, but each sample is uploaded and
//! prepared on its own, and Burn's workers queue up to 100 device batches with no bound on
//! memory. The [`Loader`](crate::Loader) is the fast path: one upload of each unique plane per
//! batch, bounded prefetch, and batches in schedule order.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::{Device, Tensor};
use om4_batch::{BatchPlan, SampleSpace};

use crate::device::{DeviceNormalization, ModelBatch, StepTensors, prepare_batch};
use om4_pipeline::{BatchSource, read_groups};

/// One sample's raw host planes: its single-sample plan and one buffer per read group.
#[derive(Debug, Clone)]
pub struct SampleItem {
    /// Global sample index.
    pub index: usize,
    /// The sample's plan (batch of one).
    pub plan: BatchPlan,
    /// `(times, channels, y, x)` per group of `plan`.
    pub groups: Vec<Vec<f32>>,
}

/// The samples of a [`SampleSpace`] over a source, as a Burn dataset.
#[derive(Debug)]
pub struct Om4Dataset<S: BatchSource> {
    source: Arc<S>,
    space: SampleSpace,
}

impl<S: BatchSource> Om4Dataset<S> {
    /// A dataset of `space`'s samples.
    pub fn new(source: Arc<S>, space: SampleSpace) -> Self {
        Self { source, space }
    }
}

fn boxed<E: std::error::Error + Send + Sync + 'static>(e: E) -> DatasetError {
    DatasetError::new(e)
}

impl<S: BatchSource + std::fmt::Debug> Dataset<SampleItem> for Om4Dataset<S> {
    fn get(&self, index: usize) -> Result<SampleItem, DatasetError> {
        self.get_many(vec![index]).map(|mut v| v.remove(0))
    }

    /// One deduplicated read of all the samples' planes, then a copy per sample.
    fn get_many(&self, indexes: Vec<usize>) -> Result<Vec<SampleItem>, DatasetError> {
        let src = &*self.source;
        let (roles, channels, plane) = (src.roles(), src.channels(), src.grid().plane());
        let samples = self.space.samples(&indexes).map_err(boxed)?;
        let union = BatchPlan::new(&samples, &roles, &channels).map_err(boxed)?;
        let buffers = read_groups(src, &union, |len| vec![0f32; len]).map_err(boxed)?;
        samples
            .iter()
            .zip(&indexes)
            .map(|(sample, &index)| {
                let plan = BatchPlan::new(std::slice::from_ref(sample), &roles, &channels).map_err(boxed)?;
                let groups = plan
                    .groups()
                    .iter()
                    .map(|g| {
                        let ug = union.groups().iter().position(|u| u.source == g.source).expect("same sources");
                        let block = g.channels * plane;
                        let mut out = Vec::with_capacity(g.planes() * plane);
                        for t in &g.times {
                            let row = union.groups()[ug].times.binary_search(t).expect("union holds every time");
                            out.extend_from_slice(&buffers[ug][row * block..(row + 1) * block]);
                        }
                        out
                    })
                    .collect();
                Ok(SampleItem { index, plan, groups })
            })
            .collect()
    }

    fn len(&self) -> usize {
        self.space.len()
    }
}

/// Builds model batches on a device from [`SampleItem`]s.
///
/// Burn's `Batcher::batch` cannot return an error, so items are trusted: it panics on an item
/// whose buffers do not match its plan, or on items of different window lengths in one batch.
/// Items from [`Om4Dataset`] always match; the [`Loader`](crate::Loader) reports such problems
/// as errors instead.
#[derive(Debug, Clone)]
pub struct Om4Batcher {
    preparations: Arc<Vec<om4_batch::Normalization>>,
    grid: om4_batch::Grid,
}

impl Om4Batcher {
    /// A batcher for a source's preparations.
    pub fn new<S: BatchSource>(source: &S) -> Self {
        Self { preparations: Arc::new(source.normalizations().to_vec()), grid: source.grid() }
    }
}

impl Batcher<SampleItem, ModelBatch> for Om4Batcher {
    fn batch(&self, items: Vec<SampleItem>, device: &Device) -> ModelBatch {
        let preps: Vec<DeviceNormalization> =
            self.preparations.iter().map(|p| DeviceNormalization::new(p, self.grid, device)).collect();
        let per_item: Vec<ModelBatch> = items
            .iter()
            .map(|item| {
                let views: Vec<&[f32]> = item.groups.iter().map(Vec::as_slice).collect();
                // Items come from `Om4Dataset`, whose buffers match their plans.
                prepare_batch(&item.plan, &views, &preps, self.grid, device).expect("item buffers match their plan")
            })
            .collect();
        let steps = per_item.first().map_or(0, |b| b.steps.len());
        let steps = (0..steps)
            .map(|k| StepTensors {
                input: Tensor::cat(per_item.iter().map(|b| b.steps[k].input.clone()).collect(), 0),
                label: Tensor::cat(per_item.iter().map(|b| b.steps[k].label.clone()).collect(), 0),
            })
            .collect();
        ModelBatch { samples: items.len(), steps }
    }
}
