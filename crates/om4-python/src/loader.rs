//! `om4.Loader`: Samudra's whole batch pipeline (schedule, plane dedup, reads, normalization,
//! masks, gather, prefetch) in Rust, yielding NumPy arrays shaped like upstream's `ModelBatch`.
//!
//! It is `om4_pipeline::Loader` over an `Om4Source`, built as `om4 batch` builds it: the same
//! schedule (Samudra's samplers, DDP included), the same preparation, so the same bits. Batches
//! are prepared on the host, on the loader's threads (or, with `prepare="device"`, handed out raw
//! with their plan for `om4.torch` to prepare on the GPU: see `raw`); `__next__` releases the GIL
//! while it waits.
//! Each batch's NumPy arrays view the loader's pooled buffers (no copy; see `arrays`), which go
//! back to the pool when the arrays are gone; NumPy arrays speak DLPack, so
//! `torch.from_dlpack(array)` shares them too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use numpy::{PyArrayMethods, ToPyArray};
use om4_batch::{Ddp, Roles, SampleSpace, Schedule, WindowSpec};
use om4_pipeline::{BatchSource, BatchTelemetry, Epoch, HostBatch, LoaderConfig, PrepareOn, PreparedBatch};
use om4_store::{DataConfig, Om4Source, SourceConfig, StoreLocation};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::arrays;
use crate::error::runtime;
use crate::raw::{self, RawBatch};

/// The loader and what a batch's arrays are cut by.
#[pyclass(module = "om4", frozen)]
#[derive(Debug)]
pub(crate) struct Loader {
    loader: om4_pipeline::Loader<Om4Source>,
    source: Arc<Om4Source>,
    states: usize,
    prognostic: Vec<String>,
    boundary: Vec<String>,
    validation: bool,
    /// The CUDA device the pinned buffers belong to.
    pin_device: Option<usize>,
    /// Each variable set's normalization, for raw batches.
    normalizations: Py<PyTuple>,
    /// Whether batches are handed out raw (`prepare="device"`).
    raw: bool,
}

/// A store argument as a location: a path or URL (`str` or `os.PathLike`; an `s3://` URL takes
/// its options from the `AWS_*` environment variables), or a dict in Samudra's form
/// (`{"type": "s3", "bucket": ..., "path": ..., "endpoint_url": ..., "anon": True}`,
/// `{"type": "http", "url": ...}`, `{"type": "local", "path": ...}`).
fn location(arg: &Bound<'_, PyAny>) -> PyResult<StoreLocation> {
    let py = arg.py();
    if arg.is_instance_of::<PyDict>() {
        let json: String = py.import("json")?.getattr("dumps")?.call1((arg,))?.extract()?;
        return serde_json::from_str(&json).map_err(|e| runtime(format!("store location {json}: {e}")));
    }
    let text = match arg.extract::<String>() {
        Ok(s) => s,
        Err(_) => {
            let fspath = py.import("os")?.getattr("fspath")?.call1((arg,))?;
            fspath
                .extract::<PathBuf>()
                .map_err(|_| runtime("a store must be a str, an os.PathLike or a dict"))?
                .display()
                .to_string()
        }
    };
    StoreLocation::parse(&text).map_err(|e| runtime(format!("store {text:?}: {e}")))
}

/// A built loader, its source, the CUDA device its pinned buffers belong to, and the resolved
/// source settings (channel lists).
type Built = (om4_pipeline::Loader<Om4Source>, Arc<Om4Source>, Option<usize>, SourceConfig);

