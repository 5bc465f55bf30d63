//! Property tests: the planners against naive re-statements.

use std::collections::{BTreeMap, BTreeSet};

use om4_batch::{
    BatchPlan, Ddp, GatheredBatch, GatheredStep, Grid, LandMask, NormOrder, Normalization, Order, Precision, Role,
    Roles, Sample, SampleSpace, Schedule, Tail, WindowSpec, fill_groups, gather_into, gather_into_steps,
    prepare_and_gather, prepare_and_gather_into, prepare_and_gather_into_steps, reference_batch, step_lens,
};
use proptest::prelude::*;

fn arb_spec() -> impl Strategy<Value = WindowSpec> {
    (0usize..3, 1usize..5, 1usize..4).prop_map(|(h, k, s)| WindowSpec::new(h, k, s).unwrap())
}

/// A deterministic raw value for `(source, time, channel, cell)`, with NaN land and some ±infinities.
fn raw(source: usize, t: usize, c: usize, cell: usize) -> f32 {
    let h = (source * 7919 + t * 104_729 + c * 1_299_709 + cell * 15_485_863) % 1000;
    match h {
        0..=79 => f32::NAN,
        80 => f32::INFINITY,
        81 => f32::NEG_INFINITY,
        _ => (h as f32 - 500.0) * 0.37 + t as f32,
    }
}

/// Fills a plane with [`raw`] values, as a store read would.
fn fetch(source: usize, t: usize, c: usize, out: &mut [f32]) -> Result<(), om4_batch::Error> {
    out.iter_mut().enumerate().for_each(|(cell, v)| *v = raw(source, t, c, cell));
    Ok(())
}

/// Source 0: float32 statistics, land filled with 0; source 1: float64 statistics that float32
/// cannot hold exactly, land filled with -1.25 (both precisions and fills in every batch).
fn preparation(source: usize, channels: usize, plane: usize, order: NormOrder) -> Normalization {
    let wet = (0..channels * plane).map(|i| !(i * 31 + source).is_multiple_of(5)).collect();
    let mask = LandMask::new(channels, plane, wet).unwrap();
    if source == 0 {
        let mean = (0..channels).map(|c| c as f32 * 0.5).collect();
        let std = (0..channels).map(|c| 1.0 + c as f32 * 0.25).collect();
        Normalization::new(mean, std, mask, order, 0.0).unwrap()
    } else {
        let mean = (0..channels).map(|c| c as f64 * 0.1 - 0.7).collect();
        let std = (0..channels).map(|c| 1.3 + c as f64 * 0.3).collect();
        Normalization::with_precision(mean, std, Precision::F64, mask, order, -1.25).unwrap()
    }
}

