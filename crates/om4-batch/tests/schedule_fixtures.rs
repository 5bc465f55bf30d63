//! Schedules equal the batches of Samudra's samplers, bit for bit:
//! - `data/schedules_018a6a7.json`: drawn by upstream's own `samplers.py` at 018a6a7 (current
//!   order, [`Order::Shuffle`]; see `data/make_schedule_fixtures_018a6a7.py`);
//! - `data/schedules_randperm_04116bcd.json`: the older seeded order with torch's CPU `randperm`
//!   ([`Order::ShuffleTorchRandperm04116bcd`]; see `data/make_schedule_fixtures_randperm_04116bcd.py`).

use om4_batch::rng::TorchGenerator;
use om4_batch::{Ddp, Order, Schedule, Tail};
use serde_json::Value;

fn current() -> Value {
    serde_json::from_str(include_str!("data/schedules_018a6a7.json")).expect("fixture is valid JSON")
}

fn randperm_04116bcd() -> Value {
    serde_json::from_str(include_str!("data/schedules_randperm_04116bcd.json")).expect("fixture is valid JSON")
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer") as usize).collect()
}

fn batches(v: &Value) -> Vec<Vec<usize>> {
    v.as_array().expect("batches").iter().map(usizes).collect()
}

fn ddp_of(case: &Value) -> Option<Ddp> {
    case["world_size"]
        .as_u64()
        .map(|w| Ddp { world_size: w as usize, rank: case["rank"].as_u64().expect("rank") as usize })
}

/// The schedule a case describes, with `shuffled` as its shuffled order.
fn schedule_of(case: &Value, shuffled: Order) -> Schedule {
    let order = if case["shuffle"].as_bool().expect("bool") { shuffled } else { Order::Sequential };
    let tail = if case["drop_last"].as_bool().expect("bool") { Tail::Drop } else { Tail::Keep };
    Schedule::new(
        case["batch_size"].as_u64().expect("batch") as usize,
        case["seed"].as_u64().expect("seed"),
        order,
        tail,
        ddp_of(case),
    )
    .expect("valid schedule")
}

#[test]
fn schedules_match_upstream_samplers_018a6a7() {
    let f = current();
    let cases = f["cases"].as_array().expect("cases");
    assert!(cases.len() > 5000);
    let (mut trainings, mut validations) = (0, 0);
    for case in cases {
        let groups = batches(&case["groups"]);
        let epoch = case["epoch"].as_u64().expect("epoch");
        let expected = batches(&case["batches"]);
        let schedule = schedule_of(case, Order::Shuffle);
        assert_eq!(schedule.epoch(&groups, epoch), expected, "case {case}");
        assert_eq!(schedule.len(&groups), case["len"].as_u64().expect("len") as usize, "len of case {case}");
        assert_eq!(schedule.len(&groups), expected.len(), "length of case {case}");

        // the named constructors are upstream's trainer settings (train.py at 018a6a7)
        let (batch_size, seed, ddp) = (schedule.batch_size(), case["seed"].as_u64().expect("seed"), ddp_of(case));
        let (shuffle, drop) = (case["shuffle"].as_bool().unwrap(), case["drop_last"].as_bool().unwrap());
        if shuffle && drop {
            let training = Schedule::training(batch_size, seed, ddp).unwrap();
            assert_eq!(training.epoch(&groups, epoch), expected, "training, case {case}");
            trainings += 1;
        }
        if !drop && shuffle == ddp.is_none() {
            let validation = Schedule::validation(batch_size, seed, ddp).unwrap();
            assert_eq!(validation.epoch(&groups, epoch), expected, "validation, case {case}");
            validations += 1;
        }
    }
    assert!(trainings > 1000 && validations > 1000);
}

#[test]
fn issue_example_from_upstream() {
    // seed 15, epoch 1, one group of 24, batch 2: [[3,4],[8,5],[21,19],…]
    let f = current();
    let case = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["groups"] == serde_json::json!([(0..24).collect::<Vec<usize>>()])
                && c["batch_size"] == 2
                && c["seed"] == 15
                && c["epoch"] == 1
                && c["shuffle"] == true
                && c["drop_last"] == true
                && c["world_size"].is_null()
        })
        .expect("the issue's case is in the fixture");
    let expected = batches(&case["batches"]);
    assert_eq!(expected[..3], [vec![3, 4], vec![8, 5], vec![21, 19]]);
    assert_eq!(Schedule::training(2, 15, None).unwrap().epoch(&[(0..24).collect()], 1), expected);
}

#[test]
fn torch_randperm_stream_matches() {
    let f = randperm_04116bcd();
    for (seed, perm) in f["randperm50"].as_object().expect("object") {
        let mut g = TorchGenerator::new(seed.parse().expect("seed"));
        assert_eq!(g.randperm(50), usizes(perm), "seed {seed}");
    }
}

#[test]
fn schedules_match_randperm_sampler_04116bcd() {
    let f = randperm_04116bcd();
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
        let schedule = schedule_of(case, Order::ShuffleTorchRandperm04116bcd);
        let expected = batches(&case["batches"]);
        let got = schedule.epoch(&groups, case["epoch"].as_u64().expect("epoch"));
        assert_eq!(got, expected, "case {case}");
        assert_eq!(schedule.len(&groups), expected.len(), "length of case {case}");
        // with DDP the two shuffled orders are one and the same
        if ddp_of(case).is_some() {
            assert_eq!(schedule_of(case, Order::Shuffle).epoch(&groups, case["epoch"].as_u64().unwrap()), expected);
        }
    }
}