/// Where `pin_memory` asks batches to be pinned: `None` for pageable memory, `Some(None)` for
/// the calling thread's current CUDA device (device 0 without one), `Some(Some(n))` for device n.
/// Takes a bool, a device index, or a device name (`"cuda"`, `"cuda:1"`, a `torch.device`).
fn pin_target(arg: &Bound<'_, PyAny>) -> PyResult<Option<Option<usize>>> {
    if arg.is_none() {
        return Ok(None);
    }
    if let Ok(b) = arg.extract::<bool>() {
        return Ok(b.then_some(None));
    }
    if let Ok(i) = arg.extract::<usize>() {
        return Ok(Some(Some(i)));
    }
    let text = arg.str()?.to_string();
    match text.split_once(':') {
        None if text == "cuda" => Ok(Some(None)),
        Some(("cuda", i)) => i
            .parse::<usize>()
            .map(|i| Some(Some(i)))
            .map_err(|_| runtime(format!("pin_memory={text:?}: {i:?} is not a device index"))),
        _ => Err(runtime(format!("pin_memory={text:?}: expected True, False, a CUDA device index or \"cuda[:N]\""))),
    }
}

/// CUDA page-locked buffers on `device` (or the calling thread's current device), and the device.
#[cfg(feature = "pinned")]
fn pinned_pool(device: Option<usize>) -> Result<(om4_pipeline::BufferPool, usize), String> {
    let pool = match device {
        Some(d) => om4_pipeline::BufferPool::pinned(d).map(|p| (p, d)),
        None => om4_pipeline::BufferPool::pinned_current(),
    };
    pool.map_err(|e| format!("pin_memory: {e}"))
}

#[cfg(not(feature = "pinned"))]
fn pinned_pool(_device: Option<usize>) -> Result<(om4_pipeline::BufferPool, usize), String> {
    Err("pin_memory: this build of om4 has no CUDA pinned memory (crate feature `pinned`)".into())
}

