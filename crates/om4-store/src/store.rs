//! Opening a store: metadata, coordinates, the layout, and time selections.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::channel::{split_legacy, split_level};
use crate::dates::DateRange;
use crate::error::{Error, Result};
use crate::location::StoreLocation;
use crate::meta::{ArrayInfo, LocalMeta, discover};
use crate::time::TimeAxis;
use crate::zarr::{self, ZarrArray};

/// Names accepted for each dimension.
pub(crate) const TIME: &[&str] = &["time"];
pub(crate) const LEV: &[&str] = &["lev", "z_l"];
pub(crate) const Y: &[&str] = &["y", "lat"];
pub(crate) const X: &[&str] = &["x", "lon"];

/// How a store lays out its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One `(time, y, x)` array per channel (`thetao_4`).
    Flat,
    /// One `(time, lev, y, x)` or `(lev, time, y, x)` array per variable (`thetao`).
    Compact,
    /// Both kinds of arrays.
    Mixed,
    /// No data arrays found.
    Empty,
}

/// A contiguous range of physical time rows: what a date range selects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// Physical rows.
    pub rows: Range<usize>,
}

impl Selection {
    /// Positions in the selection.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// True when nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// An open OM4 Zarr store (v2 or v3, flat or compact, consolidated or not), in a local directory
/// or (feature `s3`) on object storage.
#[derive(Debug)]
pub struct Om4Store {
    /// The directory, or the URL as a path: how errors name the store.
    pub(crate) root: PathBuf,
    pub(crate) location: StoreLocation,
    pub(crate) arrays: BTreeMap<String, ArrayInfo>,
    pub(crate) fs: zarr::Store,
    pub(crate) time: Option<TimeAxis>,
    pub(crate) lev: Option<Vec<f64>>,
    /// Arrays whose metadata om4 cannot use, with the reason; refused when asked for.
    pub(crate) broken: BTreeMap<String, String>,
}

impl Om4Store {
    /// Opens the store at `root`: reads all array metadata and the `time` and `lev` coordinates.
    /// A `root` whose text is an `s3://bucket/path` URL opens that S3 store, configured from the
    /// `AWS_*` environment variables (see [`StoreLocation`]; [`open_location`](Self::open_location)
    /// takes explicit options).
    ///
    /// # Errors
    /// [`Error::Store`] when `root` is not a readable Zarr group, [`Error::Metadata`] for unusable
    /// `time` or `lev` coordinate metadata, [`Error::Time`] for a time axis that is not strictly
    /// increasing or has unknown units. Another array whose metadata om4 cannot use does not stop
    /// the store from opening: it is listed by [`broken_arrays`](Self::broken_arrays) and is an
    /// [`Error::Metadata`] when a channel asks for it.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_location(&StoreLocation::from_path(root.as_ref())?)
    }

