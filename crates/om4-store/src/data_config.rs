//! The `data` section of a Samudra run: parsed in Samudra's words, validated once, opened once
//! into the training and validation splits.

use std::sync::Arc;

use om4_batch::ReadPool;
use om4_pipeline::LoaderConfig;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::source::{Om4Source, SourceConfig};
use crate::{DEPTH_VARS, DateRange, Om4Store, StoreLocation};

/// The `data` section of a Samudra run configuration, in Samudra's words.
///
/// Two forms parse (TOML, YAML or JSON through serde): Samudra's own, where one OM4 source sits in
/// a `sources` list (`{type: om4, data_location, prognostic_vars_key, boundary_vars_key,
/// train_time, val_time, …}`, as Samudra's `configs/data/om4_demo.yaml`), and the flat form of
/// om4's `configs/om4.toml`, with the same keys directly under `data`. Either form may name the
/// channels by Samudra's keys or list them (`prognostic`, `boundary`: om4's own words).
///
/// ```
/// use om4_store::DataConfig;
/// let data: DataConfig = serde_json::from_str(r#"{
///     "sources": [{"type": "om4", "data_location": "/data/om4/OM4.zarr",
///                  "train_time": {"start": "1975-01-03", "end": "2013-10-05"},
///                  "val_time": {"start": "2013-10-05", "end": "2014-10-05"}}],
///     "loading": {"type": "rust", "max_concurrent_reads": 8}
/// }"#)?;
/// assert_eq!(data.source.train_time.to_string(), "1975-01-03..2013-10-05");
/// assert_eq!(data.source.means().unwrap().to_string(), "/data/om4/OM4_means.zarr");
/// // data.open()? opens the store once and gives both splits
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawData")]
pub struct DataConfig {
    /// The store, its statistics, channels and time splits.
    pub source: DataSource,
    /// States of history per sample (Samudra's `hist`; the trainer's window).
    pub hist: usize,
    /// Normalize before masking (Samudra's default `true`).
    pub normalize_before_mask: bool,
    /// Value of land cells after normalization (`masked_fill_value`, default 0).
    pub masked_fill_value: f32,
    /// Threads of the store's read pool (Samudra's `loading.max_concurrent_reads`, default 32:
    /// reads from disk wait on I/O, and on page-cache reads more threads than cores cost nothing
    /// measurable).
    pub read_threads: usize,
    /// The loader's settings (the rest of Samudra's `loading`).
    pub loading: LoaderConfig,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            source: DataSource::default(),
            hist: 1,
            normalize_before_mask: true,
            masked_fill_value: 0.0,
            read_threads: Self::READ_THREADS,
            loading: LoaderConfig::default(),
        }
    }
}

/// One OM4 source: its locations, channels and time splits (an entry of Samudra's `sources`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataSource {
    /// Samudra's source type; om4 reads `om4` sources.
    #[serde(rename = "type")]
    pub kind: String,
    /// `OM4.zarr`: a path, an `s3://` or `http(s)://` URL, or Samudra's `{type: s3, …}` table
    /// (see [`StoreLocation`]).
    pub data_location: Option<StoreLocation>,
    /// `OM4_means.zarr`; default: beside the store.
    pub data_means_location: Option<StoreLocation>,
    /// `OM4_stds.zarr`; default: beside the store.
    pub data_stds_location: Option<StoreLocation>,
    /// Samudra's prognostic key: `thetao_1`, `thermo_dynamic_5`, `thermo_dynamic_all` (the
    /// default) or `thermo_all`; `_all` takes every level the store has (19 in OM4).
    pub prognostic_vars_key: Option<String>,
    /// Samudra's boundary key: `hfds` or `tau_hfds` (the default); `tau_hfds_hfds_anom` names a
    /// derived channel om4 refuses.
    pub boundary_vars_key: Option<String>,
    /// The prognostic channels by name, in model order (instead of `prognostic_vars_key`).
    pub prognostic: Option<Vec<String>>,
    /// The boundary channels by name (instead of `boundary_vars_key`); may be empty.
    pub boundary: Option<Vec<String>>,
    /// The training split.
    pub train_time: DateRange,
    /// The validation split.
    pub val_time: DateRange,
    /// Samudra's inference splits (read, not used in training).
    pub inference_times: Vec<DateRange>,
    /// Samudra's grid type (read, not used: om4 takes the grid from the store).
    pub grid_type: Option<String>,
    /// Levels of the per-level channel sets (om4's own key; default: the store's own levels).
    pub levels: Option<usize>,
}

fn om4_type() -> String {
    "om4".into()
}

