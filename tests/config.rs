//! Loader settings parse from Samudra-style TOML, including om4's own `prepare_on`.

use om4_burn::{LoaderConfig, PrepareOn};

#[derive(serde::Deserialize)]
struct Data {
    loading: LoaderConfig,
}

#[derive(serde::Deserialize)]
struct File {
    data: Data,
}

#[test]
fn loading_section_parses_with_defaults_and_prepare_on() {
    let shipped: toml::Table = toml::from_str(include_str!("../configs/om4.toml")).unwrap();
    let loading: LoaderConfig = shipped["data"]["loading"].clone().try_into().unwrap();
    assert_eq!(loading, LoaderConfig { prefetch_batches: 2, max_concurrent_reads: 32, ..LoaderConfig::default() });
    assert_eq!(loading.prepare_on, PrepareOn::Auto);
    for (word, on) in [("host", PrepareOn::Host), ("device", PrepareOn::Device), ("auto", PrepareOn::Auto)] {
        let f: File = toml::from_str(&format!("[data.loading]\nprepare_on = \"{word}\"\n")).unwrap();
        assert_eq!(f.data.loading.prepare_on, on);
        assert_eq!(f.data.loading.prefetch_batches, 2, "unset keys keep their defaults");
    }
    assert!(toml::from_str::<File>("[data.loading]\nprepare_on = \"gpu\"\n").is_err());
    assert!(toml::from_str::<File>("[data.loading]\nprefetch = 3\n").is_err(), "unknown keys are refused");
}