proptest! {
    #[test]
    fn windows_stay_in_range_and_match_closed_form(spec in arb_spec(), len in 0usize..80) {
        let n = spec.num_samples(len);
        let closed = len as i64 - (spec.steps() * spec.states() * spec.stride()) as i64 - (spec.history() * spec.stride()) as i64;
        prop_assert_eq!(n as i64, closed.max(0));
        for i in 0..n {
            for k in 0..spec.steps() {
                for j in 0..spec.states() {
                    prop_assert!(spec.input_time(i, k, j) < len);
                    prop_assert!(spec.label_time(i, k, j) < len);
                }
            }
        }
        // one more sample would run past the end
        if n > 0 {
            prop_assert!(spec.label_time(n, spec.steps() - 1, spec.history()) >= len);
        }
    }

    #[test]
    fn every_plane_read_once_and_every_use_served(
        spec in arb_spec(), starts in prop::collection::vec(0usize..30, 1..6), c_prog in 1usize..4, c_bound in 0usize..3,
    ) {
        let samples: Vec<Sample> = starts.iter().map(|&start| Sample { spec, start }).collect();
        let roles = if c_bound > 0 { Roles::samudra() } else { Roles { input: 0, label: 0, boundary: None } };
        let plan = BatchPlan::new(&samples, &roles, &[c_prog, c_bound]).unwrap();
        // naive: every (source, time) a role uses
        let mut naive: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        let mut uses = 0;
        for s in &samples {
            for k in 0..spec.steps() {
                for j in 0..spec.states() {
                    naive.entry(0).or_default().insert(s.spec.input_time(s.start, k, j));
                    naive.entry(0).or_default().insert(s.spec.label_time(s.start, k, j));
                    uses += 2 * c_prog;
                    if c_bound > 0 {
                        naive.entry(1).or_default().insert(s.spec.input_time(s.start, k, j));
                        uses += c_bound;
                    }
                }
            }
        }
        for g in plan.groups() {
            let set: BTreeSet<usize> = g.times.iter().copied().collect();
            prop_assert_eq!(set.len(), g.times.len(), "duplicate time in a read group");
            prop_assert_eq!(&set, &naive[&g.source]);
        }
        prop_assert_eq!(plan.planes().requested, uses);
        prop_assert_eq!(plan.planes().unique, naive.iter().map(|(&s, t)| t.len() * [c_prog, c_bound][s]).sum::<usize>());
        for (b, s) in samples.iter().enumerate() {
            for k in 0..spec.steps() {
                for j in 0..spec.states() {
                    let (g, row) = plan.row(Role::Input, b, k, j).unwrap();
                    prop_assert_eq!(plan.groups()[g].times[row], s.spec.input_time(s.start, k, j));
                    let (g, row) = plan.row(Role::Label, b, k, j).unwrap();
                    prop_assert_eq!(plan.groups()[g].times[row], s.spec.label_time(s.start, k, j));
                    if c_bound > 0 {
                        let (g, row) = plan.row(Role::Boundary, b, k, j).unwrap();
                        prop_assert_eq!(plan.groups()[g].source, 1);
                        prop_assert_eq!(plan.groups()[g].times[row], s.spec.input_time(s.start, k, j));
                    }
                }
            }
        }
    }

    #[test]
    fn dedup_plan_and_gather_equal_naive_path_bit_for_bit(
        spec in arb_spec(), starts in prop::collection::vec(0usize..20, 1..5),
        c_prog in 1usize..4, c_bound in 0usize..3, ny in 1usize..5, nx in 1usize..6,
        mask_first in any::<bool>(),
    ) {
        let order = if mask_first { NormOrder::MaskThenNormalize } else { NormOrder::NormalizeThenMask };
        let grid = Grid { y: ny, x: nx };
        let plane = grid.plane();
        let samples: Vec<Sample> = starts.iter().map(|&start| Sample { spec, start }).collect();
        let roles = if c_bound > 0 { Roles::samudra() } else { Roles { input: 0, label: 0, boundary: None } };
        let preps = [preparation(0, c_prog, plane, order), preparation(1, c_bound.max(1), plane, order)];
        let prep_refs: Vec<&Normalization> = preps.iter().collect();
        let channels = [c_prog, c_bound.max(1)];
        let plan = BatchPlan::new(&samples, &roles, &channels).unwrap();
        let mut groups = fill_groups(&plan, grid, fetch).unwrap();
        let fast = prepare_and_gather(&plan, &mut groups, &prep_refs, grid).unwrap();
        let naive = reference_batch(&samples, &roles, &prep_refs, grid, fetch).unwrap();
        prop_assert!(fast.bitwise_eq(&naive));
        // Reused outputs: a batch of another shape, then the same shape full of junk, are overwritten exactly.
        let views: Vec<&[f32]> = groups.iter().map(Vec::as_slice).collect();
        let junk = GatheredStep { input: vec![f32::NAN; 5], label: vec![-1.0; 3 * plane] };
        let mut reused = GatheredBatch { steps: vec![junk; spec.steps() + 1], ..GatheredBatch::default() };
        gather_into(&plan, &views, grid, &mut reused).unwrap();
        prop_assert!(reused.bitwise_eq(&naive));
        reused.steps.iter_mut().for_each(|s| { s.input.fill(f32::NAN); s.label.fill(f32::INFINITY) });
        gather_into(&plan, &views, grid, &mut reused).unwrap();
        prop_assert!(reused.bitwise_eq(&naive));
        // Caller-owned step buffers (as a loader's pooled ones), full of junk, likewise.
        let (n_in, n_label) = step_lens(&plan, grid);
        let mut owned: Vec<(Vec<f32>, Vec<f32>)> = (0..spec.steps()).map(|_| (vec![f32::NAN; n_in], vec![-0.0; n_label])).collect();
        gather_into_steps(&plan, &views, grid, &mut owned).unwrap();
        let as_batch = |steps: &[(Vec<f32>, Vec<f32>)]| GatheredBatch {
            steps: steps.iter().map(|(input, label)| GatheredStep { input: input.clone(), label: label.clone() }).collect(),
            ..naive.clone()
        };
        prop_assert!(as_batch(&owned).bitwise_eq(&naive));
        let mut raw_groups = fill_groups(&plan, grid, fetch).unwrap();
        owned.iter_mut().for_each(|(i, l)| { i.fill(1.0); l.fill(f32::NAN) });
        prepare_and_gather_into_steps(&plan, &mut raw_groups, &prep_refs, grid, &mut owned).unwrap();
        prop_assert!(as_batch(&owned).bitwise_eq(&naive));
        prop_assert_eq!(fast.steps.len(), spec.steps());
        prop_assert_eq!(fast.input_channels, spec.states() * (c_prog + if c_bound > 0 { c_bound.max(1) } else { 0 }));
    }

    #[test]
    fn ddp_ranks_are_disjoint_covering_and_equal(
        sizes in prop::collection::vec(1usize..40, 1..4), batch in 1usize..6, world in 1usize..5,
        seed in 0u64..1000, epoch in 1u64..5, shuffle in any::<bool>(), drop in any::<bool>(),
    ) {
        let mut start = 0;
        let groups: Vec<Vec<usize>> = sizes.iter().map(|&n| { start += n; (start - n..start).collect() }).collect();
        let order = if shuffle { Order::Shuffle } else { Order::Sequential };
        let tail = if drop { Tail::Drop } else { Tail::Keep };
        let per_rank: Vec<Vec<Vec<usize>>> = (0..world)
            .map(|rank| Schedule::new(batch, seed, order, tail, Some(Ddp { world_size: world, rank })).unwrap().epoch(&groups, epoch))
            .collect();
        let n = per_rank[0].len();
        prop_assert!(per_rank.iter().all(|r| r.len() == n), "ranks disagree on batch count");
        prop_assert_eq!(n, Schedule::new(batch, seed, order, tail, Some(Ddp { world_size: world, rank: 0 })).unwrap().len(&groups));
        // every batch of a step comes from one group
        for step in 0..n {
            let group_of = |b: &Vec<usize>| groups.iter().position(|g| g.contains(&b[0])).unwrap();
            let g0 = group_of(&per_rank[0][step]);
            prop_assert!(per_rank.iter().all(|r| group_of(&r[step]) == g0));
        }
        let all: Vec<usize> = per_rank.iter().flatten().flatten().copied().collect();
        let unique: BTreeSet<usize> = all.iter().copied().collect();
        // without padding, no sample repeats; with padding every full batch's samples appear
        let full_batches: BTreeSet<usize> = groups.iter()
            .flat_map(|g| g.chunks(batch).filter(|c| !drop || c.len() == batch).flatten().copied().collect::<Vec<_>>())
            .collect();
        if drop {
            prop_assert_eq!(unique.len(), all.len(), "a sample repeats");
            prop_assert!(unique.is_subset(&full_batches));
        } else {
            prop_assert_eq!(unique, full_batches, "padding must cover every sample");
        }
    }

    #[test]
    fn single_schedule_is_a_partition(sizes in prop::collection::vec(0usize..30, 1..4), batch in 1usize..6, seed in 0u64..500, epoch in 1u64..4) {
        let mut space = SampleSpace::new();
        let spec = WindowSpec::new(0, 1, 1).unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            if n > 0 { space.push(spec, n + 1, k as u64).unwrap(); }
        }
        let groups = space.groups();
        let batches = Schedule::validation(batch, seed, None).unwrap().epoch(&groups, epoch);
        let mut all: Vec<usize> = batches.iter().flatten().copied().collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..space.len()).collect::<Vec<_>>());
        for b in &batches {
            let g = groups.iter().position(|g| g.contains(&b[0])).unwrap();
            prop_assert!(b.iter().all(|i| groups[g].contains(i)), "a batch mixes groups");
        }
    }
}