    /// Opens the store at `location`, local or remote, with the same validation and reads.
    /// A remote store's one-plane chunks decode straight into place as a local store's do (the
    /// rest through zarrs); its consolidated metadata (v2 `.zmetadata`, or v3 in the root
    /// `zarr.json`), when present, makes opening one request plus the coordinate reads.
    ///
    /// # Errors
    /// As [`open`](Self::open); [`Error::Store`] for a remote store when om4-store was built
    /// without feature `s3`, when the client cannot be configured, or when the store's metadata
    /// cannot be fetched (the message names the object and the server's answer).
    pub fn open_location(location: &StoreLocation) -> Result<Self> {
        let root = location.display_path();
        let store_err = |reason: String| Error::Store { store: root.clone(), reason };
        #[cfg(feature = "s3")]
        let remote = |client: std::result::Result<crate::remote::Remote, crate::error::BoxError>| {
            let client = client.map_err(|e| store_err(format!("cannot configure the object-store client: {e}")))?;
            let fs = zarr::Store::remote_at(client, location.to_string());
            Ok::<_, Error>((discover(&fs, &root)?, fs))
        };
        let (found, fs) = match location {
            StoreLocation::Local(dir) => {
                let found = discover(&LocalMeta(dir), &root)?;
                (found, zarr::Store::open(dir).map_err(|e| store_err(e.to_string()))?)
            }
            #[cfg(feature = "s3")]
            StoreLocation::S3(s3) => remote(crate::remote::Remote::s3(s3))?,
            #[cfg(feature = "s3")]
            StoreLocation::Http(http) => remote(crate::remote::Remote::http(http))?,
            #[cfg(not(feature = "s3"))]
            StoreLocation::S3(_) | StoreLocation::Http(_) => {
                return Err(store_err("om4 was built without object-storage support (om4-store feature `s3`)".into()));
            }
        };
        let mut store = Self {
            root,
            location: location.clone(),
            arrays: found.arrays,
            fs,
            time: None,
            lev: None,
            broken: found.broken,
        };
        for coord in ["time", "lev"] {
            if let Some(e) = store.broken_error(coord) {
                return Err(e);
            }
        }
        let coords: Vec<&str> = ["time", "lev"].into_iter().filter(|c| store.arrays.contains_key(*c)).collect();
        let mut coords = store.read_coords(&coords)?;
        if let Some(info) = store.arrays.get("time") {
            let raw = coords.remove("time").unwrap_or_default();
            let units = info.attr("units").and_then(Value::as_str).map(str::to_string);
            let calendar = info.attr("calendar").and_then(Value::as_str).map(str::to_string);
            let axis = TimeAxis::decode(raw, units.as_deref(), calendar.as_deref())
                .map_err(|reason| Error::Time { store: store.root.clone(), reason })?;
            store.time = Some(axis);
        }
        store.lev = coords.remove("lev");
        Ok(store)
    }

    /// The values of the (small) arrays `names` as in [`read_coord`](Self::read_coord), keyed by
    /// name; from a remote store their requests go out together (one round trip, not one each).
    pub(crate) fn read_coords(&self, names: &[&str]) -> Result<BTreeMap<String, Vec<f64>>> {
        #[cfg(feature = "s3")]
        if let Some(remote) = self.fs.remote() {
            let values =
                remote.settle(names.len(), |i| self.read_coord(names[i])).map_err(|(tag, e)| Error::Metadata {
                    store: self.root.clone(),
                    array: names.get(tag).map_or_else(String::new, |n| n.to_string()),
                    reason: format!("cannot read it: {e}"),
                })?;
            return names.iter().zip(values).map(|(n, v)| Ok((n.to_string(), v?))).collect();
        }
        names.iter().map(|&n| Ok((n.to_string(), self.read_coord(n)?))).collect()
    }

    pub(crate) fn read_coord(&self, name: &str) -> Result<Vec<f64>> {
        let info = &self.arrays[name];
        let array = self.open_array(name)?;
        array.read_all_f64(&info.dtype).map_err(|e| Error::Metadata {
            store: self.root.clone(),
            array: name.to_string(),
            reason: format!("cannot read coordinate: {e}"),
        })
    }

    pub(crate) fn open_array(&self, name: &str) -> Result<ZarrArray> {
        let info = &self.arrays[name];
        ZarrArray::open(&self.fs, name, info.format, &info.metadata, &info.attrs, &info.shape).map_err(|e| {
            Error::Invalid {
                store: self.root.clone(),
                array: name.to_string(),
                reason: format!("zarrs cannot open it: {e}"),
            }
        })
    }

    /// Store root: the directory, or for a remote store its URL as a path (`s3://bucket/path`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the store lives.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// Requests sent to a remote store since it was opened (opening included); `None` for a local
    /// store. Differences of two readings count the requests of the reads between them.
    pub fn request_counts(&self) -> Option<crate::location::RequestCounts> {
        #[cfg(feature = "s3")]
        if let Some(remote) = self.fs.remote() {
            return Some(remote.counts());
        }
        None
    }

    /// Requests a remote store keeps in flight at most, now: the options' `concurrency`, or, left
    /// unset, what the measured round trips ask for (see [`RequestOptions`](crate::RequestOptions));
    /// `None` for a local store.
    pub fn requests_in_flight(&self) -> Option<usize> {
        #[cfg(feature = "s3")]
        if let Some(remote) = self.fs.remote() {
            return Some(remote.concurrency());
        }
        None
    }

