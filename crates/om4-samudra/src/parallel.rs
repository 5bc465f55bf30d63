//! Data-parallel training: which batches a process trains on, and the gradient all-reduce.
//!
//! Under [`DataParallel::Rank`] each process takes its rank's slice of upstream's distributed
//! schedule (`DistributedEquivalenceGroupBatchSampler`, [`om4_batch::Ddp`]); after the backward
//! pass of each optimizer step the gradients are flattened in the model's parameter order,
//! summed across ranks in buckets of [`BUCKET_FLOATS`] and divided by the world size, so every
//! rank's optimizer (gradient clipping included) sees the average, as under PyTorch DDP.
//! [`DataParallel::Emulate`] trains one process on the same run's global batches (every rank's
//! batch `k` concatenated): the reference a distributed run equals to float32 rounding.

use std::sync::Arc;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use om4_batch::{Ddp, Schedule};
use om4_mpi::{Collective, ReduceOp};

use crate::error::{Error, Result};
use crate::model::Samudra;

/// Floats per all-reduce call (64 MiB of float32): a v2 network's 84 M gradients go in six calls.
pub const BUCKET_FLOATS: usize = 16 << 20;

/// How the processes of a run share the work.
#[derive(Debug, Clone, Default)]
pub enum DataParallel {
    /// One process trains on upstream's non-distributed schedule.
    #[default]
    Single,
    /// This process is one rank of a distributed run over `Collective`: it trains on its slice
    /// of the distributed schedule and averages gradients, dynamic loss weights and reported
    /// losses with the other ranks.
    Rank(Arc<dyn Collective>),
    /// One process trains on the global batches of a `world_size`-rank distributed run (rank
    /// 0's samples first): what the distributed run computes, in one process.
    Emulate {
        /// The ranks of the emulated run.
        world_size: usize,
    },
}

impl DataParallel {
    /// The ranks of the run (1 for [`DataParallel::Single`]).
    pub fn world_size(&self) -> usize {
        match self {
            Self::Single => 1,
            Self::Rank(c) => c.world_size(),
            Self::Emulate { world_size } => *world_size,
        }
    }

    /// This process's rank (0 unless [`DataParallel::Rank`]).
    pub fn rank(&self) -> usize {
        match self {
            Self::Rank(c) => c.rank(),
            _ => 0,
        }
    }

    /// The collective of a distributed rank.
    pub(crate) fn collective(&self) -> Option<&dyn Collective> {
        match self {
            Self::Rank(c) if c.world_size() > 1 => Some(c.as_ref()),
            _ => None,
        }
    }

    /// The schedule this process follows, of the kind `kind` makes (`Schedule::training` or
    /// `Schedule::validation`).
    pub(crate) fn schedule(
        &self,
        batch_size: usize,
        seed: u64,
        kind: fn(usize, u64, Option<Ddp>) -> om4_batch::Result<Schedule>,
    ) -> Result<Schedule> {
        let make = |ddp| kind(batch_size, seed, ddp);
        Ok(match self {
            Self::Single => make(None)?,
            Self::Rank(c) => make(Some(Ddp { world_size: c.world_size(), rank: c.rank() }))?,
            Self::Emulate { world_size } => make(Some(Ddp { world_size: *world_size, rank: 0 }))?.all_ranks()?,
        })
    }
}

/// The parameters' gradients flattened in visiting order (a parameter without a gradient counts
/// as zeros, so every rank's buffer lines up), with what rebuilding them needs.
struct Flatten<'a> {
    grads: &'a mut GradientsParams,
    values: Vec<f32>,
    device: Option<Device>,
    error: Option<String>,
}

impl ModuleVisitor for Flatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let n = param.shape().num_elements();
        match self.grads.remove::<D>(param.id) {
            Some(g) => {
                self.device.get_or_insert_with(|| g.device());
                match g.into_data().convert::<f32>().try_into_vec::<f32>() {
                    Ok(v) if v.len() == n => self.values.extend_from_slice(&v),
                    Ok(v) => {
                        self.error.get_or_insert(format!("a gradient of {} values for {n} parameters", v.len()));
                        self.values.resize(self.values.len() + n, 0.0);
                    }
                    Err(e) => {
                        self.error.get_or_insert(format!("cannot read a gradient: {e:?}"));
                        self.values.resize(self.values.len() + n, 0.0);
                    }
                }
            }
            None => self.values.resize(self.values.len() + n, 0.0),
        }
    }
}

/// Registers the averaged gradients back, parameter by parameter, in the same order.
struct Restore<'a> {
    grads: &'a mut GradientsParams,
    values: &'a [f32],
    at: usize,
    device: &'a Device,
}

impl ModuleVisitor for Restore<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let shape = param.shape();
        let n = shape.num_elements();
        let slice = &self.values[self.at..self.at + n];
        self.at += n;
        self.grads.register::<D>(param.id, Tensor::from_data(TensorData::new(slice.to_vec(), shape), self.device));
    }
}

