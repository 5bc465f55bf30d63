//! Every data source passes the conformance suite (`om4_pipeline::conformance`): the store source
//! and the in-memory one. A source that serves the wrong planes fails it.

use std::sync::Arc;

use om4_batch::{Grid, Normalization, ReadGroup, Roles};
use om4_pipeline::conformance::check_source;
use om4_pipeline::{BatchSource, MemorySource};
use om4_store::{DataConfig, Om4Source, SourceConfig, SynthConfig, SynthLayout, synthesize};

fn naive_truth(source: &Om4Source, config: &SourceConfig) -> MemorySource {
    om4_testkit::naive_store_truth(source, config).unwrap()
}

fn store_source(layout: SynthLayout, normalize_before_mask: bool) -> (tempfile::TempDir, SourceConfig, Om4Source) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 6, nx: 10, times: 16, levels: 2, layout, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let mut data = DataConfig {
        normalize_before_mask,
        masked_fill_value: if normalize_before_mask { 0.0 } else { -1.5 },
        ..DataConfig::at(paths.data)
    };
    data.source.train_time = "1958-01-11..".parse().unwrap();
    data.read_threads = 2;
    let splits = data.open().unwrap();
    (dir, splits.spec, splits.train)
}

#[test]
fn store_source_conforms() {
    for (layout, first) in [(SynthLayout::Flat, true), (SynthLayout::Compact, false)] {
        let (_dir, config, source) = store_source(layout, first);
        let truth = naive_truth(&source, &config);
        assert_eq!(source.batch_reads_in_flight(), 1, "local files: one batch read at a time by default");
        check_source(Arc::new(source), &truth).unwrap();
    }
}

#[test]
fn memory_source_conforms() {
    let (_dir, config, source) = store_source(SynthLayout::Flat, true);
    let truth = naive_truth(&source, &config);
    let loaded = MemorySource::load(&source).unwrap();
    check_source(Arc::new(loaded), &truth).unwrap();
}

/// Serves the next time step's planes: plausible, wrong.
#[derive(Debug)]
struct OffByOne(MemorySource);

impl BatchSource for OffByOne {
    fn grid(&self) -> Grid {
        self.0.grid()
    }
    fn time_len(&self) -> usize {
        self.0.time_len() - 1
    }
    fn channels(&self) -> Vec<usize> {
        self.0.channels()
    }
    fn roles(&self) -> Roles {
        self.0.roles()
    }
    fn normalizations(&self) -> &[Normalization] {
        self.0.normalizations()
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        let shifted = ReadGroup { times: group.times.iter().map(|t| t + 1).collect(), ..group.clone() };
        self.0.read_group(&shifted, out)
    }
}

#[test]
fn a_source_serving_wrong_planes_fails_the_suite() {
    let (_dir, config, source) = store_source(SynthLayout::Flat, true);
    let truth = naive_truth(&source, &config);
    let full = MemorySource::load(&source).unwrap();
    // The truth of the same length as the wrong source, so that only the planes differ.
    let sets = (0..truth.channels().len())
        .map(|s| {
            let c = truth.channels()[s];
            let mut planes = vec![0.0; (truth.time_len() - 1) * c * truth.grid().plane()];
            let times: Vec<usize> = (0..truth.time_len() - 1).collect();
            truth.read_group(&ReadGroup { source: s, times, channels: c }, &mut planes).unwrap();
            (planes, truth.normalizations()[s].clone())
        })
        .collect();
    let short_truth = MemorySource::new(truth.grid(), truth.time_len() - 1, truth.roles(), sets).unwrap();
    let err = check_source(Arc::new(OffByOne(full)), &short_truth).unwrap_err();
    assert!(err.contains("differs"), "{err}");
}

#[test]
fn memory_source_rejects_inconsistent_planes() {
    let (_dir, _config, source) = store_source(SynthLayout::Flat, true);
    let norm = source.normalizations()[0].clone();
    let err = MemorySource::new(source.grid(), 3, Roles::prognostic_only(), vec![(vec![0.0; 5], norm)]).unwrap_err();
    assert!(err.to_string().contains("5 values for 3 times"), "{err}");
}
