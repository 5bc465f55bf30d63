//! Schedules equal the fixtures drawn by Samudra's sampler semantics with Python's `random` and
//! torch's CPU `randperm` (see `data/make_schedule_fixtures.py`).

use om4_batch::rng::TorchGenerator;
use om4_batch::{Ddp, Order, Schedule, Tail};
use serde_json::Value;

fn fixtures() -> Value {
    serde_json::from_str(include_str!("data/schedules.json")).expect("fixture is valid JSON")
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer") as usize).collect()
}

#[test]
fn torch_randperm_stream_matches() {
    let f = fixtures();
    for (seed, perm) in f["randperm50"].as_object().expect("object") {
        let mut g = TorchGenerator::new(seed.parse().expect("seed"));
        assert_eq!(g.randperm(50), usizes(perm), "seed {seed}");
    }
}

#[test]
fn schedules_match_samudra_samplers() {
    let f = fixtures();
    let cases = f["cases"].as_array().expect("cases");
    assert!(cases.len() > 800);
    for case in cases {
        let sizes = usizes(&case["groups"]);
        let mut start = 0;
        let groups: Vec<Vec<usize>> = sizes
            .iter()
            .map(|&n| {
                start += n;
                (start - n..start).collect()
            })
            .collect();
        let ddp = case["world_size"]
            .as_u64()
            .map(|w| Ddp { world_size: w as usize, rank: case["rank"].as_u64().expect("rank") as usize });
        let order = if case["shuffle"].as_bool().expect("bool") { Order::Shuffle } else { Order::Sequential };
        let tail = if case["drop_last"].as_bool().expect("bool") { Tail::Drop } else { Tail::Keep };
        let schedule = Schedule::new(
            case["batch_size"].as_u64().expect("batch") as usize,
            case["seed"].as_u64().expect("seed"),
            order,
            tail,
            ddp,
        )
        .expect("valid schedule");
        let expected: Vec<Vec<usize>> = case["batches"].as_array().expect("batches").iter().map(usizes).collect();
        let got = schedule.epoch(&groups, case["epoch"].as_u64().expect("epoch"));
        assert_eq!(got, expected, "case {case}");
        assert_eq!(schedule.len(&groups), expected.len(), "length of case {case}");
    }
}
