//! One epoch's batches as the consumer receives them: in schedule order from the producers' lanes,
//! through the second stage (host preparation when asked for, then the adapter's `finish`), with
//! every thread joined and every buffer back in its pool when the epoch ends or is dropped.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;
use om4_batch::{Grid, Normalization};

use crate::buffers::BufferPool;
use crate::error::{Error, Result};
use crate::loader::{FinishFn, HostBatch, Loaded, ReadBatch};
use crate::prepare::prepare_on_host;
use crate::resident::FreshPlanes;
use crate::telemetry::BatchTelemetry;

/// The producers' channels, received from in schedule order: the n-th batch from lane n mod
/// lanes. `None` once the lane due next has ended (exhausted, failed, or gone).
pub(crate) struct InOrder {
    pub(crate) lanes: Vec<Receiver<(usize, Result<ReadBatch>)>>,
    pub(crate) next: usize,
}

impl InOrder {
    /// Whether the batch due next has been read, so `recv` returns at once.
    fn is_ready(&self) -> bool {
        !self.lanes[self.next % self.lanes.len()].is_empty()
    }

    pub(crate) fn recv(&mut self) -> Option<(usize, Result<ReadBatch>)> {
        let rx = &self.lanes[self.next % self.lanes.len()];
        self.next += 1;
        rx.recv().ok()
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The second stage: host preparation when asked for, then the adapter's `finish`.
pub(crate) struct Stage<T, E> {
    pub(crate) finish: FinishFn<T, E>,
    pub(crate) on_host: Option<Arc<Vec<Normalization>>>,
    pub(crate) grid: Grid,
    pub(crate) pool: Option<om4_batch::ReadPool>,
    pub(crate) outputs: BufferPool,
    /// Values of every host-path step buffer: the epoch's largest.
    pub(crate) output_capacity: usize,
}

impl<T, E: From<Error>> Stage<T, E> {
    /// Finishes batch `k`; a panic becomes an error naming it.
    pub(crate) fn run(&self, k: usize, read: ReadBatch) -> Result<Loaded<T>, E> {
        catch_unwind(AssertUnwindSafe(|| self.finish_batch(read)))
            .map_err(|panic| Error::ProducerPanic { batch: k, message: panic_message(&*panic) }.into())
            .flatten()
    }

    fn finish_batch(&self, read: ReadBatch) -> Result<Loaded<T>, E> {
        let _span = tracing::debug_span!("om4_batch_prepare", on_host = self.on_host.is_some()).entered();
        let t0 = Instant::now();
        let ReadBatch { samples, plan, groups, fresh, telemetry } = read;
        let host = match (&self.on_host, fresh) {
            (_, Some((times, residency))) => HostBatch::Resident {
                plan,
                fresh: times.into_iter().zip(groups).map(|(times, planes)| FreshPlanes { times, planes }).collect(),
                residency,
            },
            (Some(norms), None) => HostBatch::Prepared(prepare_on_host(
                &plan,
                groups,
                norms,
                self.grid,
                self.pool.as_ref(),
                &self.outputs,
                self.output_capacity,
            )?),
            (None, None) => HostBatch::Raw { plan, groups },
        };
        let batch = (self.finish)(host)?;
        Ok(Loaded { samples, batch, telemetry: BatchTelemetry { prepare: t0.elapsed(), ..telemetry } })
    }
}

/// Where an epoch's batches come from: the second-stage thread, the producer thread (the
/// consumer's thread finishes them), or (prefetch 0) the consumer's own thread alone.
pub(crate) enum Feed<T, E> {
    Finished(Receiver<Result<Loaded<T>, E>>),
    Read(InOrder, Stage<T, E>),
    Inline(Box<dyn FnMut() -> Option<Result<Loaded<T>, E>> + Send>),
    Closed,
}

/// The batches of one epoch, in schedule order, or the error that ends it: `E` is the framework's
/// ([`Finish::Error`](crate::Finish::Error)), the loader's own errors converted into it. Dropping
/// it stops the threads and returns every buffer to its pool.
pub struct Epoch<T, E = Error> {
    pub(crate) feed: Feed<T, E>,
    pub(crate) threads: Vec<JoinHandle<()>>,
    /// Batch number (in the epoch) of the first batch yielded.
    pub(crate) first: usize,
    pub(crate) total: usize,
    pub(crate) remaining: usize,
    pub(crate) finished: bool,
}

impl<T, E> std::fmt::Debug for Epoch<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch").field("remaining", &self.remaining).finish_non_exhaustive()
    }
}

impl<T, E> Epoch<T, E> {
    /// Batches not yet yielded.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Whether [`next`](Iterator::next) would return without waiting for a read: the next batch
    /// has been read ahead (it may still be prepared on the calling thread), or the epoch has ended
    /// (one whose threads ended unseen says false: `next` then returns at once all the same).
    /// A consumer that copies ahead (om4's torch front end) asks before taking batch N+1, so that
    /// a slow read never holds back batch N. Always false with no read-ahead (`prefetch 0`).
    pub fn is_ready(&self) -> bool {
        match &self.feed {
            _ if self.finished => true,
            Feed::Finished(rx) => !rx.is_empty(),
            Feed::Read(rx, _) => rx.is_ready(),
            Feed::Inline(_) => false,
            Feed::Closed => true,
        }
    }
}

impl<T, E: From<Error>> Iterator for Epoch<T, E> {
    type Item = Result<Loaded<T>, E>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let t0 = Instant::now();
        // The consumer waits for the batch, and also while its own thread finishes it.
        let received = match &mut self.feed {
            Feed::Finished(rx) => rx.recv().ok(),
            Feed::Read(rx, stage) => rx.recv().map(|(k, read)| read.map_err(E::from).and_then(|r| stage.run(k, r))),
            Feed::Inline(produce) => produce(),
            Feed::Closed => None,
        };
        match received {
            Some(Ok(mut b)) => {
                self.remaining -= 1;
                b.telemetry.wait = t0.elapsed();
                Some(Ok(b))
            }
            Some(Err(e)) => {
                self.finished = true;
                Some(Err(e))
            }
            None => {
                self.finished = true;
                // A thread that ends before the schedule does, without an error, must not look
                // like a short epoch.
                (self.remaining > 0).then(|| {
                    Err(Error::ProducerPanic {
                        batch: self.first + self.total - self.remaining,
                        message: "a loader thread ended before the epoch did".into(),
                    }
                    .into())
                })
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

impl<T, E> Drop for Epoch<T, E> {
    fn drop(&mut self) {
        // Disconnect first so blocked senders return, then join: no thread outlives the iterator.
        self.feed = Feed::Closed;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