#[test]
fn mismatched_preparations_are_errors_and_leave_buffers_untouched() {
    let grid = Grid { y: 2, x: 3 };
    let spec = WindowSpec::new(1, 2, 1).unwrap();
    let plan = BatchPlan::new(&[Sample { spec, start: 0 }], &Roles::samudra(), &[2, 1]).unwrap();
    let groups = fill_groups(&plan, grid, fetch).unwrap();
    let order = NormOrder::NormalizeThenMask;
    let (p0, p1) = (preparation(0, 2, 6, order), preparation(1, 1, 6, order));
    let (wide, other_grid) = (preparation(1, 2, 6, order), preparation(1, 1, 4, order));
    for (preps, what) in [
        (vec![&p0, &wide], "channels of the preparation of group 1"),
        (vec![&p0, &other_grid], "plane size of the preparation of group 1"),
        (vec![&p0], "preparation list"),
    ] {
        let mut g = groups.clone();
        let mut out = GatheredBatch::default();
        match prepare_and_gather_into(&plan, &mut g, &preps, grid, &mut out) {
            Err(om4_batch::Error::BufferLength { what: w, .. }) => assert_eq!(w, what),
            other => panic!("expected a mismatch, got {other:?}"),
        }
        let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g), bits(&groups), "no group buffer was prepared");
        assert!(out.steps.is_empty());
    }
    let mut g = groups.clone();
    assert!(prepare_and_gather_into(&plan, &mut g, &[&p0, &p1], grid, &mut GatheredBatch::default()).is_ok());
}

