//! Epoch schedules identical to Samudra's batch samplers for the same seed and epoch.
//!
//! Samples are split into equivalence groups (datasets of one grid; one group in the common case).
//! Without DDP a shuffled epoch ([`Order::Shuffle`]) draws everything from one CPython
//! `random.Random(seed + epoch)`: it shuffles each group's index list in turn, cuts it into batches,
//! then shuffles the list of all groups' batches with the same generator (upstream
//! `EquivalenceGroupBatchSampler.__iter__` since m2lines/Samudra 953be722, unchanged at 018a6a7).
//! With DDP every rank builds the same global list of `world_size`-batch chunks and takes every
//! `world_size`-th batch from its rank on, so all ranks see the same number of batches.
//! [`Order::ShuffleTorchRandperm04116bcd`] keeps the older non-DDP order drawn with torch's
//! `randperm`, for runs of the upstream branches that used it.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::{PyRandom, TorchGenerator};

/// Whether an epoch visits samples in a seeded random order or in index order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Seeded shuffle (Samudra's `shuffle=True`) as upstream main draws it since commit 953be722
    /// (2026-07-22, "fix epoch setting & shuffle seeding"; still so at 018a6a7): one
    /// `random.Random(seed + epoch)` shuffles each group's indices, then the list of batches.
    /// With DDP the chunk shuffles of `DistributedEquivalenceGroupBatchSampler`.
    Shuffle,
    /// Index order (`shuffle=False`).
    Sequential,
    /// The older seeded non-DDP shuffle: each group's indices are permuted by torch's CPU
    /// `randperm` (`SubsetRandomSampler` with one `torch.Generator().manual_seed(seed + epoch)` shared
    /// by all groups), then the batch list by a separate `random.Random(seed + epoch)`.
    ///
    /// Reproduces the sampler of upstream branch `codex/rust-loader-prefetch-plan` from commit
    /// 04116bcd (2026-07-15, "Qualify Rust loader parity and pinned prefetch") and of the branches
    /// that carry the same code (`agent/multires-1deg-mse-proxy`, `codex/decoder-root-cause-report`).
    /// It was never on main: main before 953be722 drew from the process-global torch and `random`
    /// states (seeded once per run), which no schedule can reproduce, and main from 953be722 on
    /// draws [`Order::Shuffle`]. With DDP it is identical to [`Order::Shuffle`] (the DDP sampler
    /// never used torch).
    #[serde(rename = "shuffle_torch_randperm_04116bcd")]
    ShuffleTorchRandperm04116bcd,
}

/// What happens to an incomplete batch (and, with DDP, an incomplete chunk of `world_size` batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tail {
    /// Drop it (`drop_last=True`, training).
    Drop,
    /// Keep the short batch; with DDP pad the short chunk with batches of the same group.
    Keep,
}

/// One rank of a distributed (DDP) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ddp {
    /// Number of ranks.
    pub world_size: usize,
    /// This rank, `0..world_size`.
    pub rank: usize,
}

/// How an epoch's batches are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Schedule {
    batch_size: NonZeroUsize,
    seed: u64,
    order: Order,
    tail: Tail,
    ddp: Option<Ddp>,
    /// With DDP: yield every rank's batch `k` concatenated (see [`Schedule::all_ranks`]).
    all_ranks: bool,
}

impl Schedule {
    /// The most DDP ranks a schedule serves (padding an epoch materializes one batch per rank).
    pub const MAX_WORLD_SIZE: usize = 1 << 20;

    /// A schedule with every setting explicit.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero batch size or world size, a world of more than
    /// [`Schedule::MAX_WORLD_SIZE`] ranks, or a rank outside the world.
    pub fn new(batch_size: usize, seed: u64, order: Order, tail: Tail, ddp: Option<Ddp>) -> Result<Self> {
        let batch_size = NonZeroUsize::new(batch_size)
            .ok_or_else(|| Error::InvalidConfig { field: "batch_size", reason: "must be at least 1".into() })?;
        if let Some(d) = ddp {
            if d.world_size == 0 {
                return Err(Error::InvalidConfig { field: "world_size", reason: "must be at least 1".into() });
            }
            if d.world_size > Self::MAX_WORLD_SIZE {
                return Err(Error::InvalidConfig {
                    field: "world_size",
                    reason: format!("{} ranks; om4 schedules at most {}", d.world_size, Self::MAX_WORLD_SIZE),
                });
            }
            if d.rank >= d.world_size {
                return Err(Error::InvalidConfig {
                    field: "rank",
                    reason: format!("rank {} is outside a world of {}", d.rank, d.world_size),
                });
            }
        }
        Ok(Self { batch_size, seed, order, tail, ddp, all_ranks: false })
    }

