//! Writing model output as a store om4 and xarray read: a flat Zarr v2 store of `(time, y, x)`
//! float32 arrays, one chunk per plane, NaN fill, a CF `time` coordinate and consolidated
//! metadata. Planes are written as they come, one time step at a time.

#![allow(clippy::single_range_in_vec_init)] // `&[0..n]` is a one-dimensional region, not a Vec of indices

use std::path::{Path, PathBuf};

use om4_batch::Grid;
use serde_json::json;

use crate::error::{Error, Result};
use crate::meta::ZarrFormat;
use crate::store_writer::Codec;
use crate::store_writer::{Spec, WriteOptions, Writer};
use crate::zarr::{ArrayWriter, Values};

/// A CF time coordinate: values in `units` (`"days since 1958-01-01 00:00:00"`) of `calendar`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeCoordinate {
    /// One value per time step.
    pub values: Vec<f64>,
    /// CF units.
    pub units: String,
    /// CF calendar name.
    pub calendar: String,
}

/// Writes `(time, y, x)` float32 arrays time step by time step (see the module docs).
pub struct PlaneWriter {
    root: PathBuf,
    writer: Option<Writer>,
    arrays: Vec<ArrayWriter>,
    grid: Grid,
    times: usize,
}

impl std::fmt::Debug for PlaneWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneWriter").field("root", &self.root).field("arrays", &self.arrays.len()).finish()
    }
}

impl PlaneWriter {
    /// Creates (or replaces) the store at `root` with one array per channel name, the time
    /// coordinate and, when given, `y`/`x` coordinate values.
    ///
    /// # Errors
    /// [`Error::Write`] when the store cannot be written; [`Error::Request`] for coordinates of
    /// the wrong length or no channels.
    pub fn create(
        root: impl AsRef<Path>,
        channels: &[String],
        grid: Grid,
        time: &TimeCoordinate,
        coords: Option<(&[f64], &[f64])>,
    ) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        if channels.is_empty() || grid.plane() == 0 {
            return Err(Error::Request { reason: "a prediction store needs channels and a non-empty grid".into() });
        }
        if let Some((y, x)) = coords
            && (y.len() != grid.y || x.len() != grid.x)
        {
            return Err(Error::Request {
                reason: format!("coordinates of {}×{} for a {}×{} grid", y.len(), x.len(), grid.y, grid.x),
            });
        }
        let cfg = WriteOptions { format: ZarrFormat::V2, codec: Codec::None, shard: None, consolidated: true };
        let mut writer = Writer::new(root.clone(), cfg)?;
        let n = time.values.len() as u64;
        let attrs = json!({"units": time.units, "calendar": time.calendar, "standard_name": "time"});
        let spec = Spec {
            name: "time".into(),
            shape: vec![n],
            chunks: vec![n.max(1)],
            dtype: "float64",
            dims: vec!["time"],
            attrs,
            compressed: false,
        };
        writer.write(spec, |a| a.write(&[0..n], Values::F64(&time.values)))?;
        if let Some((y, x)) = coords {
            for (name, values) in [("y", y), ("x", x)] {
                let len = values.len() as u64;
                let spec = Spec {
                    name: name.into(),
                    shape: vec![len],
                    chunks: vec![len],
                    dtype: "float64",
                    dims: vec![if name == "y" { "y" } else { "x" }],
                    attrs: json!({}),
                    compressed: false,
                };
                writer.write(spec, |a| a.write(&[0..len], Values::F64(values)))?;
            }
        }
        let (ny, nx) = (grid.y as u64, grid.x as u64);
        let arrays = channels
            .iter()
            .map(|name| {
                writer.create(&Spec {
                    name: name.clone(),
                    shape: vec![n, ny, nx],
                    chunks: vec![1, ny, nx],
                    dtype: "float32",
                    dims: vec!["time", "y", "x"],
                    attrs: json!({}),
                    compressed: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { root, writer: Some(writer), arrays, grid, times: time.values.len() })
    }

    /// Writes time step `t`: `planes` holds one plane per channel, in the order given to
    /// [`create`](Self::create).
    ///
    /// # Errors
    /// [`Error::Request`] for a step out of range or planes of the wrong size; [`Error::Write`]
    /// when a chunk cannot be written.
    pub fn write_time(&mut self, t: usize, planes: &[f32]) -> Result<()> {
        let plane = self.grid.plane();
        if t >= self.times || planes.len() != plane * self.arrays.len() {
            return Err(Error::Request {
                reason: format!(
                    "time step {t} of {} with {} values for {} planes of {}",
                    self.times,
                    planes.len(),
                    self.arrays.len(),
                    plane
                ),
            });
        }
        let (ny, nx) = (self.grid.y as u64, self.grid.x as u64);
        for (array, values) in self.arrays.iter().zip(planes.chunks_exact(plane)) {
            array
                .write(&[t as u64..t as u64 + 1, 0..ny, 0..nx], Values::F32(values))
                .map_err(|e| Error::Write { path: self.root.clone(), reason: e.to_string() })?;
        }
        Ok(())
    }

    /// Writes the consolidated metadata; the store is complete.
    ///
    /// # Errors
    /// [`Error::Write`] when it cannot be written.
    pub fn finish(mut self) -> Result<()> {
        self.writer.take().map_or(Ok(()), Writer::finish)
    }
}
