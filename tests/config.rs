//! Run configurations parse whole, in om4's flat form (configs/om4.toml) and in Samudra's own
//! `sources` form (as its configs/data/om4_demo.yaml), and open the store once into both splits.

use om4_pipeline::{LoaderConfig, LoaderKind, PrepareOn};
use om4_samudra::{RunConfig, SamudraConfig, Steps, TrainConfig};
use om4_store::DataConfig;
use om4_store::{DateRange, StoreLocation, SynthConfig, synthesize};

fn range(text: &str) -> DateRange {
    text.parse().unwrap()
}

#[test]
fn the_shipped_config_parses_whole() {
    let run: RunConfig = toml::from_str(include_str!("../configs/om4.toml")).unwrap();
    let source = &run.data.source;
    assert_eq!(source.data_location, Some(StoreLocation::from(std::path::Path::new("/data/om4_onedeg/OM4.zarr"))));
    assert_eq!(source.stds(), Some(StoreLocation::from(std::path::Path::new("/data/om4_onedeg/OM4_stds.zarr"))));
    assert_eq!(source.boundary.as_deref(), Some(&["tauuo".to_string(), "tauvo".into(), "hfds".into()][..]));
    let (prognostic, boundary) = source.channels(19).unwrap();
    assert_eq!((prognostic.len(), boundary.len()), (77, 3), "Samudra's channels when the file lists none");
    assert_eq!(run.data.loading, LoaderConfig { prefetch_batches: 2, ..LoaderConfig::default() });
    assert_eq!(run.data.read_threads, 32, "loading.max_concurrent_reads sizes the store's read pool");
    let train = run.train_config().unwrap();
    assert_eq!(
        train,
        TrainConfig {
            epochs: 70,
            learning_rate: 6e-4,
            batch_size: 4,
            hist: 1,
            steps: 4,
            data_stride: 1,
            grad_accumulation: 1,
            rand_seed: 15,
            dynamic_loss_limit: Some(20.0),
            ..TrainConfig::default()
        }
    );
    // The splits have one owner: the data section.
    assert_eq!(
        (source.train_time, source.val_time),
        (range("1975-01-03..2013-10-05"), range("2013-10-05..2014-10-05"))
    );
    assert_eq!(run.model_config().unwrap(), SamudraConfig::v2());
}

/// Samudra's own data section (the form of its configs/data/om4_demo.yaml): one OM4 source in a
/// `sources` list with s3 locations, Samudra's variable keys and its inference split.
const SAMUDRA_DATA: &str = r#"
data:
  sources:
    - type: om4
      prognostic_vars_key: thermo_dynamic_all
      boundary_vars_key: tau_hfds
      train_time:
        start: "1975-01-03"
        end: "2013-10-05"
      val_time:
        start: "2013-10-05"
        end: "2014-10-05"
      inference_times:
        - start: "2014-10-10"
          end: "2022-12-24"
      data_location:
        type: s3
        endpoint_url: "https://example.org"
        anon: true
        bucket: pubs
        path: Samudra/om4_twodeg/OM4.zarr
      data_means_location:
        type: s3
        endpoint_url: "https://example.org"
        anon: true
        bucket: pubs
        path: Samudra/om4_twodeg/OM4_means.zarr
  concurrent_compute: true
  loading:
    type: cpu
experiment:
  rand_seed: 7
train:
  steps: [1, 2]
  step_transition: [3]
  gradient_accumulation_steps: 2
"#;

