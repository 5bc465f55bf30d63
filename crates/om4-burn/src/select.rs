//! A training device chosen by name, together with the host staging pool that suits it, and
//! cubecl's settings for the GPU backends.
//!
//! Names: `cpu` (Burn's flex), `cuda` or `cuda:N` (feature `cuda`), `vulkan` or `vulkan:N`
//! (feature `vulkan`: cubecl's SPIR-V through wgpu), `wgpu` or `wgpu:N` (feature `wgpu`: WGSL,
//! translated by wgpu for the platform's API). A CUDA device stages batches in page-locked memory
//! of its own device's context, so that every rank of a data-parallel job pins on its own GPU.

use burn::tensor::Device;
use om4_pipeline::BufferPool;

use crate::error::{Error, Result};

/// A device by name, probed once, and the staging pool its loaders should use.
#[derive(Debug, Clone)]
pub struct TrainingDevice {
    /// The name it was opened by (`cuda:1`).
    pub name: DeviceName,
    /// The Burn device.
    pub device: Device,
    /// Host staging: pinned on a CUDA device (feature `cuda`), pageable elsewhere.
    pub staging: BufferPool,
}

/// What a device name says, before anything is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceName {
    /// Burn's flex backend on the CPU (`cpu`, `flex`).
    Cpu,
    /// CUDA device N (`cuda`, `cuda:N`).
    Cuda(usize),
    /// cubecl's SPIR-V through wgpu's Vulkan (`vulkan`: wgpu's default adapter; `vulkan:N`: the
    /// N-th discrete GPU).
    Vulkan(Option<usize>),
    /// WGSL through wgpu (`wgpu`: wgpu's default adapter, which may be a software device such as
    /// lavapipe; `wgpu:N`: the N-th discrete GPU).
    Wgpu(Option<usize>),
}

impl std::str::FromStr for DeviceName {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        let bad = |reason: String| Error::Device { name: name.to_string(), reason };
        let (backend, index) = match name.split_once(':') {
            Some((b, i)) => (b, Some(i.parse::<usize>().map_err(|_| bad(format!("{i:?} is not a device index")))?)),
            None => (name, None),
        };
        match (backend, index) {
            ("cpu" | "flex", None) => Ok(Self::Cpu),
            ("cuda", i) => Ok(Self::Cuda(i.unwrap_or(0))),
            ("vulkan", i) => Ok(Self::Vulkan(i)),
            ("wgpu", i) => Ok(Self::Wgpu(i)),
            _ => Err(bad(format!("not a device name; expected one of: {}", DeviceName::NAMES))),
        }
    }
}

impl DeviceName {
    /// Every accepted form, for messages and help.
    pub const NAMES: &'static str = "cpu, cuda[:N], vulkan[:N], wgpu[:N]";

    /// Whether this is a cubecl (GPU) backend.
    pub fn is_gpu(self) -> bool {
        self != Self::Cpu
    }

    /// The Burn device, when this build has its backend (else the feature it needs).
    fn device(self) -> std::result::Result<Device, &'static str> {
        #[cfg(any(feature = "vulkan", feature = "wgpu"))]
        let kind =
            |i: Option<usize>| i.map_or(burn::tensor::DeviceKind::DefaultDevice, burn::tensor::DeviceKind::DiscreteGpu);
        match self {
            Self::Cpu => Ok(Device::flex()),
            #[cfg(feature = "cuda")]
            Self::Cuda(i) => Ok(Device::cuda(i)),
            #[cfg(not(feature = "cuda"))]
            Self::Cuda(_) => Err("cuda"),
            #[cfg(feature = "vulkan")]
            Self::Vulkan(i) => Ok(Device::vulkan(kind(i))),
            #[cfg(not(feature = "vulkan"))]
            Self::Vulkan(_) => Err("vulkan"),
            #[cfg(feature = "wgpu")]
            Self::Wgpu(i) => Ok(Device::wgpu(kind(i))),
            #[cfg(not(feature = "wgpu"))]
            Self::Wgpu(_) => Err("wgpu"),
        }
    }
}

