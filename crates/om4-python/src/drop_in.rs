//! The `samudra_rust_loader` API on om4's store: `FlatOm4ReadPool`, `FlatOm4Reader`,
//! `CompactOm4Reader`.
//!
//! Upstream Samudra's `data.loading.type: rust` imports these three classes; the wheel installs a
//! `samudra_rust_loader` package that re-exports them, so an unchanged Samudra checkout reads
//! through om4. The contract: readers open a local store once and validate the named arrays
//! (float32, `(time, lat|y, lon|x)` or `(time|lev, lev|time, lat|y, lon|x)`, one time and
//! spatial shape), then `read_into(indexes, channels, target)` fills a writable, C-contiguous
//! float32 `(len(indexes), len(channels), y, x)` array, time-major in the call's order (repeats
//! and any order allowed). Every error is a `RuntimeError` whose text carries the contract's
//! phrase (what upstream's own tests match) and om4's reason; everything om4 refuses (packed
//! data, sentinel fill values, ...) is refused here too, by om4's own validation.
//!
//! The GIL is released while a read runs; the target stays borrowed for writing meanwhile, so a
//! second thread handing in the same array is refused rather than racing it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use numpy::{PyArray4, PyArrayMethods, PyUntypedArrayMethods};
use om4_store::{ArrayInfo, ChannelSet, Om4Store, ReadPool, StoreLocation};
use pyo3::prelude::*;

use crate::error::runtime;

/// Channel lists a reader keeps resolved: training asks for two or three lists, over and over.
const CACHED_SETS: usize = 64;

/// A bounded pool of read threads shared by every reader built on it.
#[pyclass(module = "samudra_rust_loader", frozen)]
#[derive(Debug)]
pub(crate) struct FlatOm4ReadPool {
    pub(crate) pool: ReadPool,
}

#[pymethods]
impl FlatOm4ReadPool {
    #[new]
    fn new(max_concurrent_reads: i64) -> PyResult<Self> {
        if max_concurrent_reads <= 0 {
            return Err(runtime(format!("max_concurrent_reads must be positive, got {max_concurrent_reads}")));
        }
        let threads = usize::try_from(max_concurrent_reads).map_err(runtime)?;
        Ok(Self { pool: ReadPool::new(threads).map_err(runtime)? })
    }

    /// Threads in the pool.
    #[getter]
    fn max_concurrent_reads(&self) -> usize {
        self.pool.threads()
    }

    fn __repr__(&self) -> String {
        format!("FlatOm4ReadPool(max_concurrent_reads={})", self.pool.threads())
    }
}

/// Which reader: names in error messages and how a channel is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flat,
    Compact,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Flat => "flat OM4",
            Kind::Compact => "compact OM4",
        }
    }
}

/// An opened store and the channels a reader may read, shared by both reader classes.
#[derive(Debug)]
struct Planes {
    kind: Kind,
    path: PathBuf,
    store: Om4Store,
    pool: ReadPool,
    /// Channel names opened (`thetao_2`, `zos`).
    opened: Vec<String>,
    /// `(time, y, x)` of every opened array.
    shape: [u64; 3],
    sets: Mutex<HashMap<Vec<String>, Arc<ChannelSet>>>,
}

/// The array behind `name`, or why there is none.
fn array_info<'a>(store: &'a Om4Store, name: &str) -> Result<&'a ArrayInfo, String> {
    if let Some(info) = store.arrays().get(name) {
        return Ok(info);
    }
    match store.broken_arrays().get(name) {
        Some(reason) => Err(reason.clone()),
        None => Err("no such array in the store".to_string()),
    }
}

fn is_time(d: &str) -> bool {
    d == "time"
}
fn is_lev(d: &str) -> bool {
    d == "lev"
}
fn is_y(d: &str) -> bool {
    matches!(d, "lat" | "y")
}
fn is_x(d: &str) -> bool {
    matches!(d, "lon" | "x")
}

/// Dimension names, or om4's defaults for an array that names none.
fn dims_of(info: &ArrayInfo) -> Vec<String> {
    info.dims.clone().unwrap_or_else(|| {
        let names: &[&str] = if info.shape.len() == 4 { &["time", "lev", "y", "x"] } else { &["time", "y", "x"] };
        names.iter().map(|s| (*s).to_string()).collect()
    })
}

