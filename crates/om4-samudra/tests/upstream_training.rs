//! Training semantics equal upstream Samudra's (m2lines/Samudra 018a6a7), on fixtures written by
//! `tests/data/upstream/make_upstream_training.py` with upstream's own `EMATracker` and torch's
//! `BatchNorm2d`.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor, TensorData};
use om4_samudra::{Ema, NormKind, Samudra, SamudraConfig, UpsampleKind, load_upstream};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/upstream/training")
}

fn small_batch(path: &Path) -> Samudra {
    let config = SamudraConfig {
        ch_width: [4, 6, 8, 12],
        upscale: 2,
        norm: NormKind::Batch,
        upsample: UpsampleKind::ZonallyPeriodic,
        ..SamudraConfig::v2()
    };
    let mut model = config.init(3, 2, &Device::flex());
    load_upstream(&mut model, path).unwrap_or_else(|e| panic!("{e}"));
    model
}

/// Every float tensor of a model in visiting order, as bits, with its module path.
fn tensors(model: &Samudra) -> Vec<(String, Vec<u32>)> {
    struct All(Vec<String>, Vec<(String, Vec<u32>)>);
    impl ModuleVisitor for All {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.0.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.0.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let v = param.val().into_data().try_to_vec::<f32>().unwrap();
            self.1.push((self.0.join("."), v.iter().map(|x| x.to_bits()).collect()));
        }
    }
    let mut all = All(Vec::new(), Vec::new());
    model.visit(&mut all);
    all.1
}

#[test]
fn ema_equals_upstream_ema_tracker_bit_for_bit() {
    // One live model whose weights change in place between updates, as in training.
    let mut live = small_batch(&fixtures().join("ema_step0.safetensors"));
    let mut ema = Ema::new(&live, 0.999);
    for k in 1..4 {
        let path = fixtures().join(format!("ema_step{k}.safetensors"));
        load_upstream(&mut live, &path).unwrap();
        ema.update(&live);
    }
    assert_eq!(ema.updates(), 3);
    let want = tensors(&small_batch(&fixtures().join("ema_after3.safetensors")));
    let got = tensors(ema.model());
    assert_eq!(got.len(), want.len());
    let mut buffers = 0;
    for ((path, g), (_, w)) in got.iter().zip(&want) {
        assert_eq!(g, w, "{path}");
        buffers += usize::from(path.contains("running_"));
    }
    assert!(buffers > 0, "running statistics are compared too (copied from the live model)");
    // The first decay is 2/11: upstream increments its counter before using it.
    assert_eq!(Ema::decay_at(0.999, 1), 2.0f32 / 11.0);
}

fn npy_f32(path: &Path) -> Vec<f32> {
    om4_store::npy::Npy::read(path).and_then(|n| n.to_f32()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn batch_norm_running_variance_is_unbiased_as_in_pytorch() {
    use burn::nn::BatchNormConfig;
    let device = Device::flex().autodiff();
    let bn = BatchNormConfig::new(3).init(&device);
    bn.running_mean.update(Tensor::from_data(TensorData::new(vec![0.1f32, -0.2, 0.3], [3]), &device));
    bn.running_var.update(Tensor::from_data(TensorData::new(vec![1.5f32, 0.5, 2.0], [3]), &device));
    let x = Tensor::<4>::from_data(TensorData::new(npy_f32(&fixtures().join("bn_input.npy")), [2, 3, 4, 5]), &device);
    let y = om4_samudra::model::batch_norm_train(&bn, x).into_data().try_to_vec::<f32>().unwrap();
    let close = |got: &[f32], want: &[f32], what: &str| {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}: {g} vs {w}");
        }
    };
    close(&y, &npy_f32(&fixtures().join("bn_output.npy")), "output");
    let mean = bn.running_mean.value_sync().into_data().try_to_vec::<f32>().unwrap();
    let var = bn.running_var.value_sync().into_data().try_to_vec::<f32>().unwrap();
    close(&mean, &npy_f32(&fixtures().join("bn_running_mean.npy")), "running mean");
    close(&var, &npy_f32(&fixtures().join("bn_running_var.npy")), "running variance");
}
