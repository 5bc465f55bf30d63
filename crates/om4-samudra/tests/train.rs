//! Training on a tiny synthetic store: learning happens, checkpoints restore exactly, and the
//! rollout feeds predictions back.

use std::cell::RefCell;
use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, LoaderConfig, loader};
use om4_samudra::Masked;
use om4_samudra::{Predictor, SamudraConfig, TrainConfig, Trainer, rollout_loss};
use om4_store::{DataConfig, SynthConfig, synthesize};

/// A store of 16 × 32 cells, 24 five-day steps and 2 levels under `dir`, split up to April 1958
/// for training and from March 1958 for validation, read 2 planes at a time.
fn data(dir: &std::path::Path) -> DataConfig {
    let cfg = SynthConfig { ny: 16, nx: 32, times: 24, levels: 2, consolidated: false, ..SynthConfig::default() };
    let paths = synthesize(dir, &cfg, |_, _| {}).unwrap();
    let mut data = DataConfig::at(paths.data);
    data.source.train_time = "..1958-04-01".parse().unwrap();
    data.source.val_time = "1958-03-01..".parse().unwrap();
    data.loading = LoaderConfig { prefetch_batches: 2, ..LoaderConfig::default() };
    data.read_threads = 2;
    data
}

fn build(config: &TrainConfig, model: &SamudraConfig, data: &DataConfig) -> Trainer {
    Trainer::over(config.clone(), model.clone(), data).unwrap().build().unwrap()
}

fn values(t: Tensor<4>) -> Vec<u32> {
    t.into_data().try_to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn loss_falls_and_checkpoints_restore_identical_predictions() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(dir.path());
    let config = TrainConfig { epochs: 3, learning_rate: 3e-3, batch_size: 2, steps: 2, ..TrainConfig::default() };
    let model = SamudraConfig::tiny();
    let mut trainer = build(&config, &model, &data);
    assert!(trainer.train_batches() >= 4);
    let mut losses = Vec::new();
    let mut reports = Vec::new();
    for _ in 0..3 {
        reports.push(trainer.run_epoch(|_, _, _, _| {}).unwrap());
    }
    for r in &reports {
        losses.push(r.train_loss);
        assert!(r.val_loss.is_finite());
    }
    assert!(losses[2] < losses[0], "training loss did not fall: {losses:?}");

    // checkpoint round trip
    let ckpt = dir.path().join("ckpt");
    trainer.save(&ckpt).unwrap();
    let mut restored = build(&config, &model, &data);
    restored.resume(&ckpt).unwrap();
    assert_eq!(restored.next_epoch(), 4);
    let input = Tensor::<4>::from_data(
        TensorData::new((0..24 * 16 * 32).map(|i| (i % 97) as f32 / 97.0).collect::<Vec<f32>>(), [1, 24, 16, 32]),
        trainer.device(),
    );
    let land = trainer.land().clone();
    for (a, b) in [(trainer.ema(), restored.ema()), (&trainer.model().clone(), &restored.model().clone())] {
        let pa = values(a.forward(input.clone(), land.clone()));
        let pb = values(b.forward(input.clone(), land.clone()));
        assert_eq!(pa, pb);
    }

    // A checkpoint from before weight generations (`model.bpk`, no "generation" in state.json)
    // still resumes.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("state.json")).unwrap()).unwrap();
    let generation = state["generation"].as_u64().unwrap();
    for name in ["model", "ema", "optim"] {
        std::fs::rename(ckpt.join(format!("{name}-{generation}.bpk")), ckpt.join(format!("{name}.bpk"))).unwrap();
    }
    let mut legacy = state;
    legacy.as_object_mut().unwrap().remove("generation");
    std::fs::write(ckpt.join("state.json"), legacy.to_string()).unwrap();
    let mut old = build(&config, &model, &data);
    old.resume(&ckpt).unwrap();
    assert_eq!(old.next_epoch(), 4);
    let pa = values(trainer.ema().forward(input.clone(), land.clone()));
    assert_eq!(values(old.ema().forward(input, land)), pa);
}

#[test]
fn dynamic_loss_weights_update_and_survive_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = data(dir.path());
    data.source.train_time = om4_store::DateRange::ALL;
    let config =
        TrainConfig { epochs: 1, batch_size: 4, steps: 1, dynamic_loss_limit: Some(20.0), ..TrainConfig::default() };
    let mut trainer = build(&config, &SamudraConfig::tiny(), &data);
    let report = trainer.run_epoch(|_, _, _, _| {}).unwrap();
    assert!(report.train_loss.is_finite());
    let weights = trainer.loss_weights().unwrap().clone();
    assert_eq!(weights.scales.len(), 9);
    assert!(weights.scales.iter().all(|s| s.is_finite() && *s > 0.0));
    assert!(weights.scales.iter().any(|&s| s != 1.0), "weights moved: {:?}", weights.scales);
    trainer.save(&dir.path().join("ckpt")).unwrap();
    let mut restored = build(&config, &SamudraConfig::tiny(), &data);
    restored.resume(&dir.path().join("ckpt")).unwrap();
    assert_eq!(restored.loss_weights(), Some(&weights));
}

/// Returns its input's first `outputs` channels plus one, and records every input.
struct Recorder {
    outputs: usize,
    inputs: RefCell<Vec<Tensor<4>>>,
}

impl Predictor for Recorder {
    fn predict(&self, input: Tensor<4>) -> Tensor<4> {
        self.inputs.borrow_mut().push(input.clone());
        let [b, _, h, w] = input.dims();
        input.slice([0..b, 0..self.outputs, 0..h, 0..w]) + 1.0
    }
}

