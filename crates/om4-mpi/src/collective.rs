//! Collective operations across the processes of a data-parallel run, without a framework.
//!
//! A trainer averages its gradients, loss statistics and validation sums through a
//! [`Collective`]; [`SingleProcess`] is the one-process world, [`ThreadGroup`] ranks that are
//! threads of one process, and `MpiCollective` (feature `mpi`) the ranks of an MPI job.
//! The operations work on host slices so that any framework (and any transport) can take part.

use crate::error::Result;

/// How values are combined element by element across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

/// The ranks of a data-parallel run and the reductions they share. Every rank calls each
/// operation in the same order with slices of the same length; afterwards every rank holds the
/// same values (the implementation's contract, which om4-mpi's tests check bit for bit).
pub trait Collective: Send + Sync + std::fmt::Debug {
    /// This process's rank, `0..world_size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// Combines `values` with `op` across all ranks, in place.
    ///
    /// # Errors
    /// [`crate::Error::Collective`] when the transport fails.
    fn all_reduce_f32(&self, values: &mut [f32], op: ReduceOp) -> Result<()>;
    /// As [`all_reduce_f32`](Self::all_reduce_f32), for `f64` (loss sums and counts).
    ///
    /// # Errors
    /// As [`all_reduce_f32`](Self::all_reduce_f32).
    fn all_reduce_f64(&self, values: &mut [f64], op: ReduceOp) -> Result<()>;
}

/// The world of one process: every reduction leaves its values as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl Collective for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_reduce_f32(&self, _values: &mut [f32], _op: ReduceOp) -> Result<()> {
        Ok(())
    }
    fn all_reduce_f64(&self, _values: &mut [f64], _op: ReduceOp) -> Result<()> {
        Ok(())
    }
}

/// Ranks that are threads of one process: [`ThreadGroup::new`] hands out one [`ThreadRank`] per
/// rank, each to be moved into its own thread. Every reduction combines the ranks' values in rank
/// order, so every rank gets the same bits. For testing data-parallel code without MPI: a rank
/// left waiting more than [`ThreadGroup::TIMEOUT`] for the others (one of them failed, or calls
/// a different sequence of reductions) gets an error instead of hanging.
#[derive(Debug)]
pub struct ThreadGroup;

/// One rank of a [`ThreadGroup`].
#[derive(Debug)]
pub struct ThreadRank {
    rank: usize,
    shared: std::sync::Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    size: usize,
    state: std::sync::Mutex<Round>,
    changed: std::sync::Condvar,
}

/// One reduction in progress: the ranks' deposits, and how many have read the result.
#[derive(Debug, Default)]
struct Round {
    slots: Vec<Option<Vec<f64>>>,
    deposited: usize,
    read: usize,
    /// Incremented when every rank has read a round's result and the slots are free again.
    generation: u64,
}

impl ThreadGroup {
    /// How long a rank waits for the others in one reduction.
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

    /// The `size` ranks of a new group.
    ///
    /// # Errors
    /// [`crate::Error::WorldSize`] for a group of no ranks.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(size: usize) -> Result<Vec<ThreadRank>> {
        if size == 0 {
            return Err(crate::Error::WorldSize { size });
        }
        let round = Round { slots: vec![None; size], ..Round::default() };
        let shared = std::sync::Arc::new(Shared {
            size,
            state: std::sync::Mutex::new(round),
            changed: std::sync::Condvar::new(),
        });
        Ok((0..size).map(|rank| ThreadRank { rank, shared: std::sync::Arc::clone(&shared) }).collect())
    }
}