#[test]
fn samudras_sources_form_parses() {
    let run: RunConfig = serde_yaml::from_str(SAMUDRA_DATA).unwrap();
    let source = &run.data.source;
    assert_eq!(source.train_time, range("1975-01-03..2013-10-05"));
    assert_eq!(source.inference_times, [range("2014-10-10..2022-12-24")]);
    let Some(StoreLocation::S3(data)) = &source.data_location else { panic!("an s3 store: {source:?}") };
    assert_eq!((data.bucket.as_str(), data.path.as_str()), ("pubs", "Samudra/om4_twodeg/OM4.zarr"));
    let Some(StoreLocation::S3(stds)) = source.stds() else { panic!("stds beside the store") };
    assert_eq!(stds.path, "Samudra/om4_twodeg/OM4_stds.zarr");
    assert_eq!(run.data.loading.kind, Some(LoaderKind::Cpu));
    assert_eq!(run.data.loading.prepare_on, PrepareOn::Auto);
    assert_eq!(run.data.read_threads, DataConfig::READ_THREADS, "Samudra's default when not given");
    let (prognostic, boundary) = source.channels(19).unwrap();
    assert_eq!((prognostic.len(), &prognostic[76], boundary.len()), (77, &"zos".to_string(), 3));
    let train = run.train_config().unwrap();
    assert_eq!(
        (train.steps, &train.curriculum_steps[..], train.grad_accumulation, train.rand_seed),
        (1, &[1, 2][..], 2, 7)
    );
}

#[test]
fn bad_configurations_are_refused_with_reasons() {
    let data = |yaml: &str| serde_yaml::from_str::<DataConfig>(yaml).map_err(|e| e.to_string());
    let both = data("sources: [{data_location: /a/OM4.zarr}]\ndata_location: /b/OM4.zarr").unwrap_err();
    assert!(both.contains("not both"), "{both}");
    let two = data("sources: [{data_location: /a/OM4.zarr}, {data_location: /b/OM4.zarr}]").unwrap_err();
    assert!(two.contains("one source"), "{two}");
    let llc = data("sources: [{type: llc, data_location: /a/OM4.zarr}]").unwrap_err();
    assert!(llc.contains("llc"), "{llc}");
    let unknown = data("data_location: /a/OM4.zarr\nprognostics: [zos]").unwrap_err();
    assert!(unknown.contains("prognostics"), "{unknown}");
    let loading = data("loading: {max_concurrent_reads: 4, prefetch: 2}").unwrap_err();
    assert!(loading.contains("prefetch"), "an unknown loading key: {loading}");
    let reads = data("loading: {max_concurrent_reads: 4, prefetch_batches: 3}").unwrap();
    assert_eq!((reads.read_threads, reads.loading.prefetch_batches), (4, 3));
    let date = data("train_time: {start: \"1975-01-03 00:00\"}").unwrap_err();
    assert!(date.contains("time of day"), "{date}");
    let key = data("prognostic_vars_key: thermo_9").unwrap();
    assert!(key.source.channels(19).unwrap_err().to_string().contains("thermo_9"));
    let twice = data("prognostic_vars_key: thermo_all\nprognostic: [zos]").unwrap();
    assert!(twice.source.channels(19).is_err());
    assert!(DataConfig::default().open().unwrap_err().to_string().contains("data_location"));
    let run = |toml: &str| toml::from_str::<RunConfig>(toml).unwrap();
    assert!(run("[model]\nname = \"v9\"").model_config().is_err());
    assert!(run("[train]\nsteps = [1, 2]").train_config().is_err(), "a curriculum needs its transitions");
    assert_eq!(run("[train]\nsteps = 3").train.steps, Some(Steps::One(3)));
    assert!(toml::from_str::<RunConfig>("[training]\nepochs = 1").is_err());
}

#[test]
fn opening_resolves_channels_against_the_store_and_shares_it_between_splits() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 8, nx: 16, times: 30, levels: 2, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let mut data = DataConfig::at(paths.data);
    data.source.train_time = range("..1958-03-01");
    data.source.val_time = range("1958-03-01..");
    data.read_threads = 2;
    let splits = data.open().unwrap();
    // Samudra's channels for the store's two levels: uo_0, uo_1, vo_*, thetao_*, so_*, zos; tau_hfds
    assert_eq!((splits.spec.prognostic.len(), splits.spec.boundary.len()), (9, 3));
    assert!(std::ptr::eq(splits.train.store(), splits.val.store()), "one open store");
    // Five-day steps from 1958-01-03: the last up to March 1 is Feb 27 (row 11), the next Mar 4.
    assert_eq!(splits.train.selection().rows, 0..12);
    assert_eq!(splits.val.selection().rows, 12..30);
}