#[pymethods]
impl Loader {
    /// Opens `store` (with its means and stds, default the siblings `OM4_means.zarr` and
    /// `OM4_stds.zarr`) and builds the loader of one split. Stores may be local, on S3 or under
    /// an HTTP(S) URL (see `location`). `prepare="device"` hands out `om4.RawBatch`es (raw
    /// planes and their plan) for `om4.torch.to_device` to prepare on the GPU; with it,
    /// `resident=BYTES` keeps the split on the device (`om4.torch.ResidentCopy`): each plane is
    /// read once, and the split must fit BYTES.
    #[new]
    #[pyo3(signature = (
        store, *, means=None, stds=None, prognostic=None, boundary=None, levels=None, time=None,
        split="train", hist=1, steps=1, stride=1, batch_size=1, seed=0, rank=0, world_size=None,
        normalize_before_mask=true, fill_value=0.0, prefetch=2, max_concurrent_reads=4, pin_memory=None,
        prepare="host", resident=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        means: Option<&Bound<'_, PyAny>>,
        stds: Option<&Bound<'_, PyAny>>,
        prognostic: Option<Vec<String>>,
        boundary: Option<Vec<String>>,
        levels: Option<usize>,
        time: Option<&str>,
        split: &str,
        hist: usize,
        steps: usize,
        stride: usize,
        batch_size: usize,
        seed: u64,
        rank: usize,
        world_size: Option<usize>,
        normalize_before_mask: bool,
        fill_value: f32,
        prefetch: usize,
        max_concurrent_reads: usize,
        pin_memory: Option<&Bound<'_, PyAny>>,
        prepare: &str,
        resident: Option<u64>,
    ) -> PyResult<Self> {
        let prepare_on = match prepare {
            "host" => PrepareOn::Host,
            "device" => PrepareOn::Device,
            other => return Err(runtime(format!("prepare={other:?}: expected \"host\" or \"device\""))),
        };
        let pin = match pin_memory {
            Some(arg) => pin_target(arg)?,
            None => None,
        };
        let validation = match split {
            "train" => false,
            "val" | "validation" => true,
            other => return Err(runtime(format!("split {other:?}: expected \"train\" or \"val\""))),
        };
        // The data configuration as a Samudra run states it: Samudra's channels for `levels` (or
        // the lists given), statistics beside the store unless given, the time range as the
        // split (the whole store without one).
        let mut data = DataConfig::at(location(store)?);
        data.source.data_means_location = means.map(location).transpose()?;
        data.source.data_stds_location = stds.map(location).transpose()?;
        data.source.levels = levels;
        data.source.prognostic = prognostic;
        data.source.boundary = boundary;
        if let Some(t) = time {
            data.source.train_time = t.parse().map_err(|e| runtime(format!("time {t:?}: {e}")))?;
        }
        data.normalize_before_mask = normalize_before_mask;
        data.masked_fill_value = fill_value;
        let ddp = match world_size {
            None if rank == 0 => None,
            None => return Err(runtime(format!("rank {rank} needs world_size"))),
            Some(world_size) => Some(Ddp { world_size, rank }),
        };
        if prefetch > LoaderConfig::MAX_PREFETCH {
            return Err(runtime(format!("prefetch {prefetch}: at most {} batches", LoaderConfig::MAX_PREFETCH)));
        }
        // Samudra validates one step ahead, whatever the training rollout.
        let steps = if validation { 1 } else { steps };
        data.read_threads = max_concurrent_reads;
        data.loading = LoaderConfig { prefetch_batches: prefetch, prepare_on, ..LoaderConfig::default() };
        let loading = data.loading;
        let build = || -> Result<Built, String> {
            let splits = data.open().map_err(|e| e.to_string())?;
            let (spec, source) = (splits.spec, Arc::new(splits.train));
            let window = WindowSpec::new(hist, steps, stride).map_err(|e| e.to_string())?;
            let space = SampleSpace::single(window, source.time_len()).map_err(|e| e.to_string())?;
            let schedule = if validation {
                Schedule::validation(batch_size, seed, ddp)
            } else {
                Schedule::training(batch_size, seed, ddp)
            }
            .map_err(|e| e.to_string())?;
            let loader = om4_pipeline::Loader::new(Arc::clone(&source), space, schedule, loading);
            let (loader, pin_device) = match pin {
                Some(device) => {
                    let (pool, device) = pinned_pool(device)?;
                    (loader.with_buffers(pool), Some(device))
                }
                None => (loader, None),
            };
            let loader = match resident {
                Some(budget) => loader.resident(budget).map_err(|e| e.to_string())?,
                None => loader,
            };
            Ok((loader, source, pin_device, spec))
        };
        let (loader, source, pin_device, spec) = py.detach(build).map_err(runtime)?;
        let (prognostic, boundary) = (spec.prognostic, spec.boundary);
        let normalizations = raw::normalizations(py, source.normalizations(), source.grid())?;
        let raw = prepare_on == PrepareOn::Device;
        Ok(Self { loader, source, states: hist + 1, prognostic, boundary, validation, pin_device, normalizations, raw })
    }

    /// Batches per epoch (for this rank).
    fn __len__(&self) -> usize {
        self.loader.len()
    }

    /// The batches of `epoch`, in Samudra's order, read ahead on Rust threads. Iterate it, or use
    /// it as a context manager; `close()` stops the read-ahead.
    fn epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<EpochIter> {
        let iter = py.detach(|| self.loader.epoch(epoch)).map_err(runtime)?;
        Ok(EpochIter {
            epoch: Mutex::new(Some(iter)),
            cut: self.cut(),
            grid: self.source.grid(),
            normalizations: self.normalizations.clone_ref(py),
        })
    }

    /// Prognostic channel names, one time step's worth.
    #[getter]
    fn prognostic(&self) -> Vec<String> {
        self.prognostic.clone()
    }

    /// Boundary channel names, one time step's worth.
    #[getter]
    fn boundary(&self) -> Vec<String> {
        self.boundary.clone()
    }

    /// `(y, x)` of every plane.
    #[getter]
    fn grid(&self) -> (usize, usize) {
        let g = self.source.grid();
        (g.y, g.x)
    }

    /// Time steps of the split.
    #[getter]
    fn time_len(&self) -> usize {
        self.source.time_len()
    }

    /// Each variable set's `om4.Normalization` (prognostic, then boundary), as raw batches'
    /// `normalizations`.
    #[getter]
    fn normalizations(&self, py: Python<'_>) -> Py<PyTuple> {
        self.normalizations.clone_ref(py)
    }

    /// Bytes of the whole split on the device when it is resident (`resident=`), else None.
    #[getter]
    fn split_bytes(&self) -> Option<u64> {
        self.loader.residency().map(|r| r.split_bytes())
    }

    /// Bytes the device copy holds (marked by `RawBatch.mark_resident`), when resident.
    #[getter]
    fn resident_bytes(&self) -> Option<u64> {
        self.loader.residency().map(|r| r.held_bytes())
    }

    /// Forgets what the device copy holds: a new copy starts empty (`om4.torch.ResidentCopy`
    /// calls it), and the next epoch reads every plane it needs again.
    fn clear_resident(&self) {
        if let Some(r) = self.loader.residency() {
            r.clear();
        }
    }

    /// `"device"` when batches are handed out raw (`om4.RawBatch`), else `"host"`.
    #[getter]
    fn prepare(&self) -> &'static str {
        if self.raw { "device" } else { "host" }
    }

    /// Whether this is the validation split (one rollout step, Samudra's validation sampler).
    #[getter]
    fn validation(&self) -> bool {
        self.validation
    }

    /// Whether batches are in CUDA page-locked memory (`pin_memory=True`), which
    /// `tensor.to("cuda", non_blocking=True)` copies without restaging.
    #[getter]
    fn pin_memory(&self) -> bool {
        self.loader.buffers().is_pinned()
    }

    /// The CUDA device whose context the pinned buffers belong to (`None` when pageable).
    #[getter]
    fn pin_device(&self) -> Option<usize> {
        self.pin_device
    }

    /// Batch buffers the loader has allocated so far: it stays bounded while batches are
    /// released, since a batch's buffers return to the pool when its arrays are gone.
    #[getter]
    fn buffer_allocations(&self) -> usize {
        self.loader.output_buffers().allocations()
    }

    /// Raw-plane (staging) buffers the loader has allocated so far; with `pin_memory` each is a
    /// page-locked allocation, which synchronizes the device: it stays flat once an epoch's
    /// first batches have filled the pool.
    #[getter]
    fn staging_allocations(&self) -> usize {
        self.loader.buffers().allocations()
    }

    /// The label mask, `(states · prognostic, y, x)` uint8, 1 = ocean (Samudra's
    /// `GridContext.label_mask`).
    #[getter]
    fn label_mask<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let grid = self.source.grid();
        let mask = self.source.normalizations()[Roles::PROGNOSTIC].mask().repeat(self.states);
        let wet: Vec<u8> = mask.as_slice().iter().map(|&w| u8::from(w)).collect();
        let c = wet.len() / grid.plane().max(1);
        Ok(wet.to_pyarray(py).reshape([c, grid.y, grid.x])?.into_any())
    }

    fn __repr__(&self) -> String {
        let g = self.source.grid();
        format!(
            "om4.Loader({} batches, {} prognostic + {} boundary channels, {}x{}, {})",
            self.loader.len(),
            self.prognostic.len(),
            self.boundary.len(),
            g.y,
            g.x,
            if self.validation { "val" } else { "train" }
        )
    }
}