impl ThreadRank {
    /// Every rank's values in rank order, once all ranks have deposited theirs. (f32 values
    /// travel as f64, which holds them exactly.)
    fn wait<'a>(
        &self,
        guard: std::sync::MutexGuard<'a, Round>,
        deadline: std::time::Instant,
        what: &str,
    ) -> Result<std::sync::MutexGuard<'a, Round>> {
        let error = |reason: String| crate::Error::Collective { call: "thread all-reduce", reason };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (guard, timeout) =
            self.shared.changed.wait_timeout(guard, left).map_err(|_| error("a rank panicked".into()))?;
        if timeout.timed_out() {
            return Err(error(format!(
                "rank {} waited {:?} for the other ranks to {what}",
                self.rank,
                ThreadGroup::TIMEOUT
            )));
        }
        Ok(guard)
    }

    fn exchange(&self, mine: Vec<f64>) -> Result<Vec<Vec<f64>>> {
        let error = |reason: String| crate::Error::Collective { call: "thread all-reduce", reason };
        let shared = &*self.shared;
        let deadline = std::time::Instant::now() + ThreadGroup::TIMEOUT;
        let mut round = shared.state.lock().map_err(|_| error("a rank panicked".into()))?;
        // The previous round's result must be read by everyone before its slots are reused.
        while round.slots[self.rank].is_some() || round.read > 0 {
            round = self.wait(round, deadline, "read the previous result")?;
        }
        round.slots[self.rank] = Some(mine);
        round.deposited += 1;
        let generation = round.generation;
        shared.changed.notify_all();
        while round.deposited < shared.size && round.generation == generation {
            round = self.wait(round, deadline, "arrive")?;
        }
        let all: Vec<Vec<f64>> = round.slots.iter().map(|s| s.clone().unwrap_or_default()).collect();
        round.read += 1;
        if round.read == shared.size {
            round.slots.iter_mut().for_each(|s| *s = None);
            round.deposited = 0;
            round.read = 0;
            round.generation += 1;
            shared.changed.notify_all();
        }
        drop(round);
        if all.iter().any(|v| v.len() != all[0].len()) {
            return Err(error(format!("ranks passed {:?} values", all.iter().map(Vec::len).collect::<Vec<_>>())));
        }
        Ok(all)
    }
}

fn combine<T: Copy + PartialOrd + std::ops::Add<Output = T>>(a: T, b: T, op: ReduceOp) -> T {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => {
            if b > a {
                b
            } else {
                a
            }
        }
        ReduceOp::Min => {
            if b < a {
                b
            } else {
                a
            }
        }
    }
}

impl Collective for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.shared.size
    }
    fn all_reduce_f32(&self, values: &mut [f32], op: ReduceOp) -> Result<()> {
        let all = self.exchange(values.iter().map(|&v| f64::from(v)).collect())?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = all.iter().map(|r| r[i] as f32).reduce(|a, b| combine(a, b, op)).unwrap_or(*v);
        }
        Ok(())
    }
    fn all_reduce_f64(&self, values: &mut [f64], op: ReduceOp) -> Result<()> {
        let all = self.exchange(values.to_vec())?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = all.iter().map(|r| r[i]).reduce(|a, b| combine(a, b, op)).unwrap_or(*v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ranks_all_get_the_same_reduction() {
        let ranks = ThreadGroup::new(3).unwrap();
        let results: Vec<(Vec<f32>, Vec<f64>, Vec<f32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .iter()
                .map(|r| {
                    s.spawn(move || {
                        let k = r.rank() as f32;
                        let mut sum = vec![0.1 + k, -k, 1e-8 * k];
                        r.all_reduce_f32(&mut sum, ReduceOp::Sum).unwrap();
                        let mut sum64 = vec![f64::from(k) * 0.5];
                        r.all_reduce_f64(&mut sum64, ReduceOp::Sum).unwrap();
                        let mut max = vec![k, -k];
                        r.all_reduce_f32(&mut max, ReduceOp::Max).unwrap();
                        (sum, sum64, max)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let expected_sum: Vec<f32> = vec![(0.1f32 + 1.1) + 2.1, 0.0 - 1.0 - 2.0, (0.0f32 + 1e-8) + 2e-8];
        for (sum, sum64, max) in &results {
            assert_eq!(sum, &expected_sum);
            assert_eq!(sum64, &vec![1.5]);
            assert_eq!(max, &vec![2.0, 0.0]);
        }
        assert!(ThreadGroup::new(0).is_err());
    }

    #[test]
    fn many_rounds_in_a_row_stay_in_step() {
        let ranks = ThreadGroup::new(4).unwrap();
        std::thread::scope(|s| {
            for r in &ranks {
                s.spawn(move || {
                    for round in 0..200 {
                        let mut v = vec![(r.rank() * 1000 + round) as f64];
                        r.all_reduce_f64(&mut v, ReduceOp::Max).unwrap();
                        assert_eq!(v, vec![(3000 + round) as f64], "round {round}");
                    }
                });
            }
        });
    }

    #[test]
    fn single_process_leaves_values() {
        let mut v = vec![1.5f32, -2.0];
        SingleProcess.all_reduce_f32(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, vec![1.5, -2.0]);
        assert_eq!((SingleProcess.rank(), SingleProcess.world_size()), (0, 1));
    }
}
