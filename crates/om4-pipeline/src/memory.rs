//! Planes held in memory as a [`BatchSource`]: for tests and examples, for splits small enough
//! to cache whole, and as the reference every other source is compared with.

use om4_batch::{Grid, Normalization, ReadGroup, Roles};

use crate::error::{Error, Result};
use crate::source::BatchSource;

/// Every plane of each variable set, laid out `(time, channel, y, x)`, with its normalization.
#[derive(Debug, Clone)]
pub struct MemorySource {
    grid: Grid,
    time_len: usize,
    roles: Roles,
    planes: Vec<Vec<f32>>,
    normalizations: Vec<Normalization>,
}

impl MemorySource {
    /// A source of `time_len` time positions over `grid`, with one `(planes, normalization)`
    /// pair per variable set (`planes` laid out `(time, channel, y, x)`).
    ///
    /// # Errors
    /// [`Error::Config`] when a set's planes do not hold `time_len × channels` planes of `grid`,
    /// a normalization's mask is of another grid, or `roles` names a set that is not given.
    pub fn new(grid: Grid, time_len: usize, roles: Roles, sets: Vec<(Vec<f32>, Normalization)>) -> Result<Self> {
        let config = |reason: String| Error::Config { field: "memory source", reason };
        for (i, (planes, norm)) in sets.iter().enumerate() {
            let want = time_len.checked_mul(norm.channels()).and_then(|n| n.checked_mul(grid.plane()));
            if want != Some(planes.len()) {
                return Err(config(format!(
                    "variable set {i}: {} values for {time_len} times × {} channels of {}×{}",
                    planes.len(),
                    norm.channels(),
                    grid.y,
                    grid.x
                )));
            }
            if norm.mask().plane() != grid.plane() {
                return Err(config(format!("variable set {i}: its mask is not of the {}×{} grid", grid.y, grid.x)));
            }
        }
        let named = [Some(roles.input), Some(roles.label), roles.boundary];
        if let Some(missing) = named.into_iter().flatten().find(|&s| s >= sets.len()) {
            return Err(config(format!("the roles name variable set {missing}, but {} are given", sets.len())));
        }
        let (planes, normalizations) = sets.into_iter().unzip();
        Ok(Self { grid, time_len, roles, planes, normalizations })
    }

    /// Reads every plane of `source` into memory, one time position at a time.
    ///
    /// # Errors
    /// Whatever the source's reads report.
    pub fn load<S: BatchSource + ?Sized>(source: &S) -> Result<Self> {
        let (grid, time_len) = (source.grid(), source.time_len());
        let sets = source
            .channels()
            .into_iter()
            .zip(source.normalizations())
            .enumerate()
            .map(|(set, (channels, norm))| {
                let block = channels * grid.plane();
                let mut planes = vec![0.0; time_len * block];
                for (t, out) in planes.chunks_exact_mut(block.max(1)).enumerate() {
                    source.read_group(&ReadGroup { source: set, times: vec![t], channels }, out)?;
                }
                Ok((planes, norm.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(grid, time_len, source.roles(), sets)
    }
}

impl BatchSource for MemorySource {
    fn grid(&self) -> Grid {
        self.grid
    }
    fn time_len(&self) -> usize {
        self.time_len
    }
    fn channels(&self) -> Vec<usize> {
        self.normalizations.iter().map(Normalization::channels).collect()
    }
    fn roles(&self) -> Roles {
        self.roles
    }
    fn normalizations(&self) -> &[Normalization] {
        &self.normalizations
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> Result<()> {
        let (planes, norm) = match (self.planes.get(group.source), self.normalizations.get(group.source)) {
            (Some(p), Some(n)) => (p, n),
            _ => {
                return Err(Error::Config {
                    field: "group.source",
                    reason: format!("no variable set {}", group.source),
                });
            }
        };
        let block = norm.channels() * self.grid.plane();
        let want = group.times.len() * block;
        if group.channels != norm.channels() || out.len() != want {
            return Err(Error::Plan(om4_batch::Error::BufferLength {
                what: format!("memory source group of variable set {} ({} channels)", group.source, group.channels),
                expected: want,
                found: out.len(),
            }));
        }
        for (&t, dst) in group.times.iter().zip(out.chunks_exact_mut(block.max(1))) {
            if t >= self.time_len {
                return Err(Error::TimeOutOfRange { time: t, len: self.time_len });
            }
            dst.copy_from_slice(&planes[t * block..(t + 1) * block]);
        }
        Ok(())
    }
}
