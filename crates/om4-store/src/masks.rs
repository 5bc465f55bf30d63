//! Land masks of a channel set: `mask_k` or `wetmask[k]` per channel.

use std::collections::BTreeMap;

use om4_batch::{Grid, LandMask};

use crate::channels::ChannelSet;
use crate::error::{Error, Result};
use crate::store::{LEV, Om4Store};

impl Om4Store {
    /// Land masks of the channels: `mask_k` (or `wetmask[k]`) for a channel at level `k`, level 0
    /// for level-free channels. A mask with a time axis uses its first step.
    ///
    /// # Errors
    /// [`Error::Invalid`] when a mask is missing or its grid differs from the channels'.
    pub fn masks(&self, set: &ChannelSet) -> Result<LandMask> {
        let plane = set.grid.plane();
        // Each mask array is read once, however many channels use it (a compact wetmask serves all levels).
        let sources = set
            .channels
            .iter()
            .map(|ch| self.mask_source(ch.mask_level(), set.grid, &ch.name))
            .collect::<Result<Vec<_>>>()?;
        let mut names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut arrays = self.read_coords(&names)?;
        let mut wet = Vec::with_capacity(set.len() * plane);
        for (name, offset) in &sources {
            let values = self.read_once(&mut arrays, name)?;
            // Samudra casts masks with `.bool()`: any non-zero value, NaN included, is ocean.
            wet.extend(values[*offset..*offset + plane].iter().map(|&v| v != 0.0));
        }
        LandMask::new(set.len(), plane, wet).map_err(|e| Error::Request { reason: e.to_string() })
    }

    /// The values of array `name`, read on first use and kept in `cache`.
    pub(crate) fn read_once<'c>(&self, cache: &'c mut BTreeMap<String, Vec<f64>>, name: &str) -> Result<&'c [f64]> {
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
