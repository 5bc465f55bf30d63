//! Resolving channel names to arrays and levels, validating them, and the open [`ChannelSet`]
//! that reads use.

use std::ops::Range;
use std::sync::Arc;

use om4_batch::Grid;
use serde::Serialize;
use serde_json::Value;

use crate::channel::{derived_reason, split_legacy, split_level};
use crate::direct::{ChunksAt, DirectArray};
use crate::error::{Error, Result};
use crate::meta::{ArrayInfo, Fill};
use crate::store::{LEV, Om4Store, Selection, TIME, X, Y};
use crate::zarr::{Axes, ZarrArray};

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
pub(crate) struct OpenArray {
    pub(crate) name: String,
    pub(crate) axes: Axes,
    /// Levels along the level axis (1 for a `(time, y, x)` array).
    pub(crate) levels: usize,
    pub(crate) array: ZarrArray,
    /// Set when the chunks are single planes of plain float32 (decoded without zarrs).
    pub(crate) direct: Option<DirectArray>,
}

#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub(crate) array: usize,
    pub(crate) levels: Range<u64>,
    pub(crate) first_channel: usize,
}

impl RunSpec {
    /// Planes the run reads per time step.
    pub(crate) fn planes(&self) -> usize {
        (self.levels.end - self.levels.start) as usize
    }
}

/// A validated list of channels of one store, with their arrays open: resolve once, read many times.
#[derive(Debug, Clone)]
pub struct ChannelSet {
    pub(crate) channels: Vec<Channel>,
    pub(crate) arrays: Arc<Vec<OpenArray>>,
    pub(crate) runs: Vec<RunSpec>,
    pub(crate) time_len: usize,
    pub(crate) grid: Grid,
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

impl Om4Store {
    /// Where `array`'s chunks are, for direct decoding.
    fn chunks_at(&self, array: &str) -> Option<ChunksAt> {
        #[cfg(feature = "s3")]
        if let Some(remote) = self.fs.remote() {
            return Some(ChunksAt::Remote(std::sync::Arc::clone(remote), array.to_string()));
        }
        Some(ChunksAt::Dir(self.location.local_path()?.join(array)))
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
            return Err(
                self.invalid(&info.name, format!("dimension {i} has a zero-sized extent (shape {:?})", info.shape))
            );
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
                    .and_then(|plain| Some(DirectArray::new(self.chunks_at(&ch.array)?, plain, axes)));
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
}
