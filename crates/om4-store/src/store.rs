//! Opening a store, resolving and validating channels, and reading planes into caller buffers.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use om4_batch::{Grid, LandMask};
use serde::Serialize;
use serde_json::Value;

use crate::channel::{derived_reason, split_legacy, split_level};
use crate::direct::DirectArray;
use crate::error::{Error, Result};
use crate::meta::{ArrayInfo, Fill, discover};
use crate::pool::ReadPool;
use crate::time::TimeAxis;
use crate::zarr::{self, Axes, ZarrArray};
use rayon::prelude::*;

/// Names accepted for each dimension.
const TIME: &[&str] = &["time"];
const LEV: &[&str] = &["lev", "z_l"];
const Y: &[&str] = &["y", "lat"];
const X: &[&str] = &["x", "lon"];

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

/// Where one channel's planes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Channel {
    /// The requested name (`thetao_4`, `zos`).
    pub name: String,
    /// The array holding it.
    pub array: String,
    /// Level index (`None` for a level-free channel).
    pub level: Option<usize>,
    /// True when the level is an axis of the array (compact layout).
    pub compact: bool,
}

impl Channel {
    /// Level whose land mask applies: the channel's level, 0 for level-free channels.
    pub fn mask_level(&self) -> usize {
        self.level.unwrap_or(0)
    }
    /// Variable name (`thetao` for `thetao_4`).
    pub fn var(&self) -> &str {
        match self.level {
            Some(_) if !self.compact => split_level(&self.name).map_or(self.name.as_str(), |(v, _)| v),
            Some(_) => &self.array,
            None => &self.name,
        }
    }
}

#[derive(Debug)]
struct OpenArray {
    name: String,
    axes: Axes,
    /// Levels along the level axis (1 for a `(time, y, x)` array).
    levels: usize,
    array: ZarrArray,
    /// Set when the chunks are single planes of plain float32 (decoded without zarrs).
    direct: Option<DirectArray>,
}

#[derive(Debug, Clone)]
struct RunSpec {
    array: usize,
    levels: Range<u64>,
    first_channel: usize,
}

impl RunSpec {
    /// Planes the run reads per time step.
    fn planes(&self) -> usize {
        (self.levels.end - self.levels.start) as usize
    }
}

/// Splits `out` into consecutive slices of the given lengths (one per task), so that parallel
/// tasks each own their part.
fn carve(out: &mut [f32], lens: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut rest = out;
    lens.map(|n| {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
        rest = tail;
        head
    })
    .collect()
}

/// What [`Om4Store::read_decode_reference`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDecodeTimes {
    /// Reading every chunk file whole into memory.
    pub read: std::time::Duration,
    /// Decoding them into the output.
    pub decode: std::time::Duration,
    /// Bytes of the chunk files.
    pub compressed_bytes: u64,
}

/// A validated list of channels of one store, with their arrays open: resolve once, read many times.
#[derive(Debug, Clone)]
pub struct ChannelSet {
    channels: Vec<Channel>,
    arrays: Arc<Vec<OpenArray>>,
    runs: Vec<RunSpec>,
    time_len: usize,
    grid: Grid,
}

impl ChannelSet {
    /// The channels, in the requested order.
    pub fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// Levels of array `array` of the set (1 for a `(time, y, x)` array); `None` when no
    /// channel of the set reads it.
    pub fn levels_of(&self, array: &str) -> Option<usize> {
        self.arrays.iter().find(|a| a.name == array).map(|a| a.levels)
    }
    /// Number of channels.
    pub fn len(&self) -> usize {
        self.channels.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }
    /// Plane size.
    pub fn grid(&self) -> Grid {
        self.grid
    }
    /// Time steps of the arrays.
    pub fn time_len(&self) -> usize {
        self.time_len
    }
    /// Every time step of the arrays, for stores read by position.
    pub fn all_rows(&self) -> Selection {
        Selection { rows: 0..self.time_len }
    }

    /// Decode calls one time step takes (channels of a compact array with consecutive levels share one).
    pub fn runs_per_time(&self) -> usize {
        self.runs.len()
    }

    /// Arrays whose one-plane chunks are decoded directly into place rather than through zarrs.
    pub fn direct_arrays(&self) -> usize {
        self.arrays.iter().filter(|a| a.direct.is_some()).count()
    }