/// The name's canonical form (`cpu`, `cuda:0`, `vulkan`, `wgpu:1`), which parses back to it.
impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(i) => write!(f, "cuda:{i}"),
            Self::Vulkan(None) => f.write_str("vulkan"),
            Self::Vulkan(Some(i)) => write!(f, "vulkan:{i}"),
            Self::Wgpu(None) => f.write_str("wgpu"),
            Self::Wgpu(Some(i)) => write!(f, "wgpu:{i}"),
        }
    }
}

impl TrainingDevice {
    /// Opens the device `name` (see [`DeviceName`]), uses it once so that a missing driver or
    /// adapter is this error rather than a panic in the middle of training, and makes its
    /// staging pool.
    ///
    /// # Errors
    /// [`Error::Device`] for a name this build cannot open (a bad name, a backend whose cargo
    /// feature is off, a device the backend cannot use); [`Error::Pipeline`] when the pinned
    /// staging pool cannot be made.
    pub fn open(name: &str) -> Result<Self> {
        let parsed: DeviceName = name.parse()?;
        let device = parsed.device().map_err(|feature| Error::Device {
            name: name.to_string(),
            reason: format!("this build has no {feature} backend (build with `--features {feature}`)"),
        })?;
        let device = probe(name, device)?;
        let staging = match parsed {
            #[cfg(feature = "cuda")]
            DeviceName::Cuda(i) => BufferPool::pinned(i)?,
            _ => BufferPool::new(),
        };
        Ok(Self { name: parsed, device, staging })
    }
}

/// Uses `device` once. The backends report a missing driver or adapter by panicking on first use
/// (possibly on their own threads first); the first panic's message becomes the error.
fn probe(name: &str, device: Device) -> Result<Device> {
    use std::sync::{Arc, Mutex};
    let first = Arc::new(Mutex::new(None::<String>));
    let hook = std::panic::take_hook();
    let record = Arc::clone(&first);
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()));
        if let (Ok(mut slot), Some(m)) = (record.lock(), message) {
            slot.get_or_insert(m);
        }
    }));
    let used = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        burn::tensor::Tensor::<1>::from_data([1.0f32, 2.0], &device).sum().into_scalar::<f32>()
    }));
    std::panic::set_hook(hook);
    let reason = match used {
        Ok(3.0) => return Ok(device),
        Ok(v) => format!("it computed 1 + 2 = {v}"),
        Err(_) => first.lock().ok().and_then(|m| m.clone()).unwrap_or_else(|| "the backend panicked".into()),
    };
    Err(Error::Device { name: name.to_string(), reason })
}

/// How much cubecl tunes a kernel before choosing it (cubecl's `[autotune] level`): more levels
/// anchor keys more finely and accept a candidate later, so the first step takes longer and the
/// steady steps may run faster. docs/gpu.md has what each costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutotuneLevel {
    /// The fewest distinct keys and the earliest short circuit.
    Minimal,
    /// cubecl's default.
    Balanced,
    /// Finer keys, a later short circuit.
    Extensive,
    /// Exact keys, every candidate measured.
    Full,
}

impl std::str::FromStr for AutotuneLevel {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "minimal" | "0" => Ok(Self::Minimal),
            "balanced" | "1" => Ok(Self::Balanced),
            "extensive" | "2" => Ok(Self::Extensive),
            "full" | "3" => Ok(Self::Full),
            _ => Err(Error::Config(format!("autotune level {s:?}: expected minimal, balanced, extensive or full"))),
        }
    }
}

/// cubecl's settings as a GPU run starts, applied over `cubecl.toml` (and its `CUBECL_*`
/// environment overrides) before any GPU device is used.
#[derive(Debug, Clone, Default)]
pub struct CubeclSettings {
    /// Overrides the file's `[autotune] level` (and `CUBECL_AUTOTUNE_LEVEL`).
    pub autotune_level: Option<AutotuneLevel>,
}

/// What [`configure_cubecl`] put in force, for the run's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CubeclSummary {
    /// The autotune level in force.
    pub autotune_level: String,
    /// Whether compiled kernels are kept on disk (`[compilation] cache`).
    pub kernel_cache: bool,
    /// The log files in use (compilation, autotune).
    pub logs: Vec<std::path::PathBuf>,
}