    /// Metadata of every array.
    pub fn arrays(&self) -> &BTreeMap<String, ArrayInfo> {
        &self.arrays
    }

    /// The time coordinate, if the store has one.
    pub fn time(&self) -> Option<&TimeAxis> {
        self.time.as_ref()
    }

    /// Depth of each level (`lev` coordinate), if present.
    pub fn levels(&self) -> Option<&[f64]> {
        self.lev.as_deref()
    }

    pub(crate) fn is_data_array(info: &ArrayInfo) -> bool {
        let has_time = info.dims.as_ref().map_or(info.shape.len() >= 3, |d| d.iter().any(|n| n == "time"));
        has_time
            && (info.shape.len() == 3 || info.shape.len() == 4)
            && !info.name.starts_with("mask")
            && info.name != "wetmask"
    }

    /// The store's layout, from the data arrays present.
    pub fn layout(&self) -> Layout {
        let data: Vec<&ArrayInfo> = self.arrays.values().filter(|a| Self::is_data_array(a)).collect();
        let compact = data.iter().any(|a| a.shape.len() == 4);
        let flat = data.iter().any(|a| a.shape.len() == 3 && split_level(&a.name).is_some());
        match (flat, compact, data.is_empty()) {
            (_, _, true) => Layout::Empty,
            (true, true, _) => Layout::Mixed,
            (false, true, _) => Layout::Compact,
            _ => Layout::Flat,
        }
    }

    /// Every channel name the store offers (`thetao_0..18` for a compact `thetao` too), sorted.
    pub fn channel_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for info in self.arrays.values().filter(|a| Self::is_data_array(a)) {
            if info.shape.len() == 4 {
                let lev_first = info.dims.as_ref().is_some_and(|d| LEV.contains(&d[0].as_str()));
                let lev_axis = if lev_first { 0 } else { 1 };
                names.extend((0..info.shape[lev_axis]).map(|k| format!("{}_{k}", info.name)));
            } else if let (Some((var, depth)), Some(lev)) = (split_legacy(&info.name), self.lev.as_ref()) {
                match lev.iter().position(|&d| (d - depth).abs() < 1e-6) {
                    Some(k) => names.push(format!("{var}_{k}")),
                    None => names.push(info.name.clone()),
                }
            } else {
                names.push(info.name.clone());
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Arrays whose metadata om4 cannot use (name → reason). Asking for a channel they hold is an
    /// [`Error::Metadata`] with that reason.
    pub fn broken_arrays(&self) -> &BTreeMap<String, String> {
        &self.broken
    }

    pub(crate) fn broken_error(&self, array: &str) -> Option<Error> {
        self.broken.get(array).map(|reason| Error::Metadata {
            store: self.root.clone(),
            array: array.to_string(),
            reason: reason.clone(),
        })
    }

    pub(crate) fn invalid(&self, array: &str, reason: impl Into<String>) -> Error {
        Error::Invalid { store: self.root.clone(), array: array.to_string(), reason: reason.into() }
    }

    /// The rows of a [`DateRange`] (both ends included, at 12:00, as Samudra selects; see
    /// [`TimeAxis::select_inclusive`]); [`DateRange::ALL`] selects every row.
    ///
    /// # Errors
    /// [`Error::Time`] when the store has no CF time coordinate, or the range lies entirely outside
    /// the time axis.
    pub fn select(&self, range: &DateRange) -> Result<Selection> {
        match &self.time {
            Some(t) => t
                .select_inclusive(range)
                .map(|rows| Selection { rows })
                .map_err(|reason| Error::Time { store: self.root.clone(), reason }),
            None if range.is_all() => Err(Error::Time {
                store: self.root.clone(),
                reason: "the store has no time coordinate: use Selection { rows } with explicit rows".into(),
            }),
            None => {
                Err(Error::Time { store: self.root.clone(), reason: "no time coordinate to select dates from".into() })
            }
        }
    }
}
