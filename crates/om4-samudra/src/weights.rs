//! Weights exchanged with upstream PyTorch Samudra (m2lines/Samudra 018a6a7), through burn-store.
//!
//! Upstream's `Samudra` keeps its U-Net in a flat `unet.layers` list: down blocks at 0, 2, 4, 6
//! (average pools between them have no weights), the middle block at 8, up blocks at 10, 12, 14
//! (upsampling layers between them have none), the last block at 16, then `decoder` (the 3×3
//! head). A block is `skip_module` (a 1×1 conv when its widths differ) plus `convblock.{0,1,3,4,6}`
//! (k×k conv, norm, k×k conv, norm, 1×1 conv); `convblock.{2,5}.cap` are CappedGELU buffers and
//! `num_batches_tracked` a BatchNorm counter, neither of which om4 needs. The 2024 hub release
//! has the same blocks under flat `layers.N` keys with the head at `layers.17`; DDP checkpoints
//! prefix every key with `module.`. The maps below rename those keys to om4's module paths
//! (`down.0.conv1.weight`, `middle.norm1.batch.running_var`, `head.bias`, …) and back;
//! burn-store's PyTorch adapters rename BatchNorm's `weight`/`bias` to `gamma`/`beta`.

use std::path::{Path, PathBuf};

use burn::store::pytorch::{PytorchError, PytorchReader};
use burn::store::{
    ApplyResult, BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, PytorchStore,
    SafetensorsStore,
};

use crate::error::{Error, Result};
use crate::model::Samudra;

/// Upstream block index → om4 module path.
const BLOCKS: [(&str, &str); 9] = [
    ("0", "down.0"),
    ("2", "down.1"),
    ("4", "down.2"),
    ("6", "down.3"),
    ("8", "middle"),
    ("10", "up.0"),
    ("12", "up.1"),
    ("14", "up.2"),
    ("16", "last"),
];

/// Inside a block: upstream → om4.
const PARTS: [(&str, &str); 6] = [
    ("skip_module", "skip"),
    ("convblock.0", "conv1"),
    ("convblock.1", "norm1.batch"),
    ("convblock.3", "conv2"),
    ("convblock.4", "norm2.batch"),
    ("convblock.6", "project"),
];

/// Upstream keys (current, 2024 flat, `module.`-prefixed) → om4 paths.
fn upstream_to_om4() -> KeyRemapper {
    let mut patterns: Vec<(String, String)> = vec![(r"^module\.".into(), String::new())];
    for (n, path) in BLOCKS {
        patterns.push((format!(r"^(?:unet\.)?layers\.{n}\."), format!("{path}.")));
    }
    patterns.push((r"^(?:decoder|layers\.17)\.".into(), "head.".into()));
    for (upstream, om4) in PARTS {
        patterns.push((format!(r"\.{}\.", regex_escape(upstream)), format!(".{om4}.")));
    }
    KeyRemapper::from_patterns(patterns).expect("valid patterns")
}

/// om4 paths → upstream's current keys.
fn om4_to_upstream() -> KeyRemapper {
    let mut patterns: Vec<(String, String)> = Vec::new();
    for (n, path) in BLOCKS {
        patterns.push((format!(r"^{}\.", regex_escape(path)), format!("unet.layers.{n}.")));
    }
    patterns.push((r"^head\.".into(), "decoder.".into()));
    for (upstream, om4) in PARTS {
        patterns.push((format!(r"\.{}\.", regex_escape(om4)), format!(".{upstream}.")));
    }
    KeyRemapper::from_patterns(patterns).expect("valid patterns")
}

fn regex_escape(s: &str) -> String {
    s.replace('.', r"\.")
}

/// Buffers upstream saves that om4 has no use for.
fn known_buffer(key: &str) -> bool {
    key.ends_with(".cap") || key.ends_with(".num_batches_tracked")
}

/// Loads upstream weights into `model` (built with the same architecture and channel counts):
/// a `.safetensors` file, or a `.pt`/`.pth` file holding either a whole checkpoint
/// (`torch.save({"model": …, …})`: its `"model"` entry, which in upstream's `ema_ckpt.pt` holds the
/// EMA weights) or a bare `state_dict` (told apart by the top-level `"model"` key); keys may carry
/// DDP's `module.` prefix or use the 2024 flat `layers.N` layout.
///
/// # Errors
/// [`Error::Weights`] naming the file and the keys: missing tensors, tensors that are neither
/// om4's nor a known buffer (`cap`, `num_batches_tracked`), and shape mismatches (with the
/// channel counts when the first or last layer disagrees with the configured model); also an
/// unreadable file.
pub fn load_upstream(model: &mut Samudra, path: &Path) -> Result<()> {
    let err = |reason: String| Error::Weights { path: path.to_path_buf(), reason };
    let is_safetensors = path.extension().is_some_and(|e| e == "safetensors");
    let result = if is_safetensors {
        let mut store = SafetensorsStore::from_file(path)
            .with_from_adapter(PyTorchToBurnAdapter)
            .remap(upstream_to_om4())
            .allow_partial(true)
            .validate(false);
        model.load_from(&mut store).map_err(|e| err(e.to_string()))?
    } else {
        let mut store = PytorchStore::from_file(path)
            .map_indices_contiguous(false)
            .remap(upstream_to_om4())
            .allow_partial(true)
            .validate(false);
        // A whole checkpoint keeps its weights under "model"; a bare state_dict has no such key.
        match PytorchReader::with_top_level_key(path, "model") {
            Ok(_) => store = store.with_top_level_key("model"),
            Err(PytorchError::KeyNotFound(_)) => {}
            Err(e) => return Err(err(e.to_string())),
        }
        model.load_from(&mut store).map_err(|e| err(e.to_string()))?
    };
    check(&result).map_err(err)
}