/// Sets cubecl's configuration for this process: `cubecl.toml` from the working directory or a
/// parent, `CUBECL_*` overrides, then `settings`. A log file that cannot be created (a read-only
/// directory) is dropped with a warning instead of panicking inside cubecl at its first line.
/// Without a GPU feature in the build this does nothing and returns `None`.
///
/// # Errors
/// [`Error::Config`] when cubecl's configuration was already read (a GPU device was used before
/// this call), so the settings could not take effect.
pub fn configure_cubecl(settings: &CubeclSettings) -> Result<Option<CubeclSummary>> {
    #[cfg(feature = "gpu")]
    {
        use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, autotune};
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        if let Some(level) = settings.autotune_level {
            config.autotune.level = match level {
                AutotuneLevel::Minimal => autotune::AutotuneLevel::Minimal,
                AutotuneLevel::Balanced => autotune::AutotuneLevel::Balanced,
                AutotuneLevel::Extensive => autotune::AutotuneLevel::Extensive,
                AutotuneLevel::Full => autotune::AutotuneLevel::Full,
            };
        }
        let mut logs = Vec::new();
        for file in [&mut config.compilation.logger.file, &mut config.autotune.logger.file] {
            let Some(path) = file.clone() else { continue };
            let writable = path.parent().is_none_or(|p| p.as_os_str().is_empty() || std::fs::create_dir_all(p).is_ok())
                && std::fs::OpenOptions::new().create(true).append(true).open(&path).is_ok();
            if writable {
                logs.push(path);
            } else {
                tracing::warn!("cubecl's log file {} cannot be written; that log is off", path.display());
                *file = None;
            }
        }
        let summary = CubeclSummary {
            autotune_level: format!("{:?}", config.autotune.level).to_lowercase(),
            kernel_cache: config.compilation.cache,
            logs,
        };
        if !CubeClRuntimeConfig::try_set(config) {
            return Err(Error::Config(
                "cubecl's configuration was already read (a GPU device was used before configure_cubecl)".into(),
            ));
        }
        Ok(Some(summary))
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = settings;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_backend_and_index() {
        let parse = |s: &str| s.parse::<DeviceName>();
        assert_eq!(parse("cpu").unwrap(), DeviceName::Cpu);
        assert_eq!(parse("flex").unwrap(), DeviceName::Cpu);
        assert_eq!(parse("cuda").unwrap(), DeviceName::Cuda(0));
        assert_eq!(parse("cuda:3").unwrap(), DeviceName::Cuda(3));
        assert_eq!(parse("vulkan").unwrap(), DeviceName::Vulkan(None));
        assert_eq!(parse("vulkan:1").unwrap(), DeviceName::Vulkan(Some(1)));
        assert_eq!(parse("wgpu").unwrap(), DeviceName::Wgpu(None));
        for name in ["cpu", "cuda:0", "cuda:3", "vulkan", "vulkan:1", "wgpu", "wgpu:2"] {
            assert_eq!(parse(name).unwrap().to_string(), name, "the canonical form parses back");
        }
        for bad in ["gpu", "cuda:x", "cpu:1", "", "cuda:-1"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn the_cpu_opens_with_pageable_staging() {
        let d = TrainingDevice::open("cpu").unwrap();
        assert_eq!(d.device, Device::flex());
        assert_eq!(d.name, DeviceName::Cpu);
        assert!(!d.staging.is_pinned());
    }

    /// A backend left out of the build is an error that names its feature, not a panic.
    #[test]
    fn a_backend_not_built_names_its_feature() {
        for (name, feature) in [("cuda:1", "cuda"), ("vulkan", "vulkan"), ("wgpu", "wgpu")] {
            let built = match feature {
                "cuda" => cfg!(feature = "cuda"),
                "vulkan" => cfg!(feature = "vulkan"),
                _ => cfg!(feature = "wgpu"),
            };
            if built {
                continue;
            }
            let e = TrainingDevice::open(name).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(&format!("--features {feature}")), "{e}");
        }
    }

    #[test]
    fn autotune_levels_parse() {
        assert_eq!("minimal".parse::<AutotuneLevel>().unwrap(), AutotuneLevel::Minimal);
        assert_eq!("3".parse::<AutotuneLevel>().unwrap(), AutotuneLevel::Full);
        assert!("fast".parse::<AutotuneLevel>().unwrap_err().to_string().contains("\"fast\""));
    }
}