/// Checks one array against the reader's contract and returns its `(time, y, x)` shape.
/// `depth`: the channel selects a level of a `(time, lev, y, x)` or `(lev, time, y, x)` array.
fn check_array(kind: Kind, path: &Path, var: &str, info: &ArrayInfo, depth: bool) -> Result<[u64; 3], String> {
    let at = format!("variable {var:?} in {}", path.display());
    if info.dtype != "float32" {
        return Err(format!("{at} has dtype {}; {} Rust loading requires float32", info.dtype, kind.what()));
    }
    let shape = &info.shape;
    let rank = if depth { 4 } else { 3 };
    if shape.len() != rank {
        let expected = if depth { "(time, lev, lat, lon)" } else { "(time, lat, lon)" };
        return Err(format!("{at} has shape {shape:?}; expected {expected}"));
    }
    if shape.contains(&0) {
        return Err(format!("{at} has a zero-sized extent in shape {shape:?}"));
    }
    let dims = dims_of(info);
    let d: Vec<&str> = dims.iter().map(String::as_str).collect();
    let tyx = match d.as_slice() {
        [t, y, x] if !depth && is_time(t) && is_y(y) && is_x(x) => [shape[0], shape[1], shape[2]],
        [t, l, y, x] if depth && is_time(t) && is_lev(l) && is_y(y) && is_x(x) => [shape[0], shape[2], shape[3]],
        [l, t, y, x] if depth && is_time(t) && is_lev(l) && is_y(y) && is_x(x) => [shape[1], shape[2], shape[3]],
        _ => {
            let expected =
                if depth { "(time, lev, lat/y, lon/x) or (lev, time, lat/y, lon/x)" } else { "(time, lat/y, lon/x)" };
            return Err(format!("array {var} has dimensions {dims:?}; expected {expected}"));
        }
    };
    Ok(tyx)
}

impl Planes {
    /// Opens `path` and validates the channels `(array, level)`: the contract's checks first, in
    /// its words, then om4's own (`Om4Store::channels`).
    fn open(kind: Kind, path: PathBuf, selectors: Vec<(String, Option<u64>)>, pool: ReadPool) -> Result<Self, String> {
        if selectors.is_empty() {
            return Err("at least one variable is required".into());
        }
        // A path whose text is an s3:// or http(s):// URL opens that store (om4's generalization:
        // upstream's readers take local directories only).
        let location = StoreLocation::from_path(&path).map_err(|e| e.to_string())?;
        let local = if location.is_remote() { "" } else { "local " };
        let store = Om4Store::open_location(&location)
            .map_err(|e| format!("opening {local}Zarr store {}: {e}", path.display()))?;
        let mut opened: Vec<String> = Vec::with_capacity(selectors.len());
        let mut common: Option<(String, [u64; 3])> = None;
        for (var, level) in &selectors {
            if var.is_empty() {
                return Err("variable names must not be empty".into());
            }
            let name = channel_name(var, *level);
            if opened.contains(&name) {
                continue;
            }
            let info = array_info(&store, var).map_err(|reason| match kind {
                Kind::Flat => format!("opening variable {var:?} in {}: {reason}", path.display()),
                Kind::Compact => format!("opening compact OM4 variable {var:?} in {}: {reason}", path.display()),
            })?;
            let tyx = check_array(kind, &path, var, info, level.is_some())?;
            if let Some(level) = level {
                let levels = info.shape.iter().product::<u64>() / tyx.iter().product::<u64>();
                if *level >= levels {
                    return Err(format!(
                        "channel {name:?} selects level {level} of {var:?} in {}, which has {levels} levels",
                        path.display()
                    ));
                }
            }
            match &common {
                None => common = Some((var.clone(), tyx)),
                Some((first, expected)) if *expected != tyx => {
                    return Err(format!(
                        "variable {var:?} in {} has time/spatial shape {tyx:?}; expected {expected:?}, the shape of {first:?}",
                        path.display()
                    ));
                }
                Some(_) => {}
            }
            opened.push(name);
        }
        // om4's own validation of every channel (packing, fill values, chunk layout, the grid);
        // the set it resolves is the first one reads use.
        let all = store.channels(&opened).map_err(|e| format!("opening {} in {}: {e}", kind.what(), path.display()))?;
        let shape = common.map(|(_, s)| s).ok_or("at least one variable is required")?;
        let sets = Mutex::new(HashMap::from([(opened.clone(), Arc::new(all))]));
        Ok(Self { kind, path, store, pool, opened, shape, sets })
    }

