//! [`ShardedSource`]: a [`BatchSource`]'s planes spread over the ranks' memory (the DDStore
//! pattern), read back with one-sided `MPI_Get`s.

use std::ops::Range;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use om4_batch::{Grid, Normalization, ReadGroup, Roles};
use om4_pipeline::BatchSource;

use crate::error::{Error, Result};
use crate::layout::ShardLayout;
use crate::rma::{Get, Window};

/// Options of [`ShardedSource::new`].
#[derive(Debug, Clone, Default)]
pub struct ShardOptions {
    /// Ranks per replica group (see [`ShardLayout`]); `None` shards over every rank (one copy).
    pub width: Option<usize>,
    /// Bytes available per node instead of `/proc/meminfo`'s `MemAvailable` (for tests, or to
    /// leave room for the model).
    pub memory_available: Option<u64>,
    /// Time positions per `read_group` call while filling (default 16).
    pub fill_times: Option<usize>,
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
///
/// # Errors
/// [`Error::MemInfo`] when the file is missing or has no such line.
pub fn mem_available() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| Error::MemInfo { reason: e.to_string() })?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| Error::MemInfo { reason: "no MemAvailable line in kB".into() })
}

/// Throughput of raw `MPI_Get`s between ranks on this machine, the ceiling for a sharded source's
/// reads: every rank allocates a window of `floats` floats, then reads its successor's whole window
/// (rank `(r + 1) % size`) `repeats` times, `chunk` floats per get, one `lock_all` epoch per
/// repeat. Collective over `comm`. Returns this rank's bytes per second.
///
/// # Errors
/// [`Error::Mpi`] when a get fails; [`Error::Config`] for a zero `chunk`.
pub fn get_probe(comm: &SimpleCommunicator, floats: usize, chunk: usize, repeats: usize) -> Result<f64> {
    if chunk == 0 {
        return Err(Error::Config { reason: "the probe's chunk must be at least one float".into() });
    }
    let window = Window::allocate(comm, floats)?;
    let target = ((comm.rank() + 1) % comm.size()) as usize;
    let mut out = vec![0.0f32; floats];
    comm.barrier();
    let start = Instant::now();
    let mut result = Ok(());
    for _ in 0..repeats {
        let mut gets: Vec<Get<'_>> =
            out.chunks_mut(chunk).enumerate().map(|(i, c)| Get { out: c, target, offset: i * chunk }).collect();
        result = result.and(window.get_many(&mut gets));
    }
    let seconds = start.elapsed().as_secs_f64();
    comm.barrier();
    drop(window);
    result.map(|()| (floats * 4 * repeats) as f64 / seconds.max(1e-9))
}

/// A [`BatchSource`] whose planes live in the memory of all ranks of a communicator, each rank
/// holding the share [`ShardLayout`] gives it in an MPI-3 window; reads fetch remote blocks with
/// `MPI_Get` (one `lock_all` epoch per read group, a run of consecutive time positions on one
/// owner in one get) and copy local ones.
///
/// It describes itself exactly as the source it was built from (grid, time positions, channels,
/// roles, normalizations), and serves the same bits, so the loader, plan dedup and preparation
/// work on it unchanged.
///
/// **Collective life.** [`ShardedSource::new`] is collective over the communicator, and so is
/// dropping it (`MPI_Win_free`): every rank builds and drops its sources at the same points,
/// before MPI is finalized (the `Universe` dropped). A source dropped after finalization leaks its
/// window instead. Reads are not collective: ranks read independently.
///
/// **Threads.** The loader reads from its own thread, so MPI must be initialized with at least
/// `Threading::Serialized`; with `Serialized`, nothing else in the process may call MPI while a
/// loader over this source runs (`Threading::Multiple` lifts that). The source serializes its own
/// MPI calls.
///
/// **Failures.** A rank that fails while building (memory check, reading its share) makes every
/// rank's `new` return an error ([`Error::Peer`] on the others), with no hang. MPI errors inside
/// collectives and `MPI_Win_allocate` are fatal (Open MPI's default handler aborts the job); a
/// failed `MPI_Get` is returned. A rank that dies is handled by `mpirun`, which ends the job.
#[derive(Debug)]
pub struct ShardedSource {
    grid: Grid,
    time_len: usize,
    channels: Vec<usize>,
    roles: Roles,
    normalizations: Vec<Normalization>,
    layout: ShardLayout,
    rank: usize,
    window: Window,
    fill_time: Duration,
}

