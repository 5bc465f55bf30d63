//! Raw batches for preparation on the device (`om4.Loader(prepare="device")`): each batch's
//! unique planes as read, one array per read group, with the plan that turns them into the model
//! batch (rows per role, rollout step and state), and each variable set's normalization. The torch
//! front end (`om4.torch`) copies the planes to the GPU and normalizes, masks and gathers there,
//! with the same arithmetic as the host path (`om4_batch::Normalization::prepare_group`).

use numpy::{PyArrayMethods, ToPyArray};
use om4_batch::{BatchPlan, Grid, NormOrder, Precision, Role};
use om4_pipeline::{BatchTelemetry, PooledBuf};
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
/// `groups[g]` is a float32 array `(len(times[g]), channels, y, x)` over a pooled (pinned, with
/// `pin_memory`) buffer: the unique planes of variable set `sources[g]` at the split's time
/// positions `times[g]`, as stored (not normalized). Each role (`input`, `label`, `boundary`,
/// the last None without boundary forcing) is `(g, rows)`: rows an int64 array
/// `(batch, steps, states)` of group `g`'s planes, so that step k's model input is, per sample,
/// the `states` input rows' channels then the `states` boundary rows' channels (`om4.Batch`'s
/// layout), and its label the label rows' channels.
#[pyclass(module = "om4", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct RawBatch {
    /// Sample indices in schedule order.
    samples: Vec<usize>,
    /// One array per read group.
    groups: Py<PyList>,
    /// The variable set of each group (an index into `normalizations`).
    sources: Vec<usize>,
    /// The split's time positions of each group's planes.
    times: Vec<Vec<usize>>,
    input: (usize, Py<PyAny>),
    label: (usize, Py<PyAny>),
    boundary: Option<(usize, Py<PyAny>)>,
    /// The loader's normalizations (the same tuple for every batch).
    normalizations: Py<PyTuple>,
    /// Seconds the consumer waited for this batch.
    wait_s: f64,
    /// Bytes of the group arrays.
    nbytes: u64,
}

impl RawBatch {
    pub(crate) fn new(
        py: Python<'_>,
        samples: Vec<usize>,
        plan: &BatchPlan,
        groups: Vec<PooledBuf>,
        grid: Grid,
        normalizations: Py<PyTuple>,
        telemetry: &BatchTelemetry,
    ) -> PyResult<Self> {
        let arrays = PyList::empty(py);
        let mut nbytes = 0;
        for (g, buf) in plan.groups().iter().zip(groups) {
            nbytes += (buf.len() * 4) as u64;
            arrays.append(arrays::array(py, buf, [g.times.len(), g.channels, grid.y, grid.x])?)?;
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
            input: required(Role::Input)?,
            label: required(Role::Label)?,
            boundary: rows_of(Role::Boundary)?,
            normalizations,
            wait_s: telemetry.wait.as_secs_f64(),
            nbytes,
        })
    }
}