/// Averages `grads` over the ranks of `collective` in place and returns whether any rank set
/// `failed` (a non-finite loss or gradient there): every rank learns it from the same reduction,
/// so all of them stop together instead of some waiting in the next one.
///
/// # Errors
/// [`Error::Parallel`] when a gradient cannot be read or the reduction fails.
pub(crate) fn all_reduce_grads(
    model: &Samudra,
    grads: GradientsParams,
    collective: &dyn Collective,
    failed: bool,
) -> Result<(GradientsParams, bool)> {
    let mut grads = grads;
    let mut flat = Flatten { grads: &mut grads, values: Vec::new(), device: None, error: None };
    model.visit(&mut flat);
    let Flatten { mut values, device, error, .. } = flat;
    if let Some(reason) = error {
        return Err(Error::Parallel { reason });
    }
    let params = values.len();
    // The last element carries the number of ranks that failed.
    values.push(if failed { 1.0 } else { 0.0 });
    for bucket in values.chunks_mut(BUCKET_FLOATS) {
        collective.all_reduce_f32(bucket, ReduceOp::Sum).map_err(|e| Error::Parallel { reason: e.to_string() })?;
    }
    let any_failed = values[params] > 0.0;
    let scale = 1.0 / collective.world_size() as f32;
    values[..params].iter_mut().for_each(|v| *v *= scale);
    let mut out = GradientsParams::new();
    if let Some(device) = device {
        model.visit(&mut Restore { grads: &mut out, values: &values[..params], at: 0, device: &device });
    }
    Ok((out, any_failed))
}

/// Replaces every rank's running statistics (batch norm), or with `all` every float tensor, by
/// rank 0's: a sum in which every other rank adds zeros, so the values arrive exactly.
struct FromRank0<'a> {
    collective: &'a dyn Collective,
    all: bool,
    path: Vec<String>,
    error: Option<String>,
}

impl ModuleMapper for FromRank0<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let buffer = self.path.last().is_some_and(|n| n.starts_with("running_"));
        if !(self.all || buffer) || self.error.is_some() {
            return param;
        }
        let rank0 = self.collective.rank() == 0;
        let collective = self.collective;
        let mut error = None;
        let param = param.map(|t| {
            let (shape, device) = (t.shape(), t.device());
            let mut v = match t.clone().into_data().convert::<f32>().try_into_vec::<f32>() {
                Ok(v) => v,
                Err(e) => {
                    error = Some(format!("cannot read a running statistic: {e:?}"));
                    return t;
                }
            };
            if !rank0 {
                v.iter_mut().for_each(|x| *x = 0.0);
            }
            if let Err(e) = collective.all_reduce_f32(&mut v, ReduceOp::Sum) {
                error = Some(e.to_string());
                return t;
            }
            let tracked = t.is_require_grad();
            let received = Tensor::from_data(TensorData::new(v, shape), &device);
            if tracked { received.require_grad() } else { received }
        });
        self.error = error;
        param
    }
}

/// Rank 0's running statistics on every rank (after each optimizer step, as PyTorch DDP's
/// `broadcast_buffers`), or with `all` rank 0's parameters too (at the start, as DDP's
/// construction does).
///
/// # Errors
/// [`Error::Parallel`] when the reduction fails.
pub(crate) fn from_rank0(model: Samudra, collective: &dyn Collective, all: bool) -> Result<Samudra> {
    let mut mapper = FromRank0 { collective, all, path: Vec::new(), error: None };
    let model = model.map(&mut mapper);
    match mapper.error {
        Some(reason) => Err(Error::Parallel { reason }),
        None => Ok(model),
    }
}

/// Sums `values` across the ranks of `parallel` (nothing to do in one process).
///
/// # Errors
/// [`Error::Parallel`] when the reduction fails.
pub(crate) fn sum_f64(parallel: &DataParallel, values: &mut [f64]) -> Result<()> {
    match parallel.collective() {
        Some(c) => c.all_reduce_f64(values, ReduceOp::Sum).map_err(|e| Error::Parallel { reason: e.to_string() }),
        None => Ok(()),
    }
}

/// Every float tensor of `model` (parameters and running statistics), flattened in the module's
/// visiting order: what two ranks' models are compared by.
///
/// # Errors
/// [`Error::Parallel`] when a tensor's values cannot be read back as `f32`, naming its shape.
pub fn flatten_parameters(model: &Samudra) -> Result<Vec<f32>> {
    #[derive(Default)]
    struct All {
        values: Vec<f32>,
        error: Option<String>,
    }
    impl ModuleVisitor for All {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.error.is_some() {
                return;
            }
            match param.val().into_data().convert::<f32>().try_into_vec::<f32>() {
                Ok(v) => self.values.extend(v),
                Err(e) => self.error = Some(format!("cannot read a tensor of shape {:?}: {e:?}", param.shape())),
            }
        }
    }
    let mut all = All::default();
    model.visit(&mut all);
    match all.error {
        Some(reason) => Err(Error::Parallel { reason }),
        None => Ok(all.values),
    }
}
