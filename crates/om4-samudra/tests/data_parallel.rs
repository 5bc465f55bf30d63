//! Data-parallel training without MPI: two ranks as threads (`om4_mpi::ThreadGroup`) train
//! to bit-identical weights, equal to one process trained on the same global batches; checkpoints
//! remember the world size.
//!
//! The case (store, the tiny network without block normalization, settings) is
//! `om4_testkit::ddp`'s, shared with `examples/ddp_check`; its docs say why there is no block
//! normalization. Without it the runs agree to float32 rounding amplified by Adam.

use std::path::Path;
use std::sync::Arc;

use om4_mpi::{Collective, ThreadGroup};
use om4_samudra::{DataParallel, EpochReport, TrainConfig, Trainer, flatten_parameters};
use om4_store::DataConfig;
use om4_testkit::ddp::{config, model};

const WORLD: usize = 2;
const EPOCHS: usize = 1;

fn store(dir: &Path) -> DataConfig {
    om4_testkit::ddp::data(dir).unwrap()
}

struct Run {
    model: Vec<f32>,
    ema: Vec<f32>,
    weights: Vec<f32>,
    reports: Vec<EpochReport>,
    batches: usize,
}

/// A new trainer over the configuration's splits (the builder draws each trainer's seeded
/// weights one at a time, so thread ranks get the same ones, as every rank in its own process).
fn trainer(config: TrainConfig, data: &DataConfig, parallel: DataParallel) -> Trainer {
    Trainer::over(config, model(), data).unwrap().parallel(parallel).build().unwrap()
}

/// Trains `EPOCHS` epochs, then saves a checkpoint into `save` (when given).
fn train(data: &DataConfig, parallel: DataParallel, save: Option<&Path>) -> Run {
    let mut trainer = trainer(config(), data, parallel);
    let reports = (0..EPOCHS).map(|_| trainer.run_epoch(|_, _, _, _| {}).unwrap()).collect();
    if let Some(dir) = save {
        trainer.save(dir).unwrap();
    }
    Run {
        model: flatten_parameters(trainer.model()).unwrap(),
        ema: flatten_parameters(trainer.ema()).unwrap(),
        weights: trainer.loss_weights().unwrap().scales.clone(),
        reports,
        batches: trainer.train_batches(),
    }
}

/// ‖a − b‖ / ‖b‖.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (diff / norm).sqrt()
}

/// How many values differ in their bits.
fn differing(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
}

#[test]
fn two_thread_ranks_train_like_one_process_on_the_global_batches() {
    let dir = tempfile::tempdir().unwrap();
    let source = store(dir.path());
    let ranks: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = ThreadGroup::new(WORLD)
            .unwrap()
            .into_iter()
            .map(|rank| {
                let (source, save) = (&source, dir.path().join(format!("ckpt-rank{}", rank.rank())));
                s.spawn(move || train(source, DataParallel::Rank(Arc::new(rank)), Some(&save)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let reference = train(&source, DataParallel::Emulate { world_size: WORLD }, None);
    let single = train(&source, DataParallel::Single, None);
    // Rank 0 alone wrote its checkpoint.
    assert!(dir.path().join("ckpt-rank0/state.json").is_file());
    assert!(!dir.path().join("ckpt-rank1").exists());
    assert!(reference.batches >= 2, "too few optimizer steps to compare: {}", reference.batches);
    assert_eq!(ranks[0].batches, reference.batches);

    // Every rank holds the same model, EMA and loss weights, bit for bit.
    for r in &ranks[1..] {
        assert_eq!(differing(&r.model, &ranks[0].model), 0, "model values differ between ranks");
        assert_eq!(differing(&r.ema, &ranks[0].ema), 0, "EMA values differ between ranks");
        assert_eq!(differing(&r.weights, &ranks[0].weights), 0, "loss weights differ between ranks");
        for (a, b) in r.reports.iter().zip(&ranks[0].reports) {
            assert_eq!((a.train_loss, a.val_loss), (b.train_loss, b.val_loss), "reports differ between ranks");
        }
    }
    // ... equal to the one-process run on the global batches to float32 rounding.
    let (model, ema, weights) = (
        relative(&ranks[0].model, &reference.model),
        relative(&ranks[0].ema, &reference.ema),
        relative(&ranks[0].weights, &reference.weights),
    );
    println!(
        "{} optimizer steps; relative difference to the one-process reference: model {model:.2e}, EMA {ema:.2e}, \
         loss weights {weights:.2e}",
        reference.batches * EPOCHS
    );
    assert!(model <= 1e-6 && ema <= 1e-6 && weights <= 1e-6, "model {model:e}, EMA {ema:e}, loss weights {weights:e}");
    for (a, b) in ranks[0].reports.iter().zip(&reference.reports) {
        assert!((a.train_loss - b.train_loss).abs() <= 1e-5 * b.train_loss.abs(), "{a:?} vs {b:?}");
    }
    // ... and not what the non-distributed schedule trains (the comparison can fail).
    assert!(relative(&single.model, &reference.model) > 1e-3, "the schedules did not differ");
}

#[test]
fn checkpoints_name_their_world_size_and_only_rank_0_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = store(dir.path());
    let mut config = config();
    config.epochs = 1;
    let mut emulated = trainer(config.clone(), &data, DataParallel::Emulate { world_size: WORLD });
    emulated.run_epoch(|_, _, _, _| {}).unwrap();
    let ckpt = dir.path().join("ckpt");
    emulated.save(&ckpt).unwrap();

    let mut single = trainer(config.clone(), &data, DataParallel::Single);
    let err = single.resume(&ckpt).unwrap_err().to_string();
    assert!(err.contains("2 rank(s), but this run has 1"), "{err}");
    let mut same = trainer(config.clone(), &data, DataParallel::Emulate { world_size: WORLD });
    same.resume(&ckpt).unwrap();
    assert_eq!(same.next_epoch(), 2);

    let none = Trainer::over(config, model(), &data).unwrap().parallel(DataParallel::Emulate { world_size: 0 }).build();
    assert!(none.unwrap_err().to_string().contains("world_size"));
}
