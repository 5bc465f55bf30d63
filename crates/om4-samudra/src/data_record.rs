//! [`DataRecord`]: the data a run trains on, as its checkpoints record it, so that a resume on
//! other data is an error that names the difference.

use om4_store::{DataConfig, DataSplits, DateRange};
use serde::{Deserialize, Serialize};

/// What a checkpoint records of the data it was trained on: the stores, the resolved channels,
/// how inputs are normalized and masked, and both time splits. A resume whose record differs is
/// refused ([`Trainer::resume`](crate::Trainer::resume)), naming each difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataRecord {
    /// The data store (`OM4.zarr`), as its location prints.
    pub store: String,
    /// The means store.
    pub means: String,
    /// The standard-deviation store.
    pub stds: String,
    /// Prognostic channels, in order.
    pub prognostic: Vec<String>,
    /// Boundary channels, in order.
    pub boundary: Vec<String>,
    /// Whether inputs are normalized before land is masked.
    pub normalize_before_mask: bool,
    /// The value land takes.
    pub masked_fill_value: f32,
    /// The training split.
    pub train_time: DateRange,
    /// The validation split.
    pub val_time: DateRange,
}

impl DataRecord {
    /// The record of `splits`, opened from `config`.
    pub fn new(config: &DataConfig, splits: &DataSplits) -> Self {
        let spec = &splits.spec;
        Self {
            store: spec.data.to_string(),
            means: spec.means.to_string(),
            stds: spec.stds.to_string(),
            prognostic: spec.prognostic.clone(),
            boundary: spec.boundary.clone(),
            normalize_before_mask: spec.normalize_before_mask,
            masked_fill_value: spec.masked_fill_value,
            train_time: config.source.train_time,
            val_time: config.source.val_time,
        }
    }

    /// What differs from `other`, one phrase per field (`store: A → B`); empty when equal.
    pub fn differences(&self, other: &DataRecord) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{name}: {a} → {b}"));
            }
        };
        field("store", self.store.clone(), other.store.clone());
        field("means", self.means.clone(), other.means.clone());
        field("stds", self.stds.clone(), other.stds.clone());
        field(
            "prognostic channels",
            channels(&self.prognostic, &other.prognostic),
            channels(&other.prognostic, &self.prognostic),
        );
        field(
            "boundary channels",
            channels(&self.boundary, &other.boundary),
            channels(&other.boundary, &self.boundary),
        );
        field("normalize_before_mask", self.normalize_before_mask.to_string(), other.normalize_before_mask.to_string());
        field("masked_fill_value", self.masked_fill_value.to_string(), other.masked_fill_value.to_string());
        field("train_time", self.train_time.to_string(), other.train_time.to_string());
        field("val_time", self.val_time.to_string(), other.val_time.to_string());
        out
    }
}

/// `list`, shortened to what sets it apart from `other` when both are long: the count and the
/// names only one of them has (or the first position where the order differs).
fn channels(list: &[String], other: &[String]) -> String {
    if list == other || list.len() + other.len() <= 12 {
        return format!("[{}]", list.join(", "));
    }
    let only: Vec<&str> = list.iter().filter(|c| !other.contains(c)).map(String::as_str).collect();
    if !only.is_empty() {
        return format!("{} channels, {} not in the other: [{}]", list.len(), only.len(), only.join(", "));
    }
    match list.iter().zip(other).position(|(a, b)| a != b) {
        Some(i) => format!("{} channels, position {i} is {}", list.len(), list[i]),
        None => format!("{} channels", list.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> DataRecord {
        DataRecord {
            store: "/data/OM4.zarr".into(),
            means: "/data/OM4_means.zarr".into(),
            stds: "/data/OM4_stds.zarr".into(),
            prognostic: (0..20).map(|i| format!("thetao_lev_{i}")).collect(),
            boundary: vec!["tauuo".into(), "tauvo".into(), "hfds".into()],
            normalize_before_mask: true,
            masked_fill_value: 0.0,
            train_time: "..1958-04-01".parse().unwrap(),
            val_time: "1958-03-01..".parse().unwrap(),
        }
    }

    #[test]
    fn a_record_survives_json_and_equal_records_differ_in_nothing() {
        let r = record();
        let back: DataRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(r.differences(&back).is_empty());
    }

    #[test]
    fn each_difference_is_named() {
        let a = record();
        let mut b = record();
        b.store = "/other/OM4.zarr".into();
        b.train_time = "..1959-01-01".parse().unwrap();
        b.prognostic[3] = "so_lev_3".into();
        b.boundary.swap(0, 1);
        let d = a.differences(&b);
        assert_eq!(d.len(), 4, "{d:?}");
        assert_eq!(d[0], "store: /data/OM4.zarr → /other/OM4.zarr");
        assert!(d[1].starts_with("prognostic channels: 20 channels, 1 not in the other: [thetao_lev_3]"), "{d:?}");
        assert_eq!(d[2], "boundary channels: [tauuo, tauvo, hfds] → [tauvo, tauuo, hfds]");
        assert!(
            d[3].starts_with("train_time: ") && d[3].contains("1958-04-01") && d[3].contains("1959-01-01"),
            "{d:?}"
        );
    }
}
