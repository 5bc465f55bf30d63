//! What the loader reads from: the [`BatchSource`] trait every data source implements.

use om4_batch::{BatchPlan, Grid, Normalization, ReadGroup, ReadPool, Roles};

use crate::error::{Error, Result};

/// Where a batch's planes come from: a time selection of some variables, their normalization,
/// and reads of `(times, channels)` blocks into caller buffers.
///
/// A new data source (another storage, a cache, planes spread over processes) implements this
/// trait and passes the conformance suite in `crates/om4-pipeline/tests/conformance.rs`; the
/// loader, plane dedup, preparation and every framework adapter then work with it unchanged.
/// om4-store's `Om4Source` reads an OM4 Zarr store; [`MemorySource`](crate::MemorySource) holds
/// planes in memory; om4-mpi's `ShardedSource` spreads them over the ranks of an MPI job.
pub trait BatchSource: Send + Sync + 'static {
    /// Plane size.
    fn grid(&self) -> Grid;
    /// Time positions in the selection.
    fn time_len(&self) -> usize;
    /// Channels of each variable set (the `source` ids of [`ReadGroup`]s: prognostic 0,
    /// boundary 1 in Samudra's layout, [`Roles::samudra`]).
    fn channels(&self) -> Vec<usize>;
    /// Which variable set feeds which role of the model batch.
    fn roles(&self) -> Roles;
    /// Normalization (statistics, mask, order, fill) of each variable set.
    fn normalizations(&self) -> &[Normalization];
    /// Fills `out`, laid out `(group.times, channels, y, x)`, with the group's raw planes.
    ///
    /// # Errors
    /// Whatever the read reports, with the plane or chunk it concerns. `out` may then be partly
    /// written: the loader drops such a buffer and ends the epoch with the error.
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> Result<()>;
    /// The pool the reads fan out on, if any: host-side batch preparation runs there too, so that
    /// reading and preparing share one set of threads instead of competing.
    fn read_pool(&self) -> Option<&ReadPool> {
        None
    }
    /// Batch reads a loader keeps in flight at once unless its configuration says
    /// ([`LoaderConfig::reads_in_flight`](crate::LoaderConfig::reads_in_flight)): 1; a source whose
    /// reads wait on round trips (a store on object storage) asks for more.
    fn batch_reads_in_flight(&self) -> usize {
        1
    }
}

/// Reads every group of `plan` from `source`, each into a buffer of the group's size from
/// `alloc(len)`. The groups (a Samudra batch has two: prognostic and boundary planes) are read at
/// once, the first on the calling thread and each other on a scoped thread of its own, so that the
/// round trips of a remote store's reads overlap instead of adding up. On error the buffers are
/// dropped (pooled ones go back to their pool) once every group's read has returned, and the
/// error is the first group's in plan order that failed.
///
/// # Errors
/// Whatever [`BatchSource::read_group`] reports, or [`Error::Spawn`] when a group's thread cannot
/// start.
pub fn read_groups<S: BatchSource + ?Sized, B: AsMut<[f32]> + Send>(
    source: &S,
    plan: &BatchPlan,
    mut alloc: impl FnMut(usize) -> B,
) -> Result<Vec<B>> {
    read_listed(source, plan.groups(), |_, len| alloc(len))
}

/// [`read_groups`] for any list of groups, each buffer from `alloc(group index, len)`; a group
/// without times is not read.
pub(crate) fn read_listed<S: BatchSource + ?Sized, B: AsMut<[f32]> + Send>(
    source: &S,
    groups: &[ReadGroup],
    mut alloc: impl FnMut(usize, usize) -> B,
) -> Result<Vec<B>> {
    let plane = source.grid().plane();
    let read =
        |g: &ReadGroup, buf: &mut B| if g.times.is_empty() { Ok(()) } else { source.read_group(g, buf.as_mut()) };
    let mut bufs: Vec<B> = groups.iter().enumerate().map(|(i, g)| alloc(i, g.planes() * plane)).collect();
    let results: Vec<Result<()>> = match bufs.split_first_mut() {
        None => Vec::new(),
        Some((first, [])) => vec![read(&groups[0], first)],
        Some((first, rest)) => std::thread::scope(|scope| {
            // A thread that cannot start is that group's error (the others still run to the end).
            let others: Vec<_> = groups[1..]
                .iter()
                .zip(rest)
                .map(|(g, buf)| {
                    std::thread::Builder::new()
                        .name("om4-group-read".into())
                        .spawn_scoped(scope, move || read(g, buf))
                        .map_err(|source| Error::Spawn { thread: "group read", source })
                })
                .collect();
            let mut results = vec![read(&groups[0], first)];
            results.extend(
                others
                    .into_iter()
                    .map(|h| h.and_then(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))),
            );
            results
        }),
    };
    results.into_iter().collect::<Result<()>>()?;
    Ok(bufs)
}
