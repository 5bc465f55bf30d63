//! Raw batches for preparation on the device (`om4.Loader(prepare="device")`): each batch's
//! unique planes as read, one array per read group, with the plan that turns them into the model
//! batch (rows per role, rollout step and state), and each variable set's normalization. The torch
//! front end (`om4.torch`) copies the planes to the GPU and normalizes, masks and gathers there,
//! with the same arithmetic as the host path (`om4_batch::Normalization::prepare_group`).

use numpy::{PyArrayMethods, ToPyArray};
use om4_batch::{BatchPlan, Grid, NormOrder, Precision, Role};
use std::sync::Arc;

use om4_pipeline::{BatchTelemetry, FreshPlanes, PooledBuf, Residency};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::arrays;
use crate::error::runtime;

/// One variable set's normalization, as the host path applies it to a plane of channel `c`:
/// `y = nan_to_num((x - mean[c]) / std[c])` in `precision` (float32: NaN → 0, ±inf → ±max;
/// float64: NaN → 0, then rounded to float32), and land cells (`wet` false) set to `fill`, after
/// normalizing (`normalize_before_mask`) or before (the fill is then normalized too).
#[pyclass(module = "om4", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Normalization {
    /// Per-channel means, float64 holding the values used (float32 ones in `"float32"` precision).
    mean: Py<PyAny>,
    /// Per-channel standard deviations, as `mean`.
    std: Py<PyAny>,
    /// `"float32"` or `"float64"`: the precision of the arithmetic.
    precision: &'static str,
    /// `(channels, y, x)` bool, True on ocean.
    wet: Py<PyAny>,
    normalize_before_mask: bool,
    fill: f32,
}

impl Normalization {
    fn new(py: Python<'_>, norm: &om4_batch::Normalization, grid: Grid) -> PyResult<Self> {
        let wet = norm.mask().as_slice().to_pyarray(py).reshape([norm.channels(), grid.y, grid.x])?;
        Ok(Self {
            mean: norm.mean().to_pyarray(py).into_any().unbind(),
            std: norm.std().to_pyarray(py).into_any().unbind(),
            precision: match norm.precision() {
                Precision::F32 => "float32",
                Precision::F64 => "float64",
            },
            wet: wet.into_any().unbind(),
            normalize_before_mask: norm.order() == NormOrder::NormalizeThenMask,
            fill: norm.fill(),
        })
    }
}

/// The normalizations of a source's variable sets, indexed by a group's `source`.
pub(crate) fn normalizations(py: Python<'_>, norms: &[om4_batch::Normalization], grid: Grid) -> PyResult<Py<PyTuple>> {
    let items = norms.iter().map(|n| Normalization::new(py, n, grid)).collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, items)?.unbind())
}

/// One batch's raw planes and its plan (`om4.Loader(prepare="device")`).
///
/// Group `g` holds the unique planes of variable set `sources[g]` at the split's time positions
/// `times[g]`; each role (`input`, `label`, `boundary`, the last None without boundary forcing)
/// is `(g, rows)`: rows an int64 array `(batch, steps, states)` indexing `times[g]`, so that step
/// k's model input is, per sample, the `states` input rows' channels then the `states` boundary
/// rows' channels (`om4.Batch`'s layout), and its label the label rows' channels.
/// `groups[g]` is a float32 array `(len(fresh_times[g]), channels, y, x)` over a pooled (pinned,
/// with `pin_memory`) buffer, the planes as stored (not normalized) at `fresh_times[g]`: all of
/// `times[g]`, or with a resident split (`resident`) only those the device copy lacks, which the
/// consumer writes into its copy before calling `mark_resident()`.
#[pyclass(module = "om4", frozen)]
#[derive(Debug)]
pub(crate) struct RawBatch {
    /// Sample indices in schedule order.
    #[pyo3(get)]
    samples: Vec<usize>,
    /// One array per read group.
    #[pyo3(get)]
    groups: Py<PyList>,
    /// The variable set of each group (an index into `normalizations`).
    #[pyo3(get)]
    sources: Vec<usize>,
    /// The split's time positions the plan's rows index, per group.
    #[pyo3(get)]
    times: Vec<Vec<usize>>,
    /// The time positions of the planes in `groups`, per group.
    #[pyo3(get)]
    fresh_times: Vec<Vec<usize>>,
    #[pyo3(get)]
    input: (usize, Py<PyAny>),
    #[pyo3(get)]
    label: (usize, Py<PyAny>),
    #[pyo3(get)]
    boundary: Option<(usize, Py<PyAny>)>,
    /// The loader's normalizations (the same tuple for every batch).
    #[pyo3(get)]
    normalizations: Py<PyTuple>,
    /// Seconds the consumer waited for this batch.
    #[pyo3(get)]
    wait_s: f64,
    /// Bytes of the group arrays.
    #[pyo3(get)]
    nbytes: u64,
    /// Unique planes of the batch served by the device copy instead of read.
    #[pyo3(get)]
    resident_planes: usize,
    /// The loader's record of the device copy, with a resident split.
    residency: Option<Arc<Residency>>,
}

