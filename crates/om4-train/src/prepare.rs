//! `om4-train prepare`: loader batches prepared on the device (normalize, mask, gather with Burn
//! ops, `PrepareOn::Device`), uploaded ahead on the loader's thread and used on the caller's,
//! equal the host reference (`PrepareOn::Host` on the CPU backend) bit for bit, for history 0/1,
//! rollouts of 1/2 steps, strides 1/2 and both normalization orders. The upload thread makes the
//! tensors and the caller's thread reads them back, so missing stream ordering shows up as
//! different values.

use std::sync::Arc;

use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, LoaderConfig, PrepareOn, loader};
use om4_store::{DataConfig, Om4Source, SynthConfig, synthesize};

fn values(t: burn::tensor::Tensor<4>) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let v = t.into_data().try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

/// Every input and label of one epoch, as bits.
fn epoch(loader: &om4_burn::Loader<Om4Source>) -> Result<Vec<Vec<u32>>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for batch in loader.epoch(1)? {
        for step in batch?.batch.steps {
            out.push(values(step.input)?);
            out.push(values(step.label)?);
        }
    }
    Ok(out)
}

/// Runs every case on `device_name`; `Ok(false)` (after printing the first difference) when the
/// device differs from the host.
pub(crate) fn main(device_name: &str, ny: usize, nx: usize) -> Result<bool, Box<dyn std::error::Error>> {
    let device = crate::device::open(device_name, None)?.device;
    let dir = tempfile::tempdir()?;
    let cfg = SynthConfig { ny, nx, times: 16, levels: 3, consolidated: false, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
    let (mut tensors, mut floats) = (0usize, 0usize);
    for normalize_before_mask in [true, false] {
        let mut data = DataConfig {
            normalize_before_mask,
            masked_fill_value: if normalize_before_mask { 0.0 } else { -3.5 },
            ..DataConfig::at(paths.data.clone())
        };
        data.read_threads = 4;
        let source = Arc::new(data.open()?.train);
        for (history, steps, stride) in [(0, 1, 1), (1, 2, 1), (1, 1, 2), (0, 2, 2)] {
            let space = SampleSpace::single(WindowSpec::new(history, steps, stride)?, source.time_len())?;
            let schedule = Schedule::training(3, 7, None)?;
            let loader = |prepare_on, device: burn::tensor::Device| {
                let config = LoaderConfig {
                    prefetch_batches: 2,
                    prefetch_to_device: true,
                    prepare_on,
                    ..LoaderConfig::default()
                };
                loader(Arc::clone(&source), space.clone(), schedule, config, device)
            };
            let on_device = epoch(&loader(PrepareOn::Device, device.clone()))?;
            let reference = epoch(&loader(PrepareOn::Host, burn::tensor::Device::flex()))?;
            let case = format!(
                "hist {history}, steps {steps}, stride {stride}, {}",
                if normalize_before_mask { "normalize then mask" } else { "mask then normalize, fill -3.5" }
            );
            if on_device.len() != reference.len() {
                println!(
                    "prepare FAILED ({case}): {} tensors on the device, {} on the host",
                    on_device.len(),
                    reference.len()
                );
                return Ok(false);
            }
            for (k, (d, h)) in on_device.iter().zip(&reference).enumerate() {
                let differing = d.iter().zip(h).filter(|(a, b)| a != b).count();
                if d.len() != h.len() || differing > 0 {
                    let first = d.iter().zip(h).position(|(a, b)| a != b);
                    println!(
                        "prepare FAILED ({case}): tensor {k} ({}) differs in {differing} of {} values; first at {first:?}: \
                         device {:?} vs host {:?}",
                        if k % 2 == 0 { "input" } else { "label" },
                        h.len(),
                        first.map(|i| f32::from_bits(d[i])),
                        first.map(|i| f32::from_bits(h[i])),
                    );
                    return Ok(false);
                }
                floats += h.len();
            }
            tensors += on_device.len();
        }
    }
    println!(
        "prepare on {device_name}: {tensors} tensors ({floats} values, 8 cases) equal to the host reference bit for bit"
    );
    Ok(true)
}
