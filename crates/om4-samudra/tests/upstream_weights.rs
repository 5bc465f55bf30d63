//! Upstream PyTorch Samudra weights load into om4's network and give upstream's output.
//!
//! `tests/data/upstream/make_upstream_model.py` built upstream's own model classes
//! (m2lines/Samudra 018a6a7) for four small variants (v2-like with batch norm, v2_highres-like
//! with instance norm, v1-like, and om4's `tiny`), perturbed batch-norm statistics so that
//! inference mode matters, and saved their weights, a checkpoint or two, an input, an ocean mask
//! and the float64 forward. No torch runs here.

use std::path::{Path, PathBuf};

use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_samudra::{NormKind, Samudra, SamudraConfig, UpsampleKind, load_upstream, save_upstream};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/upstream/model")
}

/// A `.npy` array as f64 values and its shape.
fn npy(path: &Path) -> (Vec<f64>, Vec<usize>) {
    let npy = om4_store::npy::Npy::read(path).unwrap_or_else(|e| panic!("{e}"));
    (npy.to_f64().unwrap_or_else(|e| panic!("{}: {e}", path.display())), npy.shape)
}

fn config(variant: &str) -> SamudraConfig {
    let small = |norm, upscale, upsample| SamudraConfig {
        ch_width: if upscale == 4 { [2, 3, 4, 6] } else { [4, 6, 8, 12] },
        upscale,
        norm,
        upsample,
        ..SamudraConfig::v2()
    };
    match variant {
        "small_batch" => small(NormKind::Batch, 2, UpsampleKind::ZonallyPeriodic),
        "small_instance" => small(NormKind::Instance, 2, UpsampleKind::ZonallyPeriodic),
        "small_v1" => small(NormKind::Batch, 4, UpsampleKind::Bilinear),
        "tiny" => SamudraConfig::tiny(),
        other => panic!("unknown variant {other}"),
    }
}

/// om4's forward of the fixture input with `model` (inference mode), as f64.
fn forward(model: &Samudra) -> Vec<f64> {
    let device = Device::flex();
    let (input, shape) = npy(&fixtures().join("input.npy"));
    let (mask, mask_shape) = npy(&fixtures().join("mask.npy"));
    let x: Vec<f32> = input.iter().map(|&v| v as f32).collect();
    let land: Vec<bool> = mask.iter().map(|&v| v == 0.0).collect();
    let x = Tensor::<4>::from_data(TensorData::new(x, [shape[0], shape[1], shape[2], shape[3]]), &device);
    let land =
        Tensor::<4, Bool>::from_data(TensorData::new(land, [1, mask_shape[0], mask_shape[1], mask_shape[2]]), &device);
    model.forward(x, land).into_data().try_to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

/// max |om4 − reference| / max |reference|.
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

#[test]
fn upstream_safetensors_give_upstream_outputs() {
    for variant in ["small_batch", "small_instance", "small_v1", "tiny"] {
        let mut model = config(variant).init(3, 2, &Device::flex());
        load_upstream(&mut model, &fixtures().join(format!("{variant}.safetensors")))
            .unwrap_or_else(|e| panic!("{variant}: {e}"));
        let (want, _) = npy(&fixtures().join(format!("{variant}_output.npy")));
        let err = relative_error(&forward(&model), &want);
        println!("{variant}: max|om4 - float64 reference| / max|reference| = {err:.3e}");
        assert!(err <= 1e-5, "{variant}: relative error {err:.3e}");
    }
}

#[test]
fn upstream_checkpoints_load_model_and_ddp_entries() {
    let mut model = config("small_batch").init(3, 2, &Device::flex());
    load_upstream(&mut model, &fixtures().join("small_batch_ckpt.pt")).unwrap();
    let (want, _) = npy(&fixtures().join("small_batch_output.npy"));
    assert!(relative_error(&forward(&model), &want) <= 1e-5);
    // upstream's ema_ckpt.pt under DDP: the EMA weights as "model", every key prefixed `module.`.
    let mut ema = config("small_batch").init(3, 2, &Device::flex());
    load_upstream(&mut ema, &fixtures().join("small_batch_ema_ckpt_module.pt")).unwrap();
    let (want, _) = npy(&fixtures().join("small_batch_output_ema.npy"));
    assert!(relative_error(&forward(&ema), &want) <= 1e-5);
    // The 2024 release's flat `layers.N` keys with the head at `layers.17` (make_flat_2024.py).
    let mut flat = config("small_batch").init(3, 2, &Device::flex());
    load_upstream(&mut flat, &fixtures().join("small_batch_flat2024.pt")).unwrap();
    let (want, _) = npy(&fixtures().join("small_batch_output.npy"));
    assert!(relative_error(&forward(&flat), &want) <= 1e-5);
}

#[test]
fn mismatched_models_are_errors_naming_the_keys() {
    let path = fixtures().join("small_batch.safetensors");
    // Another input channel count: the first layer's shapes disagree.
    let mut wrong_inputs = config("small_batch").init(5, 2, &Device::flex());
    let e = load_upstream(&mut wrong_inputs, &path).unwrap_err().to_string();
    assert!(e.contains("down.0.conv1.weight") && e.contains("input channel count"), "{e}");
    // Instance norm has no running statistics: the file's batch-norm tensors are left over.
    let mut wrong_norm = config("small_instance").init(3, 2, &Device::flex());
    let e = load_upstream(&mut wrong_norm, &path).unwrap_err().to_string();
    assert!(e.contains("not in the model") && e.contains("running_mean"), "{e}");
    // Batch norm where the file has none: missing keys.
    let mut missing = config("small_batch").init(3, 2, &Device::flex());
    let e = load_upstream(&mut missing, &fixtures().join("small_instance.safetensors")).unwrap_err().to_string();
    assert!(e.contains("missing") && e.contains("norm1.batch"), "{e}");
    // Not a weights file.
    let mut model = config("small_batch").init(3, 2, &Device::flex());
    assert!(load_upstream(&mut model, &fixtures().join("model.json")).is_err());
}

#[test]
fn saved_weights_round_trip_bit_for_bit_with_upstream_names() {
    let mut model = config("small_batch").init(3, 2, &Device::flex());
    load_upstream(&mut model, &fixtures().join("small_batch.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("om4.safetensors");
    save_upstream(&model, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let header_len = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
    let text = String::from_utf8_lossy(&bytes[8..8 + header_len]).to_string();
    // Upstream's buffers too, so that `load_state_dict(strict=True)` takes the file; set
    // OM4_KEEP_SAVED=DIR to keep it for that check (docs/samudra.md).
    if let Some(dir) = std::env::var_os("OM4_KEEP_SAVED") {
        std::fs::copy(&out, Path::new(&dir).join("small_batch_from_om4.safetensors")).unwrap();
    }
    for key in [
        "unet.layers.0.convblock.1.running_var",
        "unet.layers.16.convblock.6.weight",
        "decoder.bias",
        "unet.layers.8.convblock.5.cap",
        "unet.layers.14.convblock.4.num_batches_tracked",
    ] {
        assert!(text.contains(key), "{key} not among the saved names");
    }
    let mut back = config("small_batch").init(3, 2, &Device::flex());
    load_upstream(&mut back, &out).unwrap();
    let bits = |m: &Samudra| forward(m).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&back), bits(&model));
}