impl Default for DataSource {
    fn default() -> Self {
        Self {
            kind: om4_type(),
            data_location: None,
            data_means_location: None,
            data_stds_location: None,
            prognostic_vars_key: None,
            boundary_vars_key: None,
            prognostic: None,
            boundary: None,
            train_time: DateRange::ALL,
            val_time: DateRange::ALL,
            inference_times: Vec::new(),
            grid_type: None,
            levels: None,
        }
    }
}

impl DataSource {
    /// The means store: as given, or `OM4_means.zarr` beside the store.
    pub fn means(&self) -> Option<StoreLocation> {
        self.data_means_location.clone().or_else(|| Some(self.data_location.as_ref()?.sibling("OM4_means.zarr")))
    }

    /// The standard deviations store: as given, or `OM4_stds.zarr` beside the store.
    pub fn stds(&self) -> Option<StoreLocation> {
        self.data_stds_location.clone().or_else(|| Some(self.data_location.as_ref()?.sibling("OM4_stds.zarr")))
    }

    /// The prognostic and boundary channels for a store with `levels` levels.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown Samudra key, or a key and a list both given.
    pub fn channels(&self, levels: usize) -> Result<(Vec<String>, Vec<String>)> {
        let per_level = |vars: &[&str], levels: usize| -> Vec<String> {
            vars.iter().flat_map(|v| (0..levels).map(move |k| format!("{v}_{k}"))).chain(["zos".to_string()]).collect()
        };
        let prognostic = match (&self.prognostic, self.prognostic_vars_key.as_deref()) {
            (Some(_), Some(_)) => return Err(both("prognostic")),
            (Some(list), None) => list.clone(),
            (None, None | Some("thermo_dynamic_all")) => per_level(&DEPTH_VARS, levels),
            (None, Some("thermo_dynamic_5")) => per_level(&DEPTH_VARS, 5),
            (None, Some("thermo_all")) => per_level(&["thetao", "so"], levels),
            (None, Some("thetao_1")) => vec!["thetao_0".into()],
            (None, Some(other)) => {
                return Err(Error::Config {
                    field: "prognostic_vars_key",
                    reason: format!(
                        "{other:?} is not one of thetao_1, thermo_dynamic_5, thermo_dynamic_all, thermo_all"
                    ),
                });
            }
        };
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let boundary = match (&self.boundary, self.boundary_vars_key.as_deref()) {
            (Some(_), Some(_)) => return Err(both("boundary")),
            (Some(list), None) => list.clone(),
            (None, None | Some("tau_hfds")) => names(&["tauuo", "tauvo", "hfds"]),
            (None, Some("hfds")) => names(&["hfds"]),
            (None, Some("tau_hfds_hfds_anom")) => names(&["tauuo", "tauvo", "hfds", "hfds_anomalies"]),
            (None, Some(other)) => {
                return Err(Error::Config {
                    field: "boundary_vars_key",
                    reason: format!("{other:?} is not one of hfds, tau_hfds, tau_hfds_hfds_anom"),
                });
            }
        };
        Ok((prognostic, boundary))
    }
}

fn both(what: &'static str) -> Error {
    Error::Config { field: what, reason: format!("give either `{what}` or `{what}_vars_key`, not both") }
}

/// A data configuration opened: the store once, its statistics and masks, both splits.
#[derive(Debug, Clone)]
pub struct DataSplits {
    /// The resolved source settings: locations and channel lists.
    pub spec: SourceConfig,
    /// The training split.
    pub train: Om4Source,
    /// The validation split.
    pub val: Om4Source,
}

impl DataConfig {
    /// Samudra's default `max_concurrent_reads`.
    pub const READ_THREADS: usize = 32;

    /// A configuration of Samudra's defaults over the store at `location` (statistics beside it,
    /// every time in both splits).
    pub fn at(location: impl Into<StoreLocation>) -> Self {
        Self { source: DataSource { data_location: Some(location.into()), ..DataSource::default() }, ..Self::default() }
    }

    /// Opens the store once, resolves the channels against its levels, loads statistics and
    /// masks, and selects both splits; the read pool has `read_threads` threads.
    ///
    /// # Errors
    /// [`Error::Config`] for a missing `data_location` or bad channel settings; any store,
    /// validation, statistics or time-range error.
    pub fn open(&self) -> Result<DataSplits> {
        let source = &self.source;
        let data = source.data_location.clone().ok_or(Error::Config {
            field: "data_location",
            reason: "no store given (data.data_location, or data.sources[0].data_location)".into(),
        })?;
        let store = Arc::new(Om4Store::open_location(&data)?);
        let (prognostic, boundary) = source.channels(source.levels.unwrap_or_else(|| levels(&store)))?;
        let spec = SourceConfig {
            means: source.means().expect("a store is given"),
            stds: source.stds().expect("a store is given"),
            data,
            prognostic,
            boundary,
            normalize_before_mask: self.normalize_before_mask,
            masked_fill_value: self.masked_fill_value,
        };
        let pool = ReadPool::new(self.read_threads)?;
        let all = Om4Source::from_store(store, &spec, pool)?;
        let (train, val) = (all.with_range(&source.train_time)?, all.with_range(&source.val_time)?);
        Ok(DataSplits { spec, train, val })
    }
}

