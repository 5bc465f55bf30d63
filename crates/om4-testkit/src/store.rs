//! The truth a store-backed source is held to (feature `store`).

use om4_pipeline::{BatchSource, MemorySource};
use om4_store::{Om4Source, Om4Store, ReadPool, SourceConfig};

/// The planes a store-backed `source` should serve, read one plane at a time from the store
/// `config` names (the naive path), as the truth for om4-pipeline's `conformance::check_source`.
/// `config` may name another copy of the source's store (a local copy of a remote one): then the
/// suite also holds the two copies to the same bits.
///
/// # Errors
/// A store, channel or read error, said in words.
pub fn naive_store_truth(source: &Om4Source, config: &SourceConfig) -> Result<MemorySource, String> {
    let store = Om4Store::open_location(&config.data).map_err(|e| e.to_string())?;
    let pool = ReadPool::new(1).map_err(|e| e.to_string())?;
    let selection = source.selection().clone();
    let mut names = vec![config.prognostic.clone()];
    if !config.boundary.is_empty() {
        names.push(config.boundary.clone());
    }
    let grid = source.grid();
    let mut sets = Vec::with_capacity(names.len());
    for (names, norm) in names.iter().zip(source.normalizations()) {
        let mut planes = Vec::with_capacity(source.time_len() * names.len() * grid.plane());
        for t in 0..source.time_len() {
            for name in names {
                let one = store.channels(std::slice::from_ref(name)).map_err(|e| e.to_string())?;
                let mut plane = vec![0.0; grid.plane()];
                store.reader(&pool, &one, &selection).read(&[t], &mut plane).map_err(|e| e.to_string())?;
                planes.extend(plane);
            }
        }
        sets.push((planes, norm.clone()));
    }
    MemorySource::new(grid, source.time_len(), source.roles(), sets).map_err(|e| e.to_string())
}