    /// [`open`](Self::open) from a Python constructor: the path argument converted, the GIL
    /// released while the store opens.
    fn open_from_python(
        py: Python<'_>,
        kind: Kind,
        path: &Bound<'_, PyAny>,
        selectors: Vec<(String, Option<u64>)>,
        pool: &FlatOm4ReadPool,
    ) -> PyResult<Self> {
        let path = to_path(path)?;
        let pool = pool.pool.clone();
        py.detach(|| Self::open(kind, path, selectors, pool)).map_err(runtime)
    }

    fn shape_tuple(&self) -> (u64, u64, u64) {
        let [t, y, x] = self.shape;
        (t, y, x)
    }

    fn repr(&self, class: &str) -> String {
        format!("{class}({:?}, {:?})", self.path.display().to_string(), self.opened)
    }

    /// The resolved channel set for `names`, built once per distinct list.
    fn set(&self, names: &[String]) -> Result<Arc<ChannelSet>, String> {
        let mut sets = self.sets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(set) = sets.get(names) {
            return Ok(Arc::clone(set));
        }
        let set = Arc::new(
            self.store.channels(names).map_err(|e| format!("resolving channels in {}: {e}", self.path.display()))?,
        );
        if sets.len() >= CACHED_SETS {
            sets.clear();
        }
        sets.insert(names.to_vec(), Arc::clone(&set));
        Ok(set)
    }

    /// Validates a read's time indexes against the time axis.
    fn positions(&self, indexes: &[i64]) -> Result<Vec<usize>, String> {
        let len = self.shape[0];
        indexes
            .iter()
            .map(|&i| {
                let i = u64::try_from(i).map_err(|_| format!("time index must be non-negative, got {i}"))?;
                if i >= len {
                    return Err(format!("time index {i} is out of bounds for length {len}"));
                }
                usize::try_from(i).map_err(|e| e.to_string())
            })
            .collect()
    }

    fn read_into(
        &self,
        py: Python<'_>,
        indexes: Vec<i64>,
        names: &[String],
        shown: &dyn Fn(usize) -> String,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let what = self.kind.what();
        if names.is_empty() {
            return Err(runtime("at least one variable is required for a read"));
        }
        if let Some(i) = names.iter().position(|n| !self.opened.contains(n)) {
            let noun = if self.kind == Kind::Flat { "variable" } else { "variable selector" };
            return Err(runtime(format!("{noun} {} was not opened by this {what} reader", shown(i))));
        }
        let positions = self.positions(&indexes).map_err(runtime)?;
        let target = target.cast::<PyArray4<f32>>().map_err(|_| {
            runtime(format!("{what} output must be a float32 numpy array of 4 dimensions, got {}", describe(target)))
        })?;
        let expected = [positions.len(), names.len(), self.shape[1] as usize, self.shape[2] as usize];
        if target.shape() != expected {
            return Err(runtime(format!("{what} output has shape {:?}; expected {expected:?}", target.shape())));
        }
        // as_slice_mut takes Fortran order too: C order is checked here.
        if !target.is_c_contiguous() {
            return Err(runtime(format!("{what} output must be C-contiguous")));
        }
        let mut guard = target
            .try_readwrite()
            .map_err(|e| runtime(format!("{what} output could not be borrowed for writing: {e}")))?;
        let out = guard.as_slice_mut().map_err(|_| runtime(format!("{what} output must be C-contiguous")))?;
        let set = self.set(names).map_err(runtime)?;
        let rows = set.all_rows();
        py.detach(|| self.store.reader(&self.pool, &set, &rows).read(&positions, out)).map_err(|e| {
            runtime(format!(
                "reading {} time steps x {} channels from {}: {e} (the output array is partly written)",
                positions.len(),
                set.len(),
                self.path.display()
            ))
        })
    }
}

/// om4's channel name for an array and an optional level: `thetao_2`, `zos`.
fn channel_name(var: &str, level: Option<u64>) -> String {
    match level {
        Some(k) => format!("{var}_{k}"),
        None => var.to_string(),
    }
}

