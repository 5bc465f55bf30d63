//! Training settings and what an epoch reports.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Training settings (Samudra's `train`/`experiment` words where they exist). The data, its
/// splits and the loader's settings belong to the data configuration
/// ([`om4_store::DataConfig`]; [`TrainerBuilder::loading`](crate::TrainerBuilder::loading),
/// [`DataRecord`](crate::DataRecord)).
///
/// Read only from checkpoints (a configuration file goes through [`RunConfig`](crate::RunConfig)),
/// so keys it no longer has, such as the splits older checkpoints kept here, are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainConfig {
    /// Epochs.
    pub epochs: usize,
    /// Peak learning rate (cosine-annealed per epoch to 0).
    pub learning_rate: f64,
    /// Samples per batch.
    pub batch_size: usize,
    /// History `hist`.
    pub hist: usize,
    /// Rollout steps in training (the whole run, unless `curriculum_steps` is set).
    pub steps: usize,
    /// Upstream's rollout-length curriculum (its `train.steps` as a list): the rollout lengths,
    /// switched at the epochs of `step_transition`; empty: `steps` throughout.
    pub curriculum_steps: Vec<usize>,
    /// Epochs at which the curriculum moves to its next length (upstream `step_transition`,
    /// one fewer than `curriculum_steps`, increasing).
    pub step_transition: Vec<usize>,
    /// Stride between states.
    pub data_stride: usize,
    /// Micro-batches per optimizer step.
    pub grad_accumulation: usize,
    /// Gradient-norm clip.
    pub grad_clip: f32,
    /// EMA decay (with warm-up `min(decay, (1+n)/(10+n))`).
    pub ema_decay: f64,
    /// Seed of the schedule and of initialization.
    pub rand_seed: u64,
    /// Samudra's dynamic per-variable loss weights (window 25), limited to `limit × min`; `None`: plain mean.
    pub dynamic_loss_limit: Option<f32>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 70,
            learning_rate: 6e-4,
            batch_size: 4,
            hist: 1,
            steps: 4,
            curriculum_steps: Vec::new(),
            step_transition: Vec::new(),
            data_stride: 1,
            grad_accumulation: 1,
            grad_clip: 1.0,
            ema_decay: 0.999,
            rand_seed: 15,
            dynamic_loss_limit: None,
        }
    }
}

impl TrainConfig {
    /// The rollout steps of `epoch` in a run that started (or resumed) at `start_epoch`, by
    /// upstream's rule (m2lines/Samudra 018a6a7, train.py:738-769): the loaders are rebuilt at the
    /// start epoch, with the length of the first transition at or after it (so a run resumed
    /// exactly at a transition epoch keeps the old length, as upstream's does), and at every
    /// transition epoch, which takes the next length.
    pub fn steps_at(&self, epoch: usize, start_epoch: usize) -> usize {
        if self.curriculum_steps.is_empty() {
            return self.steps;
        }
        let steps = &self.curriculum_steps;
        let at_start =
            self.step_transition.iter().position(|&t| start_epoch <= t).map_or(steps[steps.len() - 1], |i| steps[i]);
        // The last rebuild at or before `epoch` after the start decides.
        let later = self.step_transition.iter().enumerate().rev().find(|&(_, &t)| t > start_epoch && t <= epoch);
        later.map_or(at_start, |(i, _)| steps[i + 1])
    }

    /// Checks the curriculum.
    ///
    /// # Errors
    /// A message when the lengths and transitions do not fit together.
    pub fn check_curriculum(&self) -> std::result::Result<(), String> {
        let (steps, transitions) = (&self.curriculum_steps, &self.step_transition);
        if steps.is_empty() {
            return if transitions.is_empty() { Ok(()) } else { Err("step_transition without a list of steps".into()) };
        }
        if transitions.len() + 1 != steps.len() {
            return Err(format!(
                "{} steps need {} transitions, not {}",
                steps.len(),
                steps.len() - 1,
                transitions.len()
            ));
        }
        if steps.contains(&0) || transitions.windows(2).any(|w| w[0] >= w[1]) {
            return Err("steps must be at least 1 and transitions increasing".into());
        }
        Ok(())
    }
}

/// What one epoch did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EpochReport {
    /// Epoch (1-based).
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Mean validation loss (EMA weights, one step).
    pub val_loss: f64,
    /// Training samples per second.
    pub samples_per_s: f64,
    /// Median data wait per batch.
    pub wait_p50: Duration,
    /// 95th percentile data wait.
    pub wait_p95: Duration,
    /// Data wait as a share of the epoch's wall time.
    pub wait_share: f64,
    /// Wall time of the epoch (training and validation).
    pub wall: Duration,
    /// Bytes the training batches read from their source (this rank's).
    pub read_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curriculum_follows_upstream() {
        let c = TrainConfig { curriculum_steps: vec![1, 2, 4], step_transition: vec![3, 6], ..TrainConfig::default() };
        assert!(c.check_curriculum().is_ok());
        let run: Vec<usize> = (1..=8).map(|e| c.steps_at(e, 1)).collect();
        assert_eq!(run, [1, 1, 2, 2, 2, 4, 4, 4]);
        // Resumed exactly at a transition epoch: upstream picks the old length until the next one.
        let resumed: Vec<usize> = (3..=7).map(|e| c.steps_at(e, 3)).collect();
        assert_eq!(resumed, [1, 1, 1, 4, 4]);
        // Resumed between transitions, and after the last one.
        assert_eq!(c.steps_at(4, 4), 2);
        assert_eq!(c.steps_at(9, 7), 4);
        let bad = TrainConfig { curriculum_steps: vec![1, 2], step_transition: vec![], ..TrainConfig::default() };
        assert!(bad.check_curriculum().is_err());
        assert_eq!(TrainConfig::default().steps_at(5, 1), 4);
    }
}
