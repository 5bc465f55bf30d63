//! Shared fixtures: small synthetic stores, sources, and a source that fails on purpose.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use om4_batch::{Grid, Normalization, ReadGroup, Roles};
use om4_burn::{BatchSource, Om4Source, SourceConfig};
use om4_pipeline::Error;
use om4_store::{ReadPool, SynthConfig, synthesize};

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub config: SourceConfig,
}

/// 2 levels: prognostic uo_0..so_1 + zos (9), boundary tauuo, tauvo, hfds (3); 6×10 grid, 16 steps.
pub fn fixture(normalize_before_mask: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 6, nx: 10, times: 16, levels: 2, consolidated: false, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let config =
        SourceConfig { normalize_before_mask, ..SourceConfig::samudra(paths.data, paths.means, paths.stds, 2) };
    Fixture { dir, config }
}

pub fn source(f: &Fixture) -> Arc<Om4Source> {
    Arc::new(Om4Source::open(&f.config, None, None, ReadPool::new(2).unwrap()).unwrap())
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn tensor_values(t: burn::tensor::Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// Fails (error or panic) on its `at`-th read call, optionally sleeping on every read.
#[derive(Debug)]
pub struct Faulty {
    pub inner: Arc<Om4Source>,
    pub at: usize,
    pub panic: bool,
    pub delay: Duration,
    pub calls: AtomicUsize,
}

impl Faulty {
    pub fn new(inner: Arc<Om4Source>, at: usize, panic: bool) -> Self {
        Self { inner, at, panic, delay: Duration::ZERO, calls: AtomicUsize::new(0) }
    }
}

impl BatchSource for Faulty {
    fn grid(&self) -> Grid {
        self.inner.grid()
    }
    fn time_len(&self) -> usize {
        self.inner.time_len()
    }
    fn channels(&self) -> Vec<usize> {
        self.inner.channels()
    }
    fn roles(&self) -> Roles {
        self.inner.roles()
    }
    fn normalizations(&self) -> &[Normalization] {
        self.inner.normalizations()
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        std::thread::sleep(self.delay);
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call == self.at {
            if self.panic {
                panic!("injected panic at read {call}");
            }
            return Err(Error::Config { field: "test", reason: format!("injected failure at read {call}") });
        }
        self.inner.read_group(group, out)
    }
}