impl Loader {
    fn cut(&self) -> Cut {
        let grid = self.source.grid();
        let channels = self.source.channels();
        let c_prog = channels[Roles::PROGNOSTIC];
        let c_bound = channels.get(Roles::BOUNDARY).copied().unwrap_or(0);
        Cut { prognostic: self.states * c_prog, boundary: self.states * c_bound, y: grid.y, x: grid.x }
    }
}

/// Channel counts a model input is split by.
#[derive(Debug, Clone, Copy)]
struct Cut {
    prognostic: usize,
    boundary: usize,
    y: usize,
    x: usize,
}

/// One epoch's batches. Ends cleanly when exhausted, on `close()`, on garbage collection, or
/// when a read fails (the error is raised at that batch).
#[pyclass(module = "om4")]
#[derive(Debug)]
pub(crate) struct EpochIter {
    epoch: Mutex<Option<Epoch<HostBatch>>>,
    cut: Cut,
    grid: om4_batch::Grid,
    normalizations: Py<PyTuple>,
}

#[pymethods]
impl EpochIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let next = py.detach(|| {
            let mut epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
            let next = epoch.as_mut().and_then(Iterator::next);
            if !matches!(next, Some(Ok(_))) {
                *epoch = None; // exhausted or failed: the threads end here
            }
            next
        });
        match next {
            None => Ok(None),
            Some(Err(e)) => Err(runtime(e)),
            Some(Ok(loaded)) => match loaded.batch {
                HostBatch::Raw { plan, groups } => {
                    let norms = self.normalizations.clone_ref(py);
                    let batch = RawBatch::new(py, loaded.samples, &plan, groups, self.grid, norms, &loaded.telemetry)?;
                    Ok(Some(Py::new(py, batch)?.into_any()))
                }
                HostBatch::Resident { plan, fresh, residency } => {
                    let norms = self.normalizations.clone_ref(py);
                    let (samples, t) = (loaded.samples, &loaded.telemetry);
                    let batch = RawBatch::with_fresh(py, samples, &plan, fresh, Some(residency), self.grid, norms, t)?;
                    Ok(Some(Py::new(py, batch)?.into_any()))
                }
                HostBatch::Prepared(batch) => {
                    let batch = Batch::new(py, loaded.samples, batch, &loaded.telemetry, self.cut)?;
                    Ok(Some(Py::new(py, batch)?.into_any()))
                }
            },
        }
    }

    /// Whether `next()` would return without waiting for a read: the next batch was read ahead
    /// (or the epoch has ended). `om4.torch.to_device` takes batch N+1 early only when it is.
    fn ready(&self) -> bool {
        let epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        epoch.as_ref().is_none_or(Epoch::is_ready)
    }

    /// Stops the read-ahead and joins the loader's threads; later `next()` ends the iteration.
    fn close(&self, py: Python<'_>) {
        let epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner).take();
        py.detach(move || drop(epoch));
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }
}