    /// The same channels read through zarrs only: the reference the direct path is checked against.
    pub fn zarrs_only(&self) -> Self {
        let arrays = self
            .arrays
            .iter()
            .map(|a| OpenArray {
                name: a.name.clone(),
                axes: a.axes,
                levels: a.levels,
                array: a.array.clone(),
                direct: None,
            })
            .collect();
        Self { arrays: Arc::new(arrays), ..self.clone() }
    }
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

/// An open OM4 Zarr store (v2 or v3, flat or compact, consolidated or not) on the local file system.
#[derive(Debug)]
pub struct Om4Store {
    root: PathBuf,
    arrays: BTreeMap<String, ArrayInfo>,
    fs: zarr::Store,
    time: Option<TimeAxis>,
    lev: Option<Vec<f64>>,
    /// Arrays whose metadata om4 cannot use, with the reason; refused when asked for.
    broken: BTreeMap<String, String>,
}

impl Om4Store {
    /// Opens the store at `root`: reads all array metadata and the `time` and `lev` coordinates.
    ///
    /// # Errors
    /// [`Error::Store`] when `root` is not a readable Zarr group, [`Error::Metadata`] for unusable
    /// `time` or `lev` coordinate metadata, [`Error::Time`] for a time axis that is not strictly
    /// increasing or has unknown units. Another array whose metadata om4 cannot use does not stop
    /// the store from opening: it is listed by [`broken_arrays`](Self::broken_arrays) and is an
    /// [`Error::Metadata`] when a channel asks for it.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let found = discover(&root)?;
        let fs = zarr::Store::open(&root).map_err(|e| Error::Store { store: root.clone(), reason: e.to_string() })?;
        let mut store = Self { root, arrays: found.arrays, fs, time: None, lev: None, broken: found.broken };
        for coord in ["time", "lev"] {
            if let Some(e) = store.broken_error(coord) {
                return Err(e);
            }
        }
        if let Some(info) = store.arrays.get("time") {
            let raw = store.read_coord("time")?;
            let units = info.attr("units").and_then(Value::as_str).map(str::to_string);
            let calendar = info.attr("calendar").and_then(Value::as_str).map(str::to_string);
            let axis = TimeAxis::decode(raw, units.as_deref(), calendar.as_deref())
                .map_err(|reason| Error::Time { store: store.root.clone(), reason })?;
            store.time = Some(axis);
        }
        if store.arrays.contains_key("lev") {
            store.lev = Some(store.read_coord("lev")?);
        }
        Ok(store)
    }

    fn read_coord(&self, name: &str) -> Result<Vec<f64>> {
        let info = &self.arrays[name];
        let array = self.open_array(name)?;
        array.read_all_f64(&info.dtype).map_err(|e| Error::Metadata {
            store: self.root.clone(),
            array: name.to_string(),
            reason: format!("cannot read coordinate: {e}"),
        })
    }

    fn open_array(&self, name: &str) -> Result<ZarrArray> {
        let info = &self.arrays[name];
        let v2 = info.v2_metadata.as_ref().map(|meta| (meta, &info.attrs));
        ZarrArray::open(&self.fs, name, v2, &info.shape).map_err(|e| Error::Invalid {
            store: self.root.clone(),
            array: name.to_string(),
            reason: format!("zarrs cannot open it: {e}"),
        })
    }

