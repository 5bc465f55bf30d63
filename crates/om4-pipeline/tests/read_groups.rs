//! `read_groups` reads a batch's groups at once, into the same bits one read after another gives,
//! and reports the first failing group's error.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use om4_batch::{BatchPlan, Grid, LandMask, NormOrder, Normalization, ReadGroup, Roles, Sample, WindowSpec};
use om4_pipeline::{BatchSource, MemorySource, read_groups};

fn memory() -> MemorySource {
    let grid = Grid { y: 3, x: 4 };
    let (times, channels) = (10, [2, 1]);
    let sets = channels
        .iter()
        .enumerate()
        .map(|(s, &c)| {
            let planes: Vec<f32> = (0..times * c * grid.plane()).map(|i| (s * 100_000 + i) as f32).collect();
            let mask = LandMask::all_wet(c, grid.plane());
            let norm = Normalization::new(vec![0.0; c], vec![1.0; c], mask, NormOrder::default(), 0.0).unwrap();
            (planes, norm)
        })
        .collect();
    MemorySource::new(grid, times, Roles::samudra(), sets).unwrap()
}

fn plan(source: &impl BatchSource) -> BatchPlan {
    let spec = WindowSpec::new(1, 2, 1).unwrap();
    let samples = [Sample { spec, start: 0 }, Sample { spec, start: 4 }];
    BatchPlan::new(&samples, &source.roles(), &source.channels()).unwrap()
}

/// The prognostic group's read waits until the boundary group's read has begun: read one after
/// the other, the first would give up after its timeout.
struct Rendezvous {
    inner: MemorySource,
    started: Mutex<Sender<()>>,
    wait: Mutex<Receiver<()>>,
    fail: Option<usize>,
}

impl BatchSource for Rendezvous {
    fn grid(&self) -> Grid {
        self.inner.grid()
    }
    fn time_len(&self) -> usize {
        self.inner.time_len()
    }
    fn channels(&self) -> Vec<usize> {
        self.inner.channels()
    }
    fn roles(&self) -> Roles {
        self.inner.roles()
    }
    fn normalizations(&self) -> &[Normalization] {
        self.inner.normalizations()
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        if group.source == 0 {
            let wait = self.wait.lock().unwrap();
            if wait.recv_timeout(Duration::from_secs(30)).is_err() {
                return Err(failure("groups were read one after another".into()));
            }
        } else {
            self.started.lock().unwrap().send(()).unwrap();
        }
        self.inner.read_group(group, out)?;
        if self.fail.is_some_and(|s| s == group.source || s == usize::MAX) {
            return Err(failure(format!("group of set {} failed", group.source)));
        }
        Ok(())
    }
}

fn failure(reason: String) -> om4_pipeline::Error {
    om4_pipeline::Error::Config { field: "test source", reason }
}

fn rendezvous(fail: Option<usize>) -> Rendezvous {
    let (started, wait) = channel();
    Rendezvous { inner: memory(), started: Mutex::new(started), wait: Mutex::new(wait), fail }
}

#[test]
fn groups_are_read_at_once_into_the_same_bits() {
    let source = rendezvous(None);
    let plan = plan(&source);
    assert_eq!(plan.groups().len(), 2, "a Samudra batch reads a prognostic and a boundary group");
    let got = read_groups(&source, &plan, |len| vec![f32::NAN; len]).unwrap();
    let mut want = Vec::new();
    for g in plan.groups() {
        let mut buf = vec![0.0; g.planes() * source.grid().plane()];
        source.inner.read_group(g, &mut buf).unwrap();
        want.push(buf);
    }
    let bits = |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn the_first_failing_group_is_reported() {
    let plan = plan(&memory());
    let err = read_groups(&rendezvous(Some(1)), &plan, |len| vec![0.0; len]).unwrap_err();
    assert!(err.to_string().contains("group of set 1 failed"), "{err}");
    let err = read_groups(&rendezvous(Some(usize::MAX)), &plan, |len| vec![0.0; len]).unwrap_err();
    assert!(err.to_string().contains("group of set 0 failed"), "{err}");
}
