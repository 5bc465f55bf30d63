//! Batch plans: which unique planes to read for a batch, and where every use of them comes from.
//!
//! A batch touches each `(time, channel)` plane of a source once, however many samples, rollout
//! steps and roles (input, label) use it. The plan lists, per read group (one per source), the
//! sorted unique time positions, i.e. exactly the `(unique_time, channel, y, x)` buffer that
//! om4-store fills, and for every `(sample, step, role, state slot)` the row of that buffer.

use crate::error::{Error, Result};
use crate::space::Sample;

/// Which source (a store and its channel list) feeds each role of the model batch.
///
/// Roles naming the same source share one read group, so an input plane that is also a label is
/// read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Roles {
    /// Source of the prognostic input states.
    pub input: usize,
    /// Source of the labels (usually the input's).
    pub label: usize,
    /// Source of the boundary forcing, if the model takes any.
    pub boundary: Option<usize>,
}

impl Roles {
    /// Samudra's prognostic variable set (its first): the input and the label.
    pub const PROGNOSTIC: usize = 0;
    /// Samudra's boundary-forcing variable set (its second).
    pub const BOUNDARY: usize = 1;

    /// Samudra's roles: the prognostic set for input and label, the boundary set for forcing.
    pub fn samudra() -> Self {
        Self { input: Self::PROGNOSTIC, label: Self::PROGNOSTIC, boundary: Some(Self::BOUNDARY) }
    }

    /// Samudra's roles without boundary forcing.
    pub fn prognostic_only() -> Self {
        Self { boundary: None, ..Self::samudra() }
    }
}

/// The role of a gathered block of planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Prognostic input states.
    Input,
    /// Prognostic target states.
    Label,
    /// Boundary forcing at the input times.
    Boundary,
}

/// The unique planes of one source that a batch needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadGroup {
    /// The source id (index into the channel counts given to [`BatchPlan::new`]).
    pub source: usize,
    /// Sorted unique time positions (positions in the source's time selection).
    pub times: Vec<usize>,
    /// Number of channels of the source.
    pub channels: usize,
}

impl ReadGroup {
    /// Planes in the group buffer: `times × channels`.
    pub fn planes(&self) -> usize {
        self.times.len() * self.channels
    }
}

/// For one role, the group it reads and one row per `(sample, step, slot)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRows {
    /// Index into [`BatchPlan::groups`].
    pub group: usize,
    /// Row of the group buffer, indexed `(sample · steps + step) · states + slot`.
    pub rows: Vec<usize>,
}

/// Planes a batch asks for against planes it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlaneCount {
    /// Planes used, counting every use.
    pub requested: usize,
    /// Unique planes read.
    pub unique: usize,
}

/// The read plan and gather maps of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    batch: usize,
    history: usize,
    steps: usize,
    groups: Vec<ReadGroup>,
    input: RoleRows,
    label: RoleRows,
    boundary: Option<RoleRows>,
}

impl BatchPlan {
    /// Plans one batch. `channels[s]` is the channel count of source `s`.
    ///
    /// # Errors
    /// [`Error::MixedBatch`] when samples differ in history or rollout steps, or the batch is empty;
    /// [`Error::InvalidConfig`] when a role names a source without a channel count.
    pub fn new(samples: &[Sample], roles: &Roles, channels: &[usize]) -> Result<Self> {
        let first = samples.first().ok_or_else(|| Error::MixedBatch { reason: "the batch is empty".into() })?;
        let (history, steps) = (first.spec.history(), first.spec.steps());
        if let Some(s) = samples.iter().find(|s| s.spec.history() != history || s.spec.steps() != steps) {
            return Err(Error::MixedBatch {
                reason: format!(
                    "history {} and steps {} against history {} and steps {}",
                    s.spec.history(),
                    s.spec.steps(),
                    history,
                    steps
                ),
            });
        }
        let used: Vec<usize> = [Some(roles.input), Some(roles.label), roles.boundary].into_iter().flatten().collect();
        if let Some(&bad) = used.iter().find(|&&s| s >= channels.len()) {
            return Err(Error::InvalidConfig {
                field: "roles",
                reason: format!("source {bad} has no channel count ({} given)", channels.len()),
            });
        }
        let mut sources = used.clone();
        sources.sort_unstable();
        sources.dedup();
        let states = history + 1;
        let time_of = |role: Role, s: &Sample, k: usize, j: usize| match role {
            Role::Input | Role::Boundary => s.spec.input_time(s.start, k, j),
            Role::Label => s.spec.label_time(s.start, k, j),
        };
        let role_source = |role: Role| match role {
            Role::Input => Some(roles.input),
            Role::Label => Some(roles.label),
            Role::Boundary => roles.boundary,
        };
        let roles_of = |source: usize| {
            [Role::Input, Role::Label, Role::Boundary].into_iter().filter(move |&r| role_source(r) == Some(source))
        };
        let groups: Vec<ReadGroup> = sources
            .iter()
            .map(|&source| {
                let mut times: Vec<usize> = roles_of(source)
                    .flat_map(|role| {
                        samples.iter().flat_map(move |s| {
                            (0..steps).flat_map(move |k| (0..states).map(move |j| time_of(role, s, k, j)))
                        })
                    })
                    .collect();
                times.sort_unstable();
                times.dedup();
                ReadGroup { source, times, channels: channels[source] }
            })
            .collect();
        let rows_for = |role: Role| -> Option<RoleRows> {
            let source = role_source(role)?;
            let group = sources.iter().position(|&s| s == source).expect("every used source has a group");
            let times = &groups[group].times;
            let rows = samples
                .iter()
                .flat_map(|s| (0..steps).flat_map(move |k| (0..states).map(move |j| (s, k, j))))
                .map(|(s, k, j)| times.binary_search(&time_of(role, s, k, j)).expect("time was planned"))
                .collect();
            Some(RoleRows { group, rows })
        };
        Ok(Self {
            batch: samples.len(),
            history,
            steps,
            input: rows_for(Role::Input).expect("input always has a source"),
            label: rows_for(Role::Label).expect("label always has a source"),
            boundary: rows_for(Role::Boundary),
            groups,
        })
    }