    /// The global batches of this DDP schedule: batch `k` of an epoch is every rank's batch `k`,
    /// rank 0's samples first. One process training on them sees what one optimizer step of the
    /// distributed run averages over (the reference a data-parallel run is checked against).
    /// The number of batches is the same as each rank's.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a schedule without DDP.
    pub fn all_ranks(self) -> Result<Self> {
        if self.ddp.is_none() {
            return Err(Error::InvalidConfig {
                field: "world_size",
                reason: "all_ranks needs a distributed (DDP) schedule".into(),
            });
        }
        Ok(Self { all_ranks: true, ..self })
    }

    /// The DDP rank this schedule serves, if any.
    pub fn ddp(&self) -> Option<Ddp> {
        self.ddp
    }

    /// Samudra's training sampler: shuffled ([`Order::Shuffle`], upstream's current order),
    /// incomplete batches dropped (`shuffle=True, drop_last=True`, with or without DDP).
    ///
    /// # Errors
    /// As [`Schedule::new`].
    pub fn training(batch_size: usize, seed: u64, ddp: Option<Ddp>) -> Result<Self> {
        Self::new(batch_size, seed, Order::Shuffle, Tail::Drop, ddp)
    }

    /// Samudra's validation sampler: nothing dropped; without DDP shuffled ([`Order::Shuffle`]) with
    /// the last short batch of each group kept (`shuffle=True, drop_last=False`); with DDP in index
    /// order, the last short batch kept and a short chunk padded (`shuffle=False, drop_last=False`).
    ///
    /// # Errors
    /// As [`Schedule::new`].
    pub fn validation(batch_size: usize, seed: u64, ddp: Option<Ddp>) -> Result<Self> {
        let order = if ddp.is_some() { Order::Sequential } else { Order::Shuffle };
        Self::new(batch_size, seed, order, Tail::Keep, ddp)
    }

    /// Samples per batch (per rank; a batch of [`all_ranks`](Self::all_ranks) holds
    /// `world_size` times as many).
    pub fn batch_size(&self) -> usize {
        self.batch_size.get()
    }

    /// The batches (lists of sample indices) of `epoch` for this rank, in the order to train on them.
    /// Samudra numbers epochs from 1 (its trainer calls `set_epoch(epoch)` for `epoch` in
    /// `1..=epochs`) and seeds with the integer `seed + epoch` (no wrap-around).
    pub fn epoch(&self, groups: &[Vec<usize>], epoch: u64) -> Vec<Vec<usize>> {
        match self.ddp {
            None => self.single(groups, epoch),
            Some(ddp) if self.all_ranks => {
                self.chunks(groups, epoch, ddp.world_size).into_iter().map(|chunk| chunk.concat()).collect()
            }
            Some(ddp) => {
                let w = ddp.world_size;
                self.chunks(groups, epoch, w).into_iter().flatten().skip(ddp.rank).step_by(w).collect()
            }
        }
    }

    /// Number of batches [`epoch`](Self::epoch) yields, the same for every epoch and rank.
    pub fn len(&self, groups: &[Vec<usize>]) -> usize {
        let per_group = |g: &Vec<usize>| match self.tail {
            Tail::Drop => g.len() / self.batch_size(),
            Tail::Keep => g.len().div_ceil(self.batch_size()),
        };
        match self.ddp {
            None => groups.iter().map(per_group).sum(),
            Some(Ddp { world_size: w, .. }) => {
                let total: usize = groups
                    .iter()
                    .map(|g| match self.tail {
                        Tail::Drop => per_group(g) / w * w,
                        Tail::Keep => per_group(g).div_ceil(w) * w,
                    })
                    .sum();
                total / w
            }
        }
    }

    /// True when an epoch yields no batch.
    pub fn is_empty(&self, groups: &[Vec<usize>]) -> bool {
        self.len(groups) == 0
    }

    fn cut(&self, indices: impl Iterator<Item = usize>) -> Vec<Vec<usize>> {
        let indices: Vec<usize> = indices.collect();
        indices
            .chunks(self.batch_size())
            .filter(|b| self.tail == Tail::Keep || b.len() == self.batch_size())
            .map(<[usize]>::to_vec)
            .collect()
    }

    fn single(&self, groups: &[Vec<usize>], epoch: u64) -> Vec<Vec<usize>> {
        match self.order {
            Order::Sequential => groups.iter().flat_map(|g| self.cut(g.iter().copied())).collect(),
            Order::Shuffle => {
                let mut rng = PyRandom::from_u128(u128::from(self.seed) + u128::from(epoch));
                let mut batches: Vec<Vec<usize>> = Vec::new();
                for group in groups {
                    let mut indices = group.clone();
                    rng.shuffle(&mut indices);
                    batches.extend(self.cut(indices.into_iter()));
                }
                rng.shuffle(&mut batches);
                batches
            }
            Order::ShuffleTorchRandperm04116bcd => {
                // torch.Generator().manual_seed takes a 64-bit seed; Python's Random the full sum
                let mut generator = TorchGenerator::new(self.seed.wrapping_add(epoch));
                let mut batches: Vec<Vec<usize>> = groups
                    .iter()
                    .flat_map(|g| {
                        let perm = generator.randperm(g.len());
                        self.cut(perm.into_iter().map(|p| g[p]))
                    })
                    .collect();
                PyRandom::from_u128(u128::from(self.seed) + u128::from(epoch)).shuffle(&mut batches);
                batches
            }
        }
    }

