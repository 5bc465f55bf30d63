//! Shared fixtures: small synthetic stores, sources, and a source that fails on purpose.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use om4_burn::BatchSource;
use om4_pipeline::Error;
use om4_pipeline::conformance::Intercept;
use om4_store::{DataConfig, Om4Source, SynthConfig, synthesize};

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub config: DataConfig,
}

/// 2 levels: prognostic uo_0..so_1 + zos (9), boundary tauuo, tauvo, hfds (3); 6×10 grid, 16 steps.
pub fn fixture(normalize_before_mask: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 6, nx: 10, times: 16, levels: 2, consolidated: false, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let mut config = DataConfig { normalize_before_mask, ..DataConfig::at(paths.data) };
    config.read_threads = 2;
    Fixture { dir, config }
}

/// The whole store (every time) as a source.
pub fn source(f: &Fixture) -> Arc<Om4Source> {
    Arc::new(f.config.open().unwrap().train)
}

#[allow(unused_imports)] // not every test binary compares bits
pub use om4_testkit::bits;

pub fn tensor_values(t: burn::tensor::Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// `inner`, failing (an error, or a panic) on its `at`-th read call.
pub fn faulty(inner: Arc<Om4Source>, at: usize, panic: bool) -> Intercept<Om4Source> {
    let calls = AtomicUsize::new(0);
    Intercept::new(inner, move |inner, group, out| {
        let call = calls.fetch_add(1, Ordering::SeqCst);
        if call == at {
            if panic {
                panic!("injected panic at read {call}");
            }
            return Err(Error::Config { field: "test", reason: format!("injected failure at read {call}") });
        }
        inner.read_group(group, out)
    })
}