#[test]
fn mismatched_step_buffers_are_errors_and_leave_buffers_untouched() {
    let grid = Grid { y: 2, x: 3 };
    let spec = WindowSpec::new(1, 2, 1).unwrap();
    let plan =
        BatchPlan::new(&[Sample { spec, start: 0 }, Sample { spec, start: 3 }], &Roles::samudra(), &[2, 1]).unwrap();
    let groups = fill_groups(&plan, grid, fetch).unwrap();
    let order = NormOrder::MaskThenNormalize;
    let (p0, p1) = (preparation(0, 2, 6, order), preparation(1, 1, 6, order));
    let (n_in, n_label) = step_lens(&plan, grid);
    assert_eq!((n_in, n_label), (2 * 2 * (2 + 1) * 6, 2 * 2 * 2 * 6), "batch × states × channels × plane");
    let good = || vec![(vec![7.0f32; n_in], vec![7.0f32; n_label]); 2];
    let mut short_label = good();
    short_label[1].1.pop();
    let mut long_input = good();
    long_input[0].0.push(0.0);
    for (mut steps, what) in [
        (good()[..1].to_vec(), "step buffer list"),
        (short_label, "label buffer of step 1"),
        (long_input, "input buffer of step 0"),
    ] {
        let before = steps.clone();
        let mut g = groups.clone();
        match prepare_and_gather_into_steps(&plan, &mut g, &[&p0, &p1], grid, &mut steps) {
            Err(om4_batch::Error::BufferLength { what: w, .. }) => assert_eq!(w, what),
            other => panic!("expected a mismatch, got {other:?}"),
        }
        let views: Vec<&[f32]> = groups.iter().map(Vec::as_slice).collect();
        assert!(matches!(
            gather_into_steps(&plan, &views, grid, &mut steps),
            Err(om4_batch::Error::BufferLength { .. })
        ));
        let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g), bits(&groups), "no group buffer was prepared");
        assert_eq!(steps, before, "no step buffer was written (they hold no NaN)");
    }
    let views: Vec<&[f32]> = groups.iter().map(Vec::as_slice).collect();
    let mut wrong_groups = views.clone();
    wrong_groups.pop();
    assert!(matches!(
        gather_into_steps(&plan, &wrong_groups, grid, &mut good()),
        Err(om4_batch::Error::BufferLength { what, .. }) if what == "group buffer list"
    ));
}

/// Small values mixed with extreme ones (as a mistyped config gives).
fn extreme() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..6, Just(usize::MAX), Just(usize::MAX / 2), Just(1 << 32), any::<usize>()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn extreme_configs_are_errors_or_work(
        history in extreme(), steps in extreme(), stride in extreme(), len in prop_oneof![0usize..200, Just(usize::MAX)],
        batch in extreme(), world in extreme(), rank in extreme(), seed in any::<u64>(), epoch in any::<u64>(),
    ) {
        let outcome = std::panic::catch_unwind(|| {
            let Ok(spec) = WindowSpec::new(history, steps, stride) else { return };
            let _ = (spec.span(), spec.num_samples(len), spec.require_samples(len));
            if len > 200 {
                // Epochs list every sample: only a bounded number is accepted.
                let n = spec.num_samples(len);
                let accepted = SampleSpace::single(spec, len).is_ok();
                assert_eq!(accepted, n > 0 && n <= SampleSpace::MAX_SAMPLES, "{n} samples");
                return;
            }
            let Ok(space) = SampleSpace::single(spec, len) else { return };
            let ddp = (world > 1).then_some(Ddp { world_size: world, rank });
            let Ok(schedule) = Schedule::training(batch, seed, ddp) else { return };
            let batches = schedule.epoch(&space.groups(), epoch);
            assert_eq!(batches.len(), schedule.len(&space.groups()));
            if let Some(first) = batches.first() {
                let samples = space.samples(first).unwrap();
                BatchPlan::new(&samples, &Roles::samudra(), &[2, 1]).unwrap();
            }
        });
        prop_assert!(outcome.is_ok());
    }
}