#[pymethods]
impl RawBatch {
    /// Whether the split is resident: `groups` holds only the planes the device copy lacks.
    #[getter]
    fn resident(&self) -> bool {
        self.residency.is_some()
    }

    /// Records that the device copy now holds this batch's `fresh_times` (call it once they are
    /// written there): later batches and epochs then read them no more.
    fn mark_resident(&self) {
        if let Some(residency) = &self.residency {
            for (&source, times) in self.sources.iter().zip(&self.fresh_times) {
                residency.mark(source, times);
            }
        }
    }
}

impl RawBatch {
    /// A batch whose `groups` hold every plane of the plan.
    pub(crate) fn new(
        py: Python<'_>,
        samples: Vec<usize>,
        plan: &BatchPlan,
        groups: Vec<PooledBuf>,
        grid: Grid,
        normalizations: Py<PyTuple>,
        telemetry: &BatchTelemetry,
    ) -> PyResult<Self> {
        let fresh = plan.groups().iter().zip(groups).map(|(g, planes)| FreshPlanes { times: g.times.clone(), planes });
        Self::with_fresh(py, samples, plan, fresh.collect(), None, grid, normalizations, telemetry)
    }

    /// A batch whose `groups` hold `fresh`, the planes a device copy lacks, marked in `residency`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_fresh(
        py: Python<'_>,
        samples: Vec<usize>,
        plan: &BatchPlan,
        fresh: Vec<FreshPlanes>,
        residency: Option<Arc<Residency>>,
        grid: Grid,
        normalizations: Py<PyTuple>,
        telemetry: &BatchTelemetry,
    ) -> PyResult<Self> {
        let arrays = PyList::empty(py);
        let mut nbytes = 0;
        let mut fresh_times = Vec::with_capacity(fresh.len());
        for (g, f) in plan.groups().iter().zip(fresh) {
            nbytes += (f.planes.len() * 4) as u64;
            arrays.append(arrays::array(py, f.planes, [f.times.len(), g.channels, grid.y, grid.x])?)?;
            fresh_times.push(f.times);
        }
        let shape = [plan.batch(), plan.steps(), plan.states()];
        let rows_of = |role: Role| -> PyResult<Option<(usize, Py<PyAny>)>> {
            let Some(r) = plan.rows(role) else { return Ok(None) };
            let rows: Vec<i64> = r.rows.iter().map(|&row| row as i64).collect();
            Ok(Some((r.group, rows.to_pyarray(py).reshape(shape)?.into_any().unbind())))
        };
        // Every plan has input and label rows (`BatchPlan::new` checks).
        let required =
            |role: Role| rows_of(role)?.ok_or_else(|| runtime(format!("internal: a plan without {role:?} rows")));
        Ok(Self {
            samples,
            groups: arrays.unbind(),
            sources: plan.groups().iter().map(|g| g.source).collect(),
            times: plan.groups().iter().map(|g| g.times.clone()).collect(),
            fresh_times,
            input: required(Role::Input)?,
            label: required(Role::Label)?,
            boundary: rows_of(Role::Boundary)?,
            normalizations,
            wait_s: telemetry.wait.as_secs_f64(),
            nbytes,
            resident_planes: telemetry.resident_planes,
            residency,
        })
    }
}