    /// The epoch's chunks of `w` batches, batch `r` of each chunk going to rank `r`.
    fn chunks(&self, groups: &[Vec<usize>], epoch: u64, w: usize) -> Vec<Vec<Vec<usize>>> {
        let shuffle = self.order != Order::Sequential;
        let mut rng = PyRandom::from_u128(u128::from(self.seed) + u128::from(epoch));
        let mut chunks: Vec<Vec<Vec<usize>>> = Vec::new();
        for group in groups {
            let batches = self.cut(group.iter().copied());
            let mut group_chunks: Vec<Vec<Vec<usize>>> = batches.chunks(w).map(<[_]>::to_vec).collect();
            if group_chunks.last().is_some_and(|c| c.len() < w) {
                match self.tail {
                    Tail::Drop => {
                        group_chunks.pop();
                    }
                    Tail::Keep => {
                        let mut pool = batches.clone();
                        if shuffle {
                            rng.shuffle(&mut pool);
                        }
                        let last = group_chunks.last_mut().expect("checked non-empty above");
                        let mut cycle = pool.iter().cycle();
                        while last.len() < w {
                            last.push(cycle.next().expect("pool holds the short chunk's batches").clone());
                        }
                    }
                }
            }
            if shuffle {
                rng.shuffle(&mut group_chunks);
            }
            chunks.extend(group_chunks);
        }
        if shuffle {
            rng.shuffle(&mut chunks);
        }
        chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_group(n: usize) -> Vec<Vec<usize>> {
        vec![(0..n).collect()]
    }

    #[test]
    fn sequential_batches_in_order() {
        let s = Schedule::new(3, 0, Order::Sequential, Tail::Keep, None).unwrap();
        assert_eq!(s.epoch(&one_group(7), 1), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        let s = Schedule::new(3, 0, Order::Sequential, Tail::Drop, None).unwrap();
        assert_eq!(s.epoch(&one_group(7), 1).len(), 2);
    }

    #[test]
    fn ddp_pads_short_chunk_from_same_group() {
        let s = Schedule::new(2, 0, Order::Sequential, Tail::Keep, Some(Ddp { world_size: 2, rank: 1 })).unwrap();
        // batches [0,1] [2,3] [4]; chunks ([0,1],[2,3]) ([4], pad [0,1]); rank 1 takes [2,3], [0,1]
        assert_eq!(s.epoch(&one_group(5), 1), vec![vec![2, 3], vec![0, 1]]);
    }

    #[test]
    fn upstream_issue_example() {
        // Samudra 018a6a7, EquivalenceGroupBatchSampler(seed=15, batch 2, drop_last) at set_epoch(1)
        let s = Schedule::training(2, 15, None).unwrap();
        let got = s.epoch(&one_group(24), 1);
        assert_eq!(got.len(), 12);
        assert_eq!(got[..3], [vec![3, 4], vec![8, 5], vec![21, 19]]);
        assert_eq!(got[11], vec![7, 13]);
    }

    #[test]
    fn all_ranks_concatenates_each_ranks_batch() {
        let groups = vec![(0..23).collect(), (100..117).collect()];
        for (training, w) in [(true, 3), (false, 3), (true, 1), (false, 4)] {
            let make = |ddp| if training { Schedule::training(2, 7, ddp) } else { Schedule::validation(2, 7, ddp) };
            let ranks: Vec<_> =
                (0..w).map(|rank| make(Some(Ddp { world_size: w, rank })).unwrap().epoch(&groups, 5)).collect();
            let global = make(Some(Ddp { world_size: w, rank: 0 })).unwrap().all_ranks().unwrap();
            let got = global.epoch(&groups, 5);
            assert_eq!(got.len(), global.len(&groups));
            assert_eq!(got.len(), ranks[0].len());
            for (k, batch) in got.iter().enumerate() {
                let expected: Vec<usize> = ranks.iter().flat_map(|r| r[k].clone()).collect();
                assert_eq!(batch, &expected, "batch {k}, world {w}, training {training}");
            }
        }
        assert!(Schedule::training(2, 7, None).unwrap().all_ranks().is_err());
    }

    #[test]
    fn bad_config_rejected() {
        assert!(Schedule::training(0, 0, None).is_err());
        assert!(Schedule::training(1, 0, Some(Ddp { world_size: 0, rank: 0 })).is_err());
        assert!(Schedule::training(1, 0, Some(Ddp { world_size: 2, rank: 2 })).is_err());
        let huge = Ddp { world_size: Schedule::MAX_WORLD_SIZE + 1, rank: 0 };
        assert!(Schedule::training(1, 0, Some(huge)).is_err());
    }
}