/// Selectors with their levels checked: a level counts from 0.
fn levels(selectors: Vec<(String, Option<i64>)>) -> PyResult<Vec<(String, Option<u64>)>> {
    selectors
        .into_iter()
        .map(|(var, level)| match level.map(u64::try_from) {
            None => Ok((var, None)),
            Some(Ok(k)) => Ok((var, Some(k))),
            Some(Err(_)) => Err(runtime(format!("level of {var:?} must be non-negative, got {}", level.unwrap_or(0)))),
        })
        .collect()
}

/// What a non-array target was, for the error.
fn describe(target: &Bound<'_, PyAny>) -> String {
    let kind = target.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    match (target.getattr("dtype"), target.getattr("shape")) {
        (Ok(dtype), Ok(shape)) => format!("{kind} of dtype {dtype} and shape {shape}"),
        _ => kind,
    }
}

/// A path argument: `str` or `os.PathLike`.
fn to_path(path: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let fspath = path.py().import("os")?.getattr("fspath")?.call1((path,))?;
    fspath.extract::<PathBuf>().map_err(|_| runtime("the store path must be a str or an os.PathLike of str"))
}

/// Reads `(time, y, x)` float32 arrays, one channel per array (`thetao_0`, `zos`).
#[pyclass(module = "samudra_rust_loader", frozen)]
#[derive(Debug)]
pub(crate) struct FlatOm4Reader {
    planes: Planes,
}

#[pymethods]
impl FlatOm4Reader {
    #[new]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        variables: Vec<String>,
        read_pool: &FlatOm4ReadPool,
    ) -> PyResult<Self> {
        let selectors = variables.into_iter().map(|v| (v, None)).collect();
        Ok(Self { planes: Planes::open_from_python(py, Kind::Flat, path, selectors, read_pool)? })
    }

    /// `(time, y, x)` of the opened arrays.
    #[getter]
    fn shape(&self) -> (u64, u64, u64) {
        self.planes.shape_tuple()
    }

    /// Reads `variables` at time `indexes` into `target`, `(len(indexes), len(variables), y, x)`.
    fn read_into(
        &self,
        py: Python<'_>,
        indexes: Vec<i64>,
        variables: Vec<String>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.planes.read_into(py, indexes, &variables, &|i| format!("{:?}", variables[i]), target)
    }

    fn __repr__(&self) -> String {
        self.planes.repr("FlatOm4Reader")
    }
}

/// Reads channels given as `(array, level)` of compact stores (`("thetao", 2)` is level 2 of
/// `thetao(time, lev, y, x)` or `thetao(lev, time, y, x)`; `("zos", None)` a `(time, y, x)` array).
#[pyclass(module = "samudra_rust_loader", frozen)]
#[derive(Debug)]
pub(crate) struct CompactOm4Reader {
    planes: Planes,
}

#[pymethods]
impl CompactOm4Reader {
    #[new]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        variable_selectors: Vec<(String, Option<i64>)>,
        read_pool: &FlatOm4ReadPool,
    ) -> PyResult<Self> {
        let selectors = levels(variable_selectors)?;
        Ok(Self { planes: Planes::open_from_python(py, Kind::Compact, path, selectors, read_pool)? })
    }

    /// `(time, y, x)` of the opened arrays.
    #[getter]
    fn shape(&self) -> (u64, u64, u64) {
        self.planes.shape_tuple()
    }

    /// Reads the selected channels at time `indexes` into `target`,
    /// `(len(indexes), len(variable_selectors), y, x)`.
    fn read_into(
        &self,
        py: Python<'_>,
        indexes: Vec<i64>,
        variable_selectors: Vec<(String, Option<i64>)>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let variable_selectors = levels(variable_selectors)?;
        let names: Vec<String> = variable_selectors.iter().map(|(v, l)| channel_name(v, *l)).collect();
        let shown = |i: usize| {
            let (v, l) = &variable_selectors[i];
            match l {
                Some(l) => format!("({v:?}, {l})"),
                None => format!("({v:?}, None)"),
            }
        };
        self.planes.read_into(py, indexes, &names, &shown, target)
    }

    fn __repr__(&self) -> String {
        self.planes.repr("CompactOm4Reader")
    }
}
