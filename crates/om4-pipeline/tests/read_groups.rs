//! `read_groups` reads a batch's groups at once, into the same bits one read after another gives,
//! and reports the first failing group's error.

use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use om4_batch::{BatchPlan, Grid, LandMask, NormOrder, Normalization, Roles, Sample, WindowSpec};
use om4_pipeline::conformance::Intercept;
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

/// `memory()`, whose prognostic group's read waits until the boundary group's read has begun:
/// read one after the other, the first would give up after its timeout. `fail`: the set whose
/// reads fail (`usize::MAX`: both).
fn rendezvous(fail: Option<usize>) -> Intercept<MemorySource> {
    let (started, wait) = channel();
    let (started, wait) = (Mutex::new(started), Mutex::new(wait));
    Intercept::new(Arc::new(memory()), move |inner, group, out| {
        if group.source == 0 {
            let wait = wait.lock().unwrap();
            if wait.recv_timeout(Duration::from_secs(30)).is_err() {
                return Err(failure("groups were read one after another".into()));
            }
        } else {
            started.lock().unwrap().send(()).unwrap();
        }
        inner.read_group(group, out)?;
        if fail.is_some_and(|s| s == group.source || s == usize::MAX) {
            return Err(failure(format!("group of set {} failed", group.source)));
        }
        Ok(())
    })
}

fn failure(reason: String) -> om4_pipeline::Error {
    om4_pipeline::Error::Config { field: "test source", reason }
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
        memory().read_group(g, &mut buf).unwrap();
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