/// Agrees on a collective step: when any rank failed, every rank returns an error (its own, or
/// [`Error::Peer`] naming the lowest failing rank).
fn agree<T>(comm: &SimpleCommunicator, stage: &'static str, local: Result<T>) -> Result<T> {
    let size = comm.size();
    let mine = if local.is_err() { comm.rank() } else { size };
    let mut lowest = size;
    comm.all_reduce_into(&mine, &mut lowest, SystemOperation::min());
    match local {
        Ok(_) if lowest < size => Err(Error::Peer { rank: lowest, stage }),
        other => other,
    }
}

/// A fingerprint of what every rank's source must agree on.
fn fingerprint(values: &[u64]) -> u64 {
    values.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &v| (h ^ v).wrapping_mul(0x0000_0100_0000_01b3))
}

impl ShardedSource {
    /// Builds the store collectively over `comm` from each rank's `source` (which must describe
    /// the same data on every rank): checks that the shares of the ranks on each node fit in its
    /// available memory, allocates this rank's window, and reads this rank's share into it with
    /// `source.read_group`.
    ///
    /// # Errors
    /// [`Error::Threading`] below `MPI_THREAD_SERIALIZED`; [`Error::Config`] for a bad width or
    /// sources that differ between ranks; [`Error::OutOfMemory`] naming the bytes needed and
    /// available; [`Error::Source`] when this rank's reads fail; [`Error::Peer`] when another rank
    /// failed; [`Error::Mpi`] when an MPI call returns an error.
    pub fn new<S: BatchSource + ?Sized>(comm: &SimpleCommunicator, source: &S, options: &ShardOptions) -> Result<Self> {
        let provided = mpi::environment::threading_support();
        if provided < mpi::environment::Threading::Serialized {
            return Err(Error::Threading { provided: format!("{provided:?}") });
        }
        let comm = comm.duplicate();
        let (rank, ranks) = (comm.rank() as usize, comm.size() as usize);
        let (grid, time_len, channels) = (source.grid(), source.time_len(), source.channels());
        let set_floats: Vec<usize> = channels.iter().map(|c| c * grid.plane()).collect();

        let mut described = vec![time_len as u64, grid.y as u64, grid.x as u64];
        described.extend(channels.iter().map(|&c| c as u64));
        let mine = fingerprint(&described);
        let (mut low, mut high) = (0u64, 0u64);
        comm.all_reduce_into(&mine, &mut low, SystemOperation::min());
        comm.all_reduce_into(&mine, &mut high, SystemOperation::max());
        if low != high {
            return Err(Error::Config {
                reason: "the ranks' sources differ in time positions, grid or channels".into(),
            });
        }
        let layout = ShardLayout::new(ranks, options.width.unwrap_or(ranks), time_len, set_floats)?;
        let floats = layout.floats_of(rank);

        // Memory: the shares of all ranks on this node against its available memory.
        let node = comm.split_shared(comm.rank());
        let bytes = (floats as u64) * 4;
        let mut needed = 0u64;
        node.all_reduce_into(&bytes, &mut needed, SystemOperation::sum());
        let available = match options.memory_available {
            Some(a) => Ok(a),
            None => mem_available(),
        };
        let checked = available.and_then(|available| {
            if needed > available {
                Err(Error::OutOfMemory { needed, available, ranks: node.size() as usize })
            } else {
                Ok(())
            }
        });
        drop(node);
        agree(&comm, "checking memory", checked)?;

        let mut window = Window::allocate(&comm, floats)?;
        let start = Instant::now();
        let times = layout.times_of(rank);
        let step = options.fill_times.unwrap_or(16).max(1);
        let filled = window
            .fill(|memory| fill(source, &channels, grid, times, step, memory))
            .and_then(|r| r.map_err(Error::from));
        let fill_time = start.elapsed();
        agree(&comm, "reading its share", filled)?;

        Ok(Self {
            grid,
            time_len,
            channels,
            roles: source.roles(),
            normalizations: source.normalizations().to_vec(),
            layout,
            rank,
            window,
            fill_time,
        })
    }

