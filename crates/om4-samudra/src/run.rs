//! A training run's configuration file in Samudra's words (`experiment`, `data`, `train`,
//! `model`), read once and turned into the library's settings.

use std::path::Path;

use om4_store::DataConfig;
use serde::Deserialize;

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::model::SamudraConfig;

/// A training run as `train_samudra --config` reads it: TOML or YAML with the sections
/// `experiment`, `data` ([`DataConfig`]: Samudra's `sources` form or om4's flat form), `train` and
/// `model` (see `configs/om4.toml`). Every key is optional; an unknown key is an error.
///
/// ```
/// use om4_samudra::RunConfig;
/// let run: RunConfig = toml::from_str(r#"
///     [data]
///     data_location = "/data/om4/OM4.zarr"
///     train_time = { start = "1975-01-03", end = "2013-10-05" }
///     [train]
///     steps = [1, 2, 4]
///     step_transition = [10, 20]
///     [model]
///     name = "v2"
/// "#)?;
/// let train = run.train_config()?;
/// assert_eq!((train.steps, train.curriculum_steps.len(), train.epochs), (1, 3, 70));
/// assert_eq!(run.model_config()?, om4_samudra::SamudraConfig::v2());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// `experiment`: the seed.
    pub experiment: ExperimentSection,
    /// `data`: store, statistics, channels, splits, loading.
    pub data: DataConfig,
    /// `train`: the optimization.
    pub train: TrainSection,
    /// `model`: the architecture.
    pub model: ModelSection,
}

/// The `experiment` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentSection {
    /// Seed of the schedule and of initialization (default 15).
    pub rand_seed: Option<u64>,
    /// Samudra's experiment name (read, not used).
    pub name: Option<String>,
}

/// The `train` section; absent keys take [`TrainConfig`]'s defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainSection {
    /// Epochs.
    pub epochs: Option<usize>,
    /// Peak learning rate.
    pub learning_rate: Option<f64>,
    /// Samples per batch (per rank).
    pub batch_size: Option<usize>,
    /// One rollout length, or upstream's curriculum list (with `step_transition`).
    pub steps: Option<Steps>,
    /// Epochs at which the curriculum takes its next length.
    pub step_transition: Option<Vec<usize>>,
    /// Stride between states.
    pub data_stride: Option<usize>,
    /// Micro-batches per optimizer step (Samudra: `gradient_accumulation_steps`).
    #[serde(alias = "gradient_accumulation_steps")]
    pub grad_accumulation: Option<usize>,
    /// Samudra's dynamic loss weights with this limit (v2 configs use 20).
    pub dynamic_loss_limit: Option<f32>,
}

/// `steps = 4` or, as upstream's curriculum, `steps = [1, 2, 4]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Steps {
    /// One length throughout.
    One(usize),
    /// Upstream's curriculum: a length per stage.
    Curriculum(Vec<usize>),
}

/// The `model` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSection {
    /// `tiny` (default), `v1`, `v2` or `v2_highres`.
    pub name: Option<String>,
    /// The U-Net in bfloat16, the head in float32 (upstream's `use_bfloat16`).
    pub use_bfloat16: Option<bool>,
}

impl RunConfig {
    /// Reads a TOML file, or YAML for `.yaml`/`.yml`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file: unreadable, not valid TOML/YAML, an unknown key, a bad value.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bad = |reason: String| Error::Config { field: "--config", reason: format!("{}: {reason}", path.display()) };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            serde_yaml::from_str(&text).map_err(|e| bad(e.to_string()))
        } else {
            toml::from_str(&text).map_err(|e| bad(e.to_string()))
        }
    }

    /// The training settings: the file's, [`TrainConfig`]'s defaults for the rest; the window
    /// comes from `data.hist` (the splits and loading settings stay in `data`).
    ///
    /// # Errors
    /// [`Error::Config`] for a curriculum whose lengths and transitions do not fit.
    pub fn train_config(&self) -> Result<TrainConfig> {
        let (t, d) = (&self.train, TrainConfig::default());
        let (steps, curriculum_steps) = match &t.steps {
            None => (d.steps, Vec::new()),
            Some(Steps::One(n)) => (*n, Vec::new()),
            Some(Steps::Curriculum(list)) => (list.first().copied().unwrap_or(d.steps), list.clone()),
        };
        let config = TrainConfig {
            epochs: t.epochs.unwrap_or(d.epochs),
            learning_rate: t.learning_rate.unwrap_or(d.learning_rate),
            batch_size: t.batch_size.unwrap_or(d.batch_size),
            hist: self.data.hist,
            steps,
            curriculum_steps,
            step_transition: t.step_transition.clone().unwrap_or_default(),
            data_stride: t.data_stride.unwrap_or(d.data_stride),
            grad_accumulation: t.grad_accumulation.unwrap_or(d.grad_accumulation),
            rand_seed: self.experiment.rand_seed.unwrap_or(d.rand_seed),
            dynamic_loss_limit: t.dynamic_loss_limit,
            ..d
        };
        config.check_curriculum().map_err(|reason| Error::Config { field: "train.steps/step_transition", reason })?;
        Ok(config)
    }

    /// The architecture (`tiny` unless named), with `use_bfloat16`.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown model name.
    pub fn model_config(&self) -> Result<SamudraConfig> {
        let name = self.model.name.as_deref().unwrap_or("tiny");
        let config = SamudraConfig::named(name).ok_or_else(|| Error::Config {
            field: "model.name",
            reason: format!("unknown model {name:?} (tiny, v1, v2, v2_highres)"),
        })?;
        Ok(SamudraConfig { use_bfloat16: self.model.use_bfloat16.unwrap_or(false), ..config })
    }
}