    /// Store root.
    pub fn root(&self) -> &Path {
        &self.root
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

    fn is_data_array(info: &ArrayInfo) -> bool {
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

    fn broken_error(&self, array: &str) -> Option<Error> {
        self.broken.get(array).map(|reason| Error::Metadata {
            store: self.root.clone(),
            array: array.to_string(),
            reason: reason.clone(),
        })
    }

    fn invalid(&self, array: &str, reason: impl Into<String>) -> Error {
        Error::Invalid { store: self.root.clone(), array: array.to_string(), reason: reason.into() }
    }

    /// Finds the array and level behind a channel name, without validating the array.
    ///
    /// # Errors
    /// [`Error::DerivedChannel`] for a derived channel the store does not hold,
    /// [`Error::UnknownChannel`] for a name it does not hold, [`Error::Invalid`] for a level out of
    /// range, [`Error::Metadata`] for an array whose metadata om4 cannot use.
    pub fn resolve(&self, name: &str) -> Result<Channel> {
        let unknown =
            |reason: String| Error::UnknownChannel { store: self.root.clone(), channel: name.to_string(), reason };
        for array in [Some(name), split_level(name).map(|(var, _)| var)].into_iter().flatten() {
            if let Some(e) = self.broken_error(array) {
                return Err(e);
            }
        }
        if let Some(info) = self.arrays.get(name)
            && info.shape.len() != 4
        {
            let level = split_level(name).map(|(_, k)| k);
            return Ok(Channel { name: name.to_string(), array: name.to_string(), level, compact: false });
        }
        if let Some((var, level)) = split_level(name) {
            if let Some(info) = self.arrays.get(var).filter(|a| a.shape.len() == 4) {
                let axes = self.axes_of(info)?;
                let nlev = axes.levels(&info.shape);
                if level as u64 >= nlev {
                    return Err(self.invalid(
                        var,
                        format!("channel {name:?} asks for level {level}, but the array has {nlev} levels"),
                    ));
                }
                return Ok(Channel {
                    name: name.to_string(),
                    array: var.to_string(),
                    level: Some(level),
                    compact: true,
                });
            }
            if let Some(lev) = &self.lev {
                let legacy = self.arrays.keys().find(|a| {
                    split_legacy(a)
                        .is_some_and(|(v, depth)| v == var && lev.get(level).is_some_and(|&d| (d - depth).abs() < 1e-6))
                });
                if let Some(array) = legacy {
                    return Ok(Channel {
                        name: name.to_string(),
                        array: array.clone(),
                        level: Some(level),
                        compact: false,
                    });
                }
                let var_known = self.arrays.keys().any(|a| split_legacy(a).is_some_and(|(v, _)| v == var));
                if var_known && level >= lev.len() {
                    return Err(unknown(format!("level {level} is out of range: the store has {} levels", lev.len())));
                }
            }
        }
        if let Some(reason) = derived_reason(name) {
            return Err(Error::DerivedChannel { store: self.root.clone(), channel: name.to_string(), reason });
        }
        let mut near: Vec<String> = self.channel_names();
        near.truncate(8);
        Err(unknown(format!(
            "no array {name:?}, compact variable or legacy name holds it (channels include: {})",
            near.join(", ")
        )))
    }

    fn axes_of(&self, info: &ArrayInfo) -> Result<Axes> {
        let dims: Vec<String> = match &info.dims {
            Some(d) => d.clone(),
            None => match info.shape.len() {
                3 => vec!["time".into(), "y".into(), "x".into()],
                4 => vec!["time".into(), "lev".into(), "y".into(), "x".into()],
                n => {
                    return Err(self.invalid(
                        &info.name,
                        format!("rank {n}: a channel array must be (time, y, x) or (time, lev, y, x)"),
                    ));
                }
            },
        };
        if dims.len() != info.shape.len() {
            return Err(
                self.invalid(&info.name, format!("{} dimension names for rank {}", dims.len(), info.shape.len()))
            );
        }
        let is = |d: &str, names: &[&str]| names.contains(&d);
        let d: Vec<&str> = dims.iter().map(String::as_str).collect();
        match d.as_slice() {
            [t, y, x] if is(t, TIME) && is(y, Y) && is(x, X) => Ok(Axes::TimeYX),
            [t, l, y, x] if is(t, TIME) && is(l, LEV) && is(y, Y) && is(x, X) => Ok(Axes::TimeLevYX),
            [l, t, y, x] if is(t, TIME) && is(l, LEV) && is(y, Y) && is(x, X) => Ok(Axes::LevTimeYX),
            _ => Err(self.invalid(
                &info.name,
                format!("dimensions {dims:?}: expected (time, y|lat, x|lon), (time, lev, y, x) or (lev, time, y, x)"),
            )),
        }
    }

    /// Checks that an array can be read as float32 planes without unpacking or sentinels.
    fn check_data_array(&self, info: &ArrayInfo) -> Result<Axes> {
        if info.dtype != "float32" {
            return Err(self.invalid(&info.name, format!("dtype is {}, om4 reads float32 only", info.dtype)));
        }
        for key in ["scale_factor", "add_offset"] {
            if let Some(v) = info.attr(key) {
                return Err(self.invalid(
                    &info.name,
                    format!("packed data ({key} = {v}): om4 does not unpack; store unpacked float32 values"),
                ));
            }
        }
        for key in ["_FillValue", "missing_value"] {
            match info.attr(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s.eq_ignore_ascii_case("nan") => {}
                Some(v) => {
                    return Err(self.invalid(
                        &info.name,
                        format!("{key} = {v} marks missing data with a sentinel; om4 expects NaN for missing values"),
                    ));
                }
            }
        }
        match &info.fill {
            Fill::Nan | Fill::Null => {}
            Fill::Number(x) => {
                return Err(self.invalid(
                    &info.name,
                    format!("Zarr fill value {x} is not NaN: missing chunks would read as {x}, not as missing"),
                ));
            }
            Fill::Other(s) => {
                return Err(self.invalid(&info.name, format!("unsupported Zarr fill value {s}")));
            }
        }
        if let Some(i) = info.shape.iter().position(|&n| n == 0) {
            return Err(self.invalid(&info.name, format!("dimension {i} has size 0 (shape {:?})", info.shape)));
        }
        self.axes_of(info)
    }

    /// Resolves and validates channels, and opens their arrays. Nothing is decoded.
    ///
    /// # Errors
    /// Any resolution error of [`resolve`](Self::resolve); [`Error::Invalid`] for an array that is not
    /// float32, is packed, has a sentinel fill value, a zero-size or wrongly named dimension or the
    /// wrong rank; [`Error::GridMismatch`] when the arrays do not share one `(time, y, x)` grid (or
    /// disagree with the time coordinate).
    pub fn channels<S: AsRef<str>>(&self, names: &[S]) -> Result<ChannelSet> {
        if names.is_empty() {
            return Err(Error::Request { reason: "no channels requested".into() });
        }
        let mut channels = Vec::with_capacity(names.len());
        let mut open: Vec<OpenArray> = Vec::new();
        let mut first: Option<(String, [u64; 3])> = None;
        for name in names {
            let ch = self.resolve(name.as_ref())?;
            let info = &self.arrays[&ch.array];
            let axes = self.check_data_array(info)?;
            let grid = match axes {
                Axes::TimeYX => [info.shape[0], info.shape[1], info.shape[2]],
                Axes::TimeLevYX => [info.shape[0], info.shape[2], info.shape[3]],
                Axes::LevTimeYX => [info.shape[1], info.shape[2], info.shape[3]],
            };
            if ch.compact != (axes != Axes::TimeYX) {
                return Err(self.invalid(&ch.array, "rank does not match the channel's layout"));
            }
            match &first {
                None => {
                    if let Some(t) = &self.time
                        && t.len() as u64 != grid[0]
                    {
                        return Err(Error::GridMismatch {
                            store: self.root.clone(),
                            array: ch.array.clone(),
                            found: grid,
                            first: "time".into(),
                            expected: [t.len() as u64, grid[1], grid[2]],
                        });
                    }
                    first = Some((ch.array.clone(), grid));
                }
                Some((a, g)) if *g != grid => {
                    return Err(Error::GridMismatch {
                        store: self.root.clone(),
                        array: ch.array.clone(),
                        found: grid,
                        first: a.clone(),
                        expected: *g,
                    });
                }
                Some(_) => {}
            }
            if !open.iter().any(|o| o.name == ch.array) {
                // the unit of decoding: the chunk, or the inner chunk of a shard
                let unit = info.inner_chunks.as_ref().unwrap_or(&info.chunks);
                let one_plane = match axes {
                    Axes::TimeYX => *unit == [1, grid[1], grid[2]],
                    _ => *unit == [1, 1, grid[1], grid[2]],
                };
                let sharded_ok = cfg!(unix) || info.inner_chunks.is_none();
                let direct = info
                    .plain
                    .clone()
                    .filter(|_| one_plane && sharded_ok && info.fill == Fill::Nan)
                    .map(|plain| DirectArray::new(self.root.join(&ch.array), plain, axes));
                let (levels, array) = (axes.levels(&info.shape) as usize, self.open_array(&ch.array)?);
                open.push(OpenArray { name: ch.array.clone(), axes, levels, array, direct });
            }
            channels.push(ch);
        }
        let [t, y, x] = first.expect("at least one channel").1;
        // Runs: consecutive channels of one compact array with consecutive levels share one decode.
        let mut runs: Vec<RunSpec> = Vec::new();
        for (c, ch) in channels.iter().enumerate() {
            let array = open.iter().position(|o| o.name == ch.array).expect("opened above");
            let level = ch.level.unwrap_or(0) as u64;
            if let Some(last) = runs.last_mut() {
                let extends = ch.compact
                    && last.array == array
                    && last.levels.end == level
                    && last.first_channel + last.planes() == c;
                if extends {
                    last.levels.end += 1;
                    continue;
                }
            }
            let levels = if ch.compact { level..level + 1 } else { 0..1 };
            runs.push(RunSpec { array, levels, first_channel: c });
        }
        Ok(ChannelSet {
            channels,
            arrays: Arc::new(open),
            runs,
            time_len: t as usize,
            grid: Grid { y: y as usize, x: x as usize },
        })
    }

    /// Rows whose time lies in `[start, end)` (dates `YYYY-MM-DD[ HH:MM[:SS]]`); open bounds select all.
    ///
    /// # Errors
    /// [`Error::Time`] when a bound is given but the store has no CF time coordinate, or a bound is not a date.
    pub fn select(&self, start: Option<&str>, end: Option<&str>) -> Result<Selection> {
        match &self.time {
            Some(t) => t
                .select(start, end)
                .map(|rows| Selection { rows })
                .map_err(|reason| Error::Time { store: self.root.clone(), reason }),
            None if start.is_none() && end.is_none() => Err(Error::Time {
                store: self.root.clone(),
                reason: "the store has no time coordinate: use Selection { rows } with explicit rows".into(),
            }),
            None => {
                Err(Error::Time { store: self.root.clone(), reason: "no time coordinate to select dates from".into() })
            }
        }
    }

    /// Reads planes: for each time position (in `selection`) and each channel of `set`, one plane,
    /// into `out` laid out `(positions, channels, y, x)`. Reads fan out over `pool`.
    ///
    /// # Errors
    /// [`Error::Request`] (before anything is read) when `out` has the wrong length, a position is
    /// outside the selection or the selection outside the arrays; [`Error::Read`] naming the array
    /// and time row of a plane that failed to decode. On error `out` is partly written, and no
    /// thread writes it after this returns.
    pub fn read_into(
        &self,
        pool: &ReadPool,
        set: &ChannelSet,
        selection: &Selection,
        positions: &[usize],
        out: &mut [f32],
    ) -> Result<()> {
        let plane = set.grid.plane();
        let expected = positions.len().checked_mul(set.len() * plane);
        if expected != Some(out.len()) {
            let expected = expected.map_or_else(|| "more than a usize counts".to_string(), |n| n.to_string());
            return Err(Error::Request {
                reason: format!(
                    "output holds {} values, but {} positions × {} channels × {}×{} planes need {expected}",
                    out.len(),
                    positions.len(),
                    set.len(),
                    set.grid.y,
                    set.grid.x
                ),
            });
        }
        if selection.rows.end > set.time_len {
            return Err(Error::Request {
                reason: format!(
                    "selection rows {:?} exceed the {} time steps of the arrays",
                    selection.rows, set.time_len
                ),
            });
        }
        if let Some((i, &p)) = positions.iter().enumerate().find(|(_, p)| **p >= selection.len()) {
            return Err(Error::Request {
                reason: format!("position {p} (entry {i}) is outside the selection of {} time steps", selection.len()),
            });
        }
        // One task per (position, run): a contiguous block of output planes. Carving `out` in
        // task order gives each task its own slice, so the parallel loop needs no shared view.
        let mut tasks: Vec<(u64, &RunSpec)> = Vec::with_capacity(positions.len() * set.runs.len());
        for &p in positions {
            for r in &set.runs {
                tasks.push(((selection.rows.start + p) as u64, r));
            }
        }
        let slices = carve(out, tasks.iter().map(|&(_, r)| r.planes() * plane));
        let (ny, nx) = (set.grid.y as u64, set.grid.x as u64);
        let _span =
            tracing::debug_span!("om4_read", planes = positions.len() * set.len(), tasks = tasks.len()).entered();
        pool.install(|| {
            tasks.par_iter().zip(slices.into_par_iter()).try_for_each(|(&(row, r), dest)| {
                let a = &set.arrays[r.array];
                let levels = r.levels.clone();
                let result = match &a.direct {
                    Some(direct) => direct.read_planes(row, levels.clone(), dest),
                    None => zarr::read_planes_into(&a.array, a.axes, row, levels.clone(), dest, ny, nx),
                };
                result.map_err(|source| Error::Read {
                    store: self.root.clone(),
                    array: a.name.clone(),
                    row,
                    level: if a.axes == Axes::TimeYX { String::new() } else { format!(", levels {levels:?}") },
                    source,
                })
            })
        })
    }

    /// The composed read + decode reference for [`Om4Store::read_into`]: the same planes' chunk
    /// files are first read whole into memory (all of them, in parallel on `pool`), then decoded
    /// into `out` (in parallel), each phase timed on its own. The sum of the two times is what the
    /// same file reads and the same decoder cost with nothing else around them; `read_into` does
    /// the same work interleaved per plane. Needs every array on the direct path, unsharded.
    /// `frames` holds the chunk files between the phases; pass the same one to every call so that
    /// the read phase reuses its buffers instead of allocating.
    ///
    /// # Errors
    /// As [`Om4Store::read_into`], and [`Error::Request`] for arrays the reference cannot measure.
    pub fn read_decode_reference(
        &self,
        pool: &ReadPool,
        set: &ChannelSet,
        selection: &Selection,
        positions: &[usize],
        out: &mut [f32],
        frames: &mut Vec<Vec<Vec<u8>>>,
    ) -> Result<ReadDecodeTimes> {
        // Validates the request (and warms the page cache) exactly as a read does, then poisons
        // `out` with a NaN payload no decoder writes, so that a plane the decode phase missed shows.
        self.read_into(pool, set, selection, positions, out)?;
        out.fill(f32::from_bits(0x7fc0_dead));
        let plane = set.grid.plane();
        let mut tasks: Vec<(u64, &RunSpec, &DirectArray)> = Vec::with_capacity(positions.len() * set.runs.len());
        for &p in positions {
            for r in &set.runs {
                let a = &set.arrays[r.array];
                let direct = a.direct.as_ref().ok_or_else(|| Error::Request {
                    reason: format!("array {} is not read on the direct path; no read + decode reference", a.name),
                })?;
                tasks.push(((selection.rows.start + p) as u64, r, direct));
            }
        }
        frames.resize_with(tasks.len(), Vec::new);
        for (f, (_, r, _)) in frames.iter_mut().zip(&tasks) {
            f.resize_with(r.planes(), Vec::new);
        }
        let failed = |source| Error::Request { reason: format!("read + decode reference: {source}") };
        let t0 = std::time::Instant::now();
        pool.install(|| {
            tasks
                .par_iter()
                .zip(frames.par_iter_mut())
                .try_for_each(|(&(row, r, d), f)| d.fetch_planes(row, r.levels.clone(), f))
        })
        .map_err(failed)?;
        let read = t0.elapsed();
        let slices = carve(out, tasks.iter().map(|&(_, r, _)| r.planes() * plane));
        let t1 = std::time::Instant::now();
        pool.install(|| {
            tasks
                .par_iter()
                .zip(frames.par_iter())
                .zip(slices.into_par_iter())
                .try_for_each(|((&(_, _, d), f), dest)| d.decode_planes(f, dest))
        })
        .map_err(failed)?;
        let compressed = frames.iter().flatten().map(Vec::len).sum::<usize>() as u64;
        Ok(ReadDecodeTimes { read, decode: t1.elapsed(), compressed_bytes: compressed })
    }

    /// Land masks of the channels: `mask_k` (or `wetmask[k]`) for a channel at level `k`, level 0
    /// for level-free channels. A mask with a time axis uses its first step.
    ///
    /// # Errors
    /// [`Error::Invalid`] when a mask is missing or its grid differs from the channels'.
    pub fn masks(&self, set: &ChannelSet) -> Result<LandMask> {
        let plane = set.grid.plane();
        // Each mask array is read once, however many channels use it (a compact wetmask serves all levels).
        let mut arrays = BTreeMap::new();
        let mut wet = Vec::with_capacity(set.len() * plane);
        for ch in &set.channels {
            let (name, offset) = self.mask_source(ch.mask_level(), set.grid, &ch.name)?;
            let values = self.read_once(&mut arrays, &name)?;
            wet.extend(values[offset..offset + plane].iter().map(|&v| v != 0.0 && !v.is_nan()));
        }
        LandMask::new(set.len(), plane, wet).map_err(|e| Error::Request { reason: e.to_string() })
    }

    /// The values of array `name`, read on first use and kept in `cache`.
    fn read_once<'c>(&self, cache: &'c mut BTreeMap<String, Vec<f64>>, name: &str) -> Result<&'c [f64]> {
        if !cache.contains_key(name) {
            cache.insert(name.to_string(), self.read_coord(name)?);
        }
        Ok(&cache[name])
    }