/// The store's levels: its `lev` coordinate, else the highest `thetao_<k>` channel + 1, else 19
/// (OM4's).
fn levels(store: &Om4Store) -> usize {
    if let Some(lev) = store.levels() {
        return lev.len();
    }
    let flat = store.channel_names().iter().filter_map(|n| n.strip_prefix("thetao_")?.parse::<usize>().ok()).max();
    flat.map_or(19, |k| k + 1)
}

/// Both forms as written; [`DataConfig`] takes exactly one source from them.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawData {
    sources: Option<Vec<DataSource>>,
    #[serde(rename = "type")]
    kind: String,
    data_location: Option<StoreLocation>,
    data_means_location: Option<StoreLocation>,
    data_stds_location: Option<StoreLocation>,
    prognostic_vars_key: Option<String>,
    boundary_vars_key: Option<String>,
    prognostic: Option<Vec<String>>,
    boundary: Option<Vec<String>>,
    train_time: Option<DateRange>,
    val_time: Option<DateRange>,
    inference_times: Vec<DateRange>,
    grid_type: Option<String>,
    levels: Option<usize>,
    hist: usize,
    normalize_before_mask: bool,
    masked_fill_value: f32,
    loading: RawLoading,
    /// Samudra's switch for overlapping loading with compute: om4's loader always overlaps.
    concurrent_compute: bool,
    /// Samudra's choice among its own loaders: om4 is the loader.
    loader_version: Option<String>,
}

/// Samudra's `loading` as written: the read pool's size beside the loader's settings.
#[derive(Deserialize)]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
struct RawLoading {
    max_concurrent_reads: usize,
    loader: LoaderConfig,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for RawLoading {
    type Error = String;

    fn try_from(mut map: serde_json::Map<String, serde_json::Value>) -> std::result::Result<Self, String> {
        let max_concurrent_reads = match map.remove("max_concurrent_reads") {
            None => DataConfig::READ_THREADS,
            Some(n) => serde_json::from_value(n).map_err(|e| format!("loading.max_concurrent_reads: {e}"))?,
        };
        let loader = serde_json::from_value(map.into()).map_err(|e| format!("loading: {e}"))?;
        Ok(Self { max_concurrent_reads, loader })
    }
}

impl Default for RawData {
    fn default() -> Self {
        let d = DataConfig::default();
        Self {
            sources: None,
            kind: om4_type(),
            data_location: None,
            data_means_location: None,
            data_stds_location: None,
            prognostic_vars_key: None,
            boundary_vars_key: None,
            prognostic: None,
            boundary: None,
            train_time: None,
            val_time: None,
            inference_times: Vec::new(),
            grid_type: None,
            levels: None,
            hist: d.hist,
            normalize_before_mask: d.normalize_before_mask,
            masked_fill_value: d.masked_fill_value,
            loading: RawLoading { max_concurrent_reads: d.read_threads, loader: d.loading },
            concurrent_compute: false,
            loader_version: None,
        }
    }
}

impl TryFrom<RawData> for DataConfig {
    type Error = String;

    fn try_from(raw: RawData) -> std::result::Result<Self, String> {
        let flat = DataSource {
            kind: raw.kind,
            data_location: raw.data_location,
            data_means_location: raw.data_means_location,
            data_stds_location: raw.data_stds_location,
            prognostic_vars_key: raw.prognostic_vars_key,
            boundary_vars_key: raw.boundary_vars_key,
            prognostic: raw.prognostic,
            boundary: raw.boundary,
            train_time: raw.train_time.unwrap_or_default(),
            val_time: raw.val_time.unwrap_or_default(),
            inference_times: raw.inference_times,
            grid_type: raw.grid_type,
            levels: raw.levels,
        };
        let source = match raw.sources {
            None => flat,
            Some(_) if flat != DataSource::default() => {
                return Err("give the source's keys either in `sources` or directly under `data`, not both".into());
            }
            Some(mut sources) if sources.len() == 1 => sources.remove(0),
            Some(sources) => {
                return Err(format!("om4 trains on one source; `sources` lists {}", sources.len()));
            }
        };
        if source.kind != "om4" {
            return Err(format!("source type {:?}: om4 reads `om4` sources", source.kind));
        }
        Ok(Self {
            source,
            hist: raw.hist,
            normalize_before_mask: raw.normalize_before_mask,
            masked_fill_value: raw.masked_fill_value,
            read_threads: raw.loading.max_concurrent_reads,
            loading: raw.loading.loader,
        })
    }
}