    /// The ownership rule in force.
    pub fn layout(&self) -> &ShardLayout {
        &self.layout
    }

    /// Time positions this rank holds.
    pub fn local_times(&self) -> Range<usize> {
        self.layout.times_of(self.rank)
    }

    /// Bytes of this rank's window.
    pub fn local_bytes(&self) -> u64 {
        self.window.local().len() as u64 * 4
    }

    /// How long reading this rank's share took.
    pub fn fill_time(&self) -> Duration {
        self.fill_time
    }
}

/// Reads `times` of every set into `memory` (laid out as [`ShardLayout`] says), `step` positions
/// per read.
fn fill<S: BatchSource + ?Sized>(
    source: &S,
    channels: &[usize],
    grid: Grid,
    times: Range<usize>,
    step: usize,
    memory: &mut [f32],
) -> om4_pipeline::Result<()> {
    let mut rest = memory;
    for (set, &c) in channels.iter().enumerate() {
        let block = c * grid.plane();
        let mut t = times.start;
        while t < times.end {
            let n = step.min(times.end - t);
            let (out, tail) = std::mem::take(&mut rest).split_at_mut(n * block);
            source.read_group(&ReadGroup { source: set, times: (t..t + n).collect(), channels: c }, out)?;
            rest = tail;
            t += n;
        }
    }
    Ok(())
}

impl BatchSource for ShardedSource {
    fn grid(&self) -> Grid {
        self.grid
    }
    fn time_len(&self) -> usize {
        self.time_len
    }
    fn channels(&self) -> Vec<usize> {
        self.channels.clone()
    }
    fn roles(&self) -> Roles {
        self.roles
    }
    fn normalizations(&self) -> &[Normalization] {
        &self.normalizations
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        let Some(&channels) = self.channels.get(group.source) else {
            return Err(om4_pipeline::Error::Config {
                field: "group.source",
                reason: format!("no variable set {}", group.source),
            });
        };
        let block = channels * self.grid.plane();
        let want = group.times.len() * block;
        if group.channels != channels || out.len() != want {
            return Err(om4_pipeline::Error::Plan(om4_batch::Error::BufferLength {
                what: format!("sharded source group of variable set {} ({} channels)", group.source, group.channels),
                expected: want,
                found: out.len(),
            }));
        }
        if let Some(&time) = group.times.iter().find(|&&t| t >= self.time_len) {
            return Err(om4_pipeline::Error::TimeOutOfRange { time, len: self.time_len });
        }
        if block == 0 {
            return Ok(());
        }
        // Runs of consecutive time positions on one owner: one copy or one get each.
        let local = self.window.local();
        let mut gets = Vec::new();
        let mut rest = out;
        let mut i = 0;
        while i < group.times.len() {
            let (first, owner) = (group.times[i], self.layout.owner(self.rank, group.times[i]));
            let mut n = 1;
            while i + n < group.times.len()
                && group.times[i + n] == first + n
                && self.layout.times_of(owner).contains(&(first + n))
            {
                n += 1;
            }
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(n * block);
            rest = tail;
            let offset = self.layout.offset(owner, group.source, first);
            if owner == self.rank {
                dst.copy_from_slice(&local[offset..offset + n * block]);
            } else {
                gets.push(Get { out: dst, target: owner, offset });
            }
            i += n;
        }
        if gets.is_empty() {
            return Ok(());
        }
        self.window
            .get_many(&mut gets)
            .map_err(|e| om4_pipeline::Error::Config { field: "sharded source (MPI_Get)", reason: e.to_string() })
    }
}
