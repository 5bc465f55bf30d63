//! Autoregressive rollouts, as upstream's evaluation runs them: from the true state at a start
//! time, each model step predicts the next `h + 1` states from the previous prediction and the
//! true boundary forcing of its input times; predictions are de-normalized (`x · std + mean`, in
//! the statistics' precision) with land set to NaN, and scored against the truth on ocean cells.

use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_batch::{BatchPlan, Precision, Sample, WindowSpec};
use om4_pipeline::{BatchSource, read_groups};

use crate::error::{Error, Result};
use crate::model::Samudra;

/// One model step of a rollout.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RolloutStep {
    /// Step number (0-based).
    pub step: usize,
    /// Time positions (in the source's selection) of the predicted states, oldest first.
    pub times: Vec<usize>,
    /// Root-mean-square error against the truth per predicted state and prognostic channel, in
    /// the data's units, over ocean cells where the truth is finite (`[state][channel]`).
    pub rmse: Vec<Vec<f64>>,
}

/// Rolls `model` out for `steps` model steps from the `h + 1` true states at positions
/// `start..=start + h` of `source`. `on_step(step, states, report)` receives each step's
/// de-normalized prediction, `(h + 1, C_prog, Y, X)` with land NaN, as it is made.
///
/// # Errors
/// [`Error::Config`] when the rollout runs past the source's time positions; data errors from
/// the source; whatever `on_step` returns.
pub fn rollout<S: BatchSource + ?Sized>(
    model: &Samudra,
    source: &S,
    hist: usize,
    start: usize,
    steps: usize,
    device: &Device,
    mut on_step: impl FnMut(usize, &[f32], &RolloutStep) -> Result<()>,
) -> Result<Vec<RolloutStep>> {
    let spec = WindowSpec::new(hist, steps, 1)?;
    if start + spec.span() > source.time_len() {
        return Err(Error::Config {
            field: "steps",
            reason: format!(
                "{steps} steps of {} states from position {start} need {} time positions; the source has {}",
                hist + 1,
                start + spec.span(),
                source.time_len()
            ),
        });
    }
    let grid = source.grid();
    let plane = grid.plane();
    let states = hist + 1;
    let norms = source.normalizations();
    let prog = &norms[source.roles().input];
    let c_prog = prog.channels();
    // Every plane of the window, read once, then gathered twice: normalized for the model and
    // raw for the truth.
    let plan = BatchPlan::new(&[Sample { spec, start }], &source.roles(), &source.channels())?;
    let raw: Vec<Vec<f32>> = read_groups(source, &plan, |len| vec![0.0; len])?;
    let views: Vec<&[f32]> = raw.iter().map(Vec::as_slice).collect();
    let truth = om4_batch::gather(&plan, &views, grid)?;
    let refs: Vec<&om4_batch::Normalization> = norms.iter().collect();
    let mut groups = raw.clone();
    let prepared = om4_batch::prepare_and_gather(&plan, &mut groups, &refs, grid)?;

    let wet = prog.mask().repeat(states);
    let land: Vec<bool> = wet.as_slice().iter().map(|w| !w).collect();
    let land = Tensor::<4, Bool>::from_data(TensorData::new(land, [1, states * c_prog, grid.y, grid.x]), device);
    let n_in = prepared.input_channels;
    let mut previous: Option<Tensor<4>> = None;
    let mut reports = Vec::with_capacity(steps);
    for (k, step) in prepared.steps.iter().enumerate() {
        let data = Tensor::<4>::from_data(TensorData::new(step.input.clone(), [1, n_in, grid.y, grid.x]), device);
        let input = match previous.take() {
            None => data,
            Some(pred) => {
                let boundary = data.slice([0..1, states * c_prog..n_in, 0..grid.y, 0..grid.x]);
                Tensor::cat(vec![pred, boundary], 1)
            }
        };
        let pred = model.forward(input, land.clone());
        let values = pred.clone().into_data().try_to_vec::<f32>().map_err(|e| Error::Config {
            field: "device",
            reason: format!("cannot read the prediction back: {e:?}"),
        })?;
        let physical = denormalize(&values, prog, states, plane, wet.as_slice());
        let label = &truth.steps[k].label;
        let rmse = (0..states)
            .map(|j| {
                (0..c_prog)
                    .map(|c| {
                        let at = (j * c_prog + c) * plane;
                        let mask = prog.mask().channel(c);
                        let (mut sum, mut n) = (0.0f64, 0usize);
                        for ((&p, &t), &w) in physical[at..at + plane].iter().zip(&label[at..at + plane]).zip(mask) {
                            if w && t.is_finite() {
                                sum += (f64::from(p) - f64::from(t)).powi(2);
                                n += 1;
                            }
                        }
                        if n == 0 { f64::NAN } else { (sum / n as f64).sqrt() }
                    })
                    .collect()
            })
            .collect();
        let report = RolloutStep { step: k, times: (0..states).map(|j| spec.label_time(start, k, j)).collect(), rmse };
        on_step(k, &physical, &report)?;
        reports.push(report);
        previous = Some(pred);
    }
    Ok(reports)
}

/// `x · std + mean` per channel (channel `c` of state `j` is prognostic channel `c`), in the
/// statistics' precision; land NaN.
pub fn denormalize(
    values: &[f32],
    norm: &om4_batch::Normalization,
    states: usize,
    plane: usize,
    wet: &[bool],
) -> Vec<f32> {
    let c_prog = norm.channels();
    let mut out = Vec::with_capacity(values.len());
    for (i, (&v, &w)) in values.iter().zip(wet).enumerate() {
        let c = (i / plane) % c_prog;
        let (mean, std) = (norm.mean()[c], norm.std()[c]);
        out.push(if !w {
            f32::NAN
        } else {
            match norm.precision() {
                Precision::F32 => v * std as f32 + mean as f32,
                Precision::F64 => (f64::from(v) * std + mean) as f32,
            }
        });
    }
    debug_assert_eq!(out.len(), states * c_prog * plane);
    out
}