/// One batch: per rollout step the model input (prognostic then boundary channels), its
/// prognostic and boundary parts (views), and the label; arrays `(batch, channels, y, x)`.
#[pyclass(module = "om4", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Batch {
    /// Sample indices in schedule order.
    samples: Vec<usize>,
    /// One `Step` per rollout step.
    steps: Py<PyList>,
    /// Seconds the consumer waited for this batch.
    wait_s: f64,
}

/// One rollout step of a batch.
#[pyclass(module = "om4", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Step {
    model_input: Py<PyAny>,
    prognostic: Py<PyAny>,
    boundary: Py<PyAny>,
    label: Py<PyAny>,
}

impl Batch {
    fn new(
        py: Python<'_>,
        samples: Vec<usize>,
        batch: PreparedBatch,
        telemetry: &BatchTelemetry,
        cut: Cut,
    ) -> PyResult<Self> {
        let b = batch.batch;
        let steps = PyList::empty(py);
        for step in batch.steps {
            let input = arrays::array(py, step.input, [b, cut.prognostic + cut.boundary, cut.y, cut.x])?;
            let label = arrays::array(py, step.label, [b, batch.label_shape[1], cut.y, cut.x])?;
            let slice = |from: usize, to: usize| -> PyResult<Py<PyAny>> {
                let s = pyo3::types::PySlice::new(py, from as isize, to as isize, 1);
                let full = pyo3::types::PySlice::full(py);
                Ok(input.get_item((full, s))?.unbind())
            };
            let prognostic = slice(0, cut.prognostic)?;
            let boundary = slice(cut.prognostic, cut.prognostic + cut.boundary)?;
            steps.append(Step { model_input: input.unbind(), prognostic, boundary, label: label.unbind() })?;
        }
        Ok(Self { samples, steps: steps.unbind(), wait_s: telemetry.wait.as_secs_f64() })
    }
}