#[test]
fn rollout_feeds_predictions_back_with_true_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut whole = data(dir.path());
    whole.source.train_time = om4_store::DateRange::ALL;
    let src = Arc::new(whole.open().unwrap().train);
    let spec = WindowSpec::new(1, 3, 1).unwrap();
    let space = SampleSpace::single(spec, src.time_len()).unwrap();
    let loader =
        loader(src.clone(), space, Schedule::training(2, 1, None).unwrap(), LoaderConfig::default(), Device::flex());
    let batch = loader.epoch(1).unwrap().next().unwrap().unwrap().batch;
    let prog = 2 * 9;
    let stub = Recorder { outputs: prog, inputs: RefCell::new(Vec::new()) };
    let mask = Tensor::<4>::ones([1, prog, 16, 32], &Device::flex());
    let loss = rollout_loss(&stub, &batch, &mask, prog);
    assert_eq!(loss.dims(), [prog]);
    let inputs = stub.inputs.borrow();
    assert_eq!(inputs.len(), 3);
    assert_eq!(values(inputs[0].clone()), values(batch.steps[0].input.clone()));
    for s in 1..3 {
        let [b, c, h, w] = inputs[s].dims();
        let fed = inputs[s].clone().slice([0..b, 0..prog, 0..h, 0..w]);
        let previous = inputs[s - 1].clone().slice([0..b, 0..prog, 0..h, 0..w]) + 1.0;
        assert_eq!(values(fed), values(previous), "step {s} takes the previous prediction");
        let boundary = inputs[s].clone().slice([0..b, prog..c, 0..h, 0..w]);
        let truth = batch.steps[s].input.clone().slice([0..b, prog..c, 0..h, 0..w]);
        assert_eq!(values(boundary), values(truth), "step {s} takes the true boundary");
    }
    // the real model goes through the same rollout
    let model = SamudraConfig::tiny().init(24, prog, &Device::flex());
    let land = burn::tensor::Tensor::<4, burn::tensor::Bool>::from_data(
        TensorData::new(vec![false; prog * 16 * 32], [1, prog, 16, 32]),
        &Device::flex(),
    );
    let l = rollout_loss(&Masked { model: &model, land }, &batch, &mask, prog);
    assert!(l.into_data().try_to_vec::<f32>().unwrap().iter().all(|v| v.is_finite()));
}

#[test]
fn a_run_resumed_inside_an_epoch_ends_where_the_uninterrupted_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(dir.path());
    let config = TrainConfig {
        epochs: 2,
        learning_rate: 3e-3,
        batch_size: 2,
        steps: 1,
        grad_accumulation: 2,
        dynamic_loss_limit: Some(20.0),
        ..TrainConfig::default()
    };
    let model = SamudraConfig::tiny();
    let ckpt = dir.path().join("ckpt");
    // The whole run checkpoints after every optimizer step; the last one inside epoch 2 is what
    // a run killed there would have left.
    let mut whole = build(&config, &model, &data);
    let total = whole.train_batches();
    assert!(total >= 5, "{total} batches: too few to stop inside the epoch");
    whole.checkpoint_every(&ckpt, 1).unwrap();
    whole.run_epoch(|_, _, _, _| {}).unwrap();
    let report = whole.run_epoch(|_, _, _, _| {}).unwrap();

    let mut resumed = build(&config, &model, &data);
    resumed.resume(&ckpt).unwrap();
    let last_inside = (total - 1) / 2 * 2; // after the last full accumulation before the end
    assert_eq!(resumed.resume_point(), (2, last_inside));
    let mut seen = Vec::new();
    let tail = resumed.run_epoch(|done, _, _, _| seen.push(done)).unwrap();
    assert_eq!(seen, ((last_inside + 1)..=total).collect::<Vec<_>>(), "only the remaining batches");
    assert_eq!(tail.train_loss.to_bits(), report.train_loss.to_bits(), "the epoch's mean loss");
    assert_eq!(resumed.loss_weights(), whole.loss_weights(), "the dynamic loss weights");
    let input = Tensor::<4>::from_data(
        TensorData::new((0..24 * 16 * 32).map(|i| (i % 89) as f32 / 89.0).collect::<Vec<f32>>(), [1, 24, 16, 32]),
        whole.device(),
    );
    let land = whole.land().clone();
    for (a, b) in [(whole.ema(), resumed.ema()), (&whole.model().clone(), &resumed.model().clone())] {
        assert_eq!(values(a.forward(input.clone(), land.clone())), values(b.forward(input.clone(), land.clone())));
    }

    // One generation of weight files at a time.
    let mut files: Vec<String> =
        std::fs::read_dir(&ckpt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files.iter().any(|f| f == "state.json"));
    // A save killed before it replaced state.json leaves the previous checkpoint whole.
    std::fs::write(ckpt.join("model-999.bpk"), b"half written").unwrap();
    let mut again = build(&config, &model, &data);
    again.resume(&ckpt).unwrap();
    assert_eq!(again.resume_point(), (2, last_inside));
    // A batch number is meaningless under another schedule.
    let other = TrainConfig { batch_size: 3, ..config.clone() };
    let mut mismatched = build(&other, &model, &data);
    assert!(mismatched.resume(&ckpt).is_err());
    // Other data (here another training split; a store or a channel list likewise) is refused,
    // naming what differs, at the end of an epoch as inside one.
    let mut other_data = data.clone();
    other_data.source.train_time = "..1958-03-01".parse().unwrap();
    let err = build(&config, &model, &other_data).resume(&ckpt).unwrap_err().to_string();
    assert!(
        err.contains("trained on other data") && err.contains("train_time: ") && err.contains("1958-03-01"),
        "{err}"
    );
    let mut reread = build(&config, &model, &data);
    reread.resume(&ckpt).unwrap();
    assert!(whole.checkpoint_every(&ckpt, 0).is_err());
}
