//! A rollout equals the model applied step by step to the naive path's inputs, and the store it
//! writes reads back through om4 bit for bit.

use std::sync::Arc;

use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_batch::{Normalization, Sample, WindowSpec, reference_batch};
use om4_pipeline::{BatchSource, MemorySource};
use om4_samudra::{SamudraConfig, denormalize, rollout};
use om4_store::{DataConfig, Om4Store, PlaneWriter, ReadPool, SynthConfig, TimeCoordinate, synthesize};

#[test]
fn rollout_steps_equal_single_forward_applications_and_round_trip_through_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 16, nx: 32, times: 16, levels: 1, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let mut config = DataConfig::at(paths.data.clone());
    config.read_threads = 2;
    let splits = config.open().unwrap();
    let (names, source) = (splits.spec.prognostic, Arc::new(splits.train)); // every time
    let (hist, steps, start) = (1, 3, 2);
    let (grid, states) = (source.grid(), hist + 1);
    let channels = source.channels();
    let (c_prog, c_bound) = (channels[0], channels[1]);
    let device = Device::flex();
    let model = SamudraConfig::tiny().init(states * (c_prog + c_bound), states * c_prog, &device);

    let mut predicted = Vec::new();
    let reports = rollout(&model, &*source, hist, start, steps, &device, |_, states, _| {
        predicted.push(states.to_vec());
        Ok(())
    })
    .unwrap();
    assert_eq!(reports.len(), steps);
    assert_eq!(reports[1].times, vec![start + 4, start + 5]);
    assert!(reports.iter().all(|r| r.rmse.iter().flatten().all(|v| v.is_finite())));

    // The same steps by hand: the naive reference batch gives each step's inputs; the model's
    // previous prediction replaces the prognostic part after the first step.
    let truth = MemorySource::load(&*source).unwrap();
    let norms: Vec<&Normalization> = truth.normalizations().iter().collect();
    let sample = Sample { spec: WindowSpec::new(hist, steps, 1).unwrap(), start };
    let naive = reference_batch(&[sample], &truth.roles(), &norms, grid, |s, t, c, out: &mut [f32]| {
        let n = norms[s].channels();
        let mut all = vec![0.0; n * grid.plane()];
        truth.read_group(&om4_batch::ReadGroup { source: s, times: vec![t], channels: n }, &mut all).unwrap();
        out.copy_from_slice(&all[c * grid.plane()..(c + 1) * grid.plane()]);
        Ok::<(), om4_batch::Error>(())
    })
    .unwrap();
    let wet = norms[0].mask().repeat(states);
    let land: Vec<bool> = wet.as_slice().iter().map(|w| !w).collect();
    let land = Tensor::<4, Bool>::from_data(TensorData::new(land, [1, states * c_prog, grid.y, grid.x]), &device);
    let n_in = states * (c_prog + c_bound);
    let mut previous: Option<Tensor<4>> = None;
    for (k, step) in naive.steps.iter().enumerate() {
        let data = Tensor::<4>::from_data(TensorData::new(step.input.clone(), [1, n_in, grid.y, grid.x]), &device);
        let input = match previous.take() {
            None => data,
            Some(p) => Tensor::cat(vec![p, data.slice([0..1, states * c_prog..n_in, 0..grid.y, 0..grid.x])], 1),
        };
        let pred = model.forward(input, land.clone());
        let values = pred.clone().into_data().try_to_vec::<f32>().unwrap();
        let physical = denormalize(&values, norms[0], states, grid.plane(), wet.as_slice());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&physical), bits(&predicted[k]), "step {k}");
        previous = Some(pred);
    }

    // Written as a store, read back through om4.
    let out = dir.path().join("predictions.zarr");
    let times = steps * states;
    let time = TimeCoordinate {
        values: (0..times).map(|i| i as f64 * 5.0).collect(),
        units: "days since 1958-01-11 12:00:00".into(),
        calendar: "noleap".into(),
    };
    let mut writer = PlaneWriter::create(&out, &names, grid, &time, None).unwrap();
    for (k, states_k) in predicted.iter().enumerate() {
        for (j, planes) in states_k.chunks_exact(c_prog * grid.plane()).enumerate() {
            writer.write_time(k * states + j, planes).unwrap();
        }
    }
    writer.finish().unwrap();
    let store = Om4Store::open(&out).unwrap();
    assert_eq!(store.time().unwrap().len(), times);
    let set = store.channels(&names).unwrap();
    let sel = set.all_rows();
    let mut back = vec![0.0; times * c_prog * grid.plane()];
    store.reader(&ReadPool::new(1).unwrap(), &set, &sel).read(&(0..times).collect::<Vec<_>>(), &mut back).unwrap();
    let written: Vec<u32> = predicted.concat().iter().map(|v| v.to_bits()).collect();
    assert_eq!(back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), written);
}