/// Everything in the module was loaded, nothing unknown was left over, no shape disagreed.
fn check(result: &ApplyResult) -> std::result::Result<(), String> {
    // Name the first keys of each kind and count the rest: one wrong channel count touches one
    // layer, a wrong architecture touches all of them.
    let listed = |keys: Vec<String>| {
        let n = keys.len();
        let mut text = keys.into_iter().take(6).collect::<Vec<_>>().join("; ");
        if n > 6 {
            text.push_str(&format!("; and {} more", n - 6));
        }
        text
    };
    let mut problems = Vec::new();
    let mut errors = Vec::new();
    for e in &result.errors {
        let text = e.to_string();
        let hint = if text.contains("down.0.conv1.weight") || text.contains("down.0.skip.weight") {
            " (the checkpoint's input channel count differs from the configured model's)"
        } else if text.contains("head.weight") || text.contains("head.bias") {
            " (the checkpoint's output channel count differs from the configured model's)"
        } else {
            ""
        };
        errors.push(format!("{text}{hint}"));
    }
    if !errors.is_empty() {
        problems.push(listed(errors));
    }
    if !result.missing.is_empty() {
        problems.push(format!("missing: {}", listed(result.missing.iter().map(|(k, _)| k.clone()).collect())));
    }
    let unused: Vec<String> = result.unused.iter().filter(|k| !known_buffer(k)).cloned().collect();
    if !unused.is_empty() {
        problems.push(format!("not in the model: {}", listed(unused)));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Saves `model` as a safetensors file with upstream's key names (BatchNorm's `weight`/`bias`,
/// `unet.layers.N…`, `decoder`) and upstream's buffers (`cap` = 10 for every CappedGELU,
/// `num_batches_tracked` = 0 for every BatchNorm), which upstream's `Samudra` loads with
/// `load_state_dict(state, strict=True)` (docs/samudra.md shows the Python lines).
///
/// # Errors
/// [`Error::Weights`] when the file cannot be written.
pub fn save_upstream(model: &Samudra, path: impl Into<PathBuf>) -> Result<()> {
    let path = path.into();
    let err = |reason: String| Error::Weights { path: path.clone(), reason };
    let mut store = SafetensorsStore::from_file(path.clone())
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(om4_to_upstream())
        .metadata("format", "pt")
        .metadata("producer", "om4");
    model.save_into(&mut store).map_err(|e| err(e.to_string()))?;
    add_upstream_buffers(&path).map_err(err)
}

/// Rewrites a saved file with the buffers upstream's modules register and om4 has no use for.
fn add_upstream_buffers(path: &Path) -> std::result::Result<(), String> {
    use safetensors::tensor::{Dtype, SafeTensors, TensorView};
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| e.to_string())?;
    let metadata = header.metadata().clone();
    let file = SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let mut tensors = file.tensors();
    let names: std::collections::HashSet<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    static CAP: [u8; 4] = 10.0f32.to_le_bytes();
    static ZERO: [u8; 8] = 0i64.to_le_bytes();
    let view = |dtype, data: &'static [u8]| TensorView::new(dtype, Vec::new(), data).map_err(|e| e.to_string());
    for (n, _) in BLOCKS {
        if !names.contains(&format!("unet.layers.{n}.convblock.0.weight")) {
            continue;
        }
        for act in [2, 5] {
            tensors.push((format!("unet.layers.{n}.convblock.{act}.cap"), view(Dtype::F32, &CAP)?));
        }
        for norm in [1, 4] {
            if names.contains(&format!("unet.layers.{n}.convblock.{norm}.running_mean")) {
                let key = format!("unet.layers.{n}.convblock.{norm}.num_batches_tracked");
                tensors.push((key, view(Dtype::I64, &ZERO)?));
            }
        }
    }
    safetensors::serialize_to_file(tensors, metadata, path).map_err(|e| e.to_string())
}