    /// The array holding the land mask of level `k`, and where level `k`'s plane starts in it.
    fn mask_source(&self, k: usize, grid: Grid, channel: &str) -> Result<(String, usize)> {
        let plane = grid.plane();
        let flat = format!("mask_{k}");
        // A broken mask_k, or (without a mask_k) a broken wetmask, is named as such.
        let broken = match self.broken_error(&flat) {
            Some(e) => Some(e),
            None if !self.arrays.contains_key(&flat) => self.broken_error("wetmask"),
            None => None,
        };
        if let Some(e) = broken {
            return Err(e);
        }
        if let Some(info) = self.arrays.get(&flat) {
            let n: u64 = info.shape.iter().product();
            let dims_ok = info.shape.len() >= 2 && info.shape[info.shape.len() - 2..] == [grid.y as u64, grid.x as u64];
            if !dims_ok || n < plane as u64 {
                return Err(self.invalid(
                    &flat,
                    format!("mask shape {:?} does not end in the grid {}×{}", info.shape, grid.y, grid.x),
                ));
            }
            Ok((flat, 0))
        } else if let Some(info) = self.arrays.get("wetmask") {
            let lev_axis =
                info.dims.as_ref().and_then(|d| d.iter().position(|n| LEV.contains(&n.as_str()))).unwrap_or(0);
            let ok = info.shape.len() >= 3 && info.shape[info.shape.len() - 2..] == [grid.y as u64, grid.x as u64];
            if !ok || (k as u64) >= info.shape[lev_axis] {
                return Err(self.invalid(
                    "wetmask",
                    format!("shape {:?} has no level {k} on the grid {}×{}", info.shape, grid.y, grid.x),
                ));
            }
            if info.shape.len() == 4 && lev_axis != 1 {
                return Err(self.invalid("wetmask", "a 4-D wetmask must be (time, lev, y, x)"));
            }
            Ok(("wetmask".to_string(), k * plane))
        } else {
            Err(Error::Invalid {
                store: self.root.clone(),
                array: flat,
                reason: format!("no land mask for channel {channel:?} (looked for mask_{k} and wetmask)"),
            })
        }
    }
}