    /// Samples in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// History length `h`.
    pub fn history(&self) -> usize {
        self.history
    }
    /// States per input or label, `h + 1`.
    pub fn states(&self) -> usize {
        self.history + 1
    }
    /// Rollout steps.
    pub fn steps(&self) -> usize {
        self.steps
    }
    /// The read groups, one per source, in source order.
    pub fn groups(&self) -> &[ReadGroup] {
        &self.groups
    }
    /// The gather map of a role (`None` for a boundary the model does not take).
    pub fn rows(&self, role: Role) -> Option<&RoleRows> {
        match role {
            Role::Input => Some(&self.input),
            Role::Label => Some(&self.label),
            Role::Boundary => self.boundary.as_ref(),
        }
    }
    /// Channels of the source a role reads (0 for an absent boundary).
    pub fn role_channels(&self, role: Role) -> usize {
        self.rows(role).map_or(0, |r| self.groups[r.group].channels)
    }

    /// Row of the group buffer that serves `(sample, step, slot)` of `role`.
    pub fn row(&self, role: Role, sample: usize, step: usize, slot: usize) -> Option<(usize, usize)> {
        let r = self.rows(role)?;
        Some((r.group, r.rows[(sample * self.steps + step) * self.states() + slot]))
    }

    /// Requested and unique planes of one read group.
    pub fn group_planes(&self, group: usize) -> PlaneCount {
        let g = &self.groups[group];
        let requested = [Role::Input, Role::Label, Role::Boundary]
            .into_iter()
            .filter_map(|r| self.rows(r))
            .filter(|r| r.group == group)
            .map(|r| r.rows.len() * g.channels)
            .sum();
        PlaneCount { requested, unique: g.planes() }
    }

    /// Requested and unique planes of the whole batch.
    pub fn planes(&self) -> PlaneCount {
        (0..self.groups.len()).map(|g| self.group_planes(g)).fold(PlaneCount::default(), |a, b| PlaneCount {
            requested: a.requested + b.requested,
            unique: a.unique + b.unique,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::WindowSpec;

    #[test]
    fn one_sample_hist1_steps4_dedups_to_ten_times() {
        let spec = WindowSpec::new(1, 4, 1).unwrap();
        let plan = BatchPlan::new(&[Sample { spec, start: 3 }], &Roles::samudra(), &[1, 1]).unwrap();
        assert_eq!(plan.groups()[0].times, (3..13).collect::<Vec<_>>());
        // 8 input + 8 label prognostic times requested, 10 unique; 8 boundary times, all unique.
        assert_eq!(plan.group_planes(0), PlaneCount { requested: 16, unique: 10 });
        assert_eq!(plan.group_planes(1), PlaneCount { requested: 8, unique: 8 });
        // step k+1's input is step k's label
        for k in 0..3 {
            for j in 0..2 {
                assert_eq!(plan.row(Role::Input, 0, k + 1, j), plan.row(Role::Label, 0, k, j));
            }
        }
    }

    #[test]
    fn mixed_and_empty_batches_rejected() {
        let a = Sample { spec: WindowSpec::new(1, 1, 1).unwrap(), start: 0 };
        let b = Sample { spec: WindowSpec::new(0, 1, 1).unwrap(), start: 0 };
        assert!(matches!(BatchPlan::new(&[a, b], &Roles::samudra(), &[1, 1]), Err(Error::MixedBatch { .. })));
        assert!(matches!(BatchPlan::new(&[], &Roles::samudra(), &[1, 1]), Err(Error::MixedBatch { .. })));
        assert!(matches!(BatchPlan::new(&[a], &Roles::samudra(), &[1]), Err(Error::InvalidConfig { .. })));
    }
}
