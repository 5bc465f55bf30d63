//! A training split resident on the device: after a plane is first read and uploaded, later
//! batches gather it from the device copy, so an epoch after the first reads nothing from storage
//! and copies nothing to the device.
//!
//! [`Loader::resident`](crate::Loader::resident) turns it on (with a memory budget the whole split
//! must fit). Each epoch then plans, in schedule order, which planes every batch is the first to
//! need and the device copy lacks; the producer reads only those, and the batch comes out as
//! [`HostBatch::Resident`](crate::HostBatch::Resident). The consumer (om4-burn's `OnDevice`, the
//! torch front end) writes them into its copy and then [`Residency::mark`]s them: what is marked
//! is exactly what the copy holds, so a consumer that stops early, or fails, costs later epochs a
//! re-read, never a wrong plane.

use std::sync::{Mutex, PoisonError};

use crate::buffers::PooledBuf;

/// Which planes of each variable set a consumer's device copy holds. Shared by the loader (which
/// reads only the others) and the consumer (which marks what it has written).
#[derive(Debug)]
pub struct Residency {
    held: Mutex<Vec<Vec<bool>>>,
    channels: Vec<usize>,
    times: usize,
    plane: usize,
}

impl Residency {
    pub(crate) fn new(channels: Vec<usize>, times: usize, plane: usize) -> Self {
        Self { held: Mutex::new(channels.iter().map(|_| vec![false; times]).collect()), channels, times, plane }
    }

    /// Bytes of the whole split on the device: every time of every variable set, float32.
    pub fn split_bytes(&self) -> u64 {
        (self.channels.iter().sum::<usize>() * self.times * self.plane * 4) as u64
    }

    /// Time positions of the split.
    pub fn times(&self) -> usize {
        self.times
    }

    /// Channels of each variable set.
    pub fn channels(&self) -> &[usize] {
        &self.channels
    }

    /// Records that the device copy now holds `times` of variable set `source` (all channels).
    ///
    /// # Panics
    /// When `source` or a time is out of range: the consumer marked what no batch handed it.
    pub fn mark(&self, source: usize, times: &[usize]) {
        let mut held = self.lock();
        for &t in times {
            held[source][t] = true;
        }
    }

    /// Bytes the device copy holds.
    pub fn held_bytes(&self) -> u64 {
        let held = self.lock();
        held.iter()
            .zip(&self.channels)
            .map(|(s, &c)| (s.iter().filter(|&&h| h).count() * c * self.plane * 4) as u64)
            .sum()
    }

    /// Forgets every plane: a new device copy starts empty.
    pub fn clear(&self) {
        for s in self.lock().iter_mut() {
            s.fill(false);
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<Vec<bool>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<bool>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The planes of one read group that the device copy lacks, as read.
#[derive(Debug)]
pub struct FreshPlanes {
    /// Time positions, a sorted subset of the group's (possibly empty).
    pub times: Vec<usize>,
    /// Raw planes, `(times, channels, y, x)`.
    pub planes: PooledBuf,
}