/// Normalization statistics (`OM4_means.zarr` or `OM4_stds.zarr`): a 0-d array per flat channel or
/// a `lev` vector per compact variable.
#[derive(Debug)]
pub struct StatsStore {
    store: Om4Store,
}

impl StatsStore {
    /// Opens a statistics store.
    ///
    /// # Errors
    /// As [`Om4Store::open`].
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Ok(Self { store: Om4Store::open(root)? })
    }

    /// One value per channel of `set`, in order.
    ///
    /// # Errors
    /// [`Error::UnknownChannel`] when the statistics do not cover a channel; [`Error::Invalid`] for
    /// a statistic that is not a finite scalar.
    pub fn values(&self, set: &ChannelSet) -> Result<Vec<f32>> {
        // A compact variable's `lev` vector is read once for all its levels.
        let mut arrays = BTreeMap::new();
        set.channels.iter().map(|ch| self.value(ch, &mut arrays)).collect()
    }

    fn value(&self, ch: &Channel, arrays: &mut BTreeMap<String, Vec<f64>>) -> Result<f32> {
        let s = &self.store;
        let candidates: Vec<(String, usize)> = match ch.level {
            Some(k) => vec![(ch.name.clone(), 0), (ch.var().to_string(), k)],
            None => vec![(ch.name.clone(), 0)],
        };
        for (name, index) in &candidates {
            if let Some(e) = s.broken_error(name) {
                return Err(e);
            }
            let Some(info) = s.arrays.get(name) else {
                continue;
            };
            let n: u64 = info.shape.iter().product();
            let scalar = n == 1 && *name == ch.name;
            let vector = info.shape.len() == 1 && *name != ch.name && (*index as u64) < info.shape[0];
            if !(scalar || vector) {
                continue;
            }
            let v = s.read_once(arrays, name)?[if scalar { 0 } else { *index }];
            if !v.is_finite() {
                return Err(s.invalid(name, format!("statistic for {:?} is {v}", ch.name)));
            }
            return Ok(v as f32);
        }
        Err(Error::UnknownChannel {
            store: s.root.clone(),
            channel: ch.name.clone(),
            reason: format!("no statistic (looked for a scalar {:?} or a level vector {:?})", ch.name, ch.var()),
        })
    }
}
