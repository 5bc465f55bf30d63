//! Open, validate and read OM4 Zarr stores straight into caller buffers.
//!
//! om4-store reads the stores Samudra trains on: Zarr v2 or v3, consolidated or not, **flat**
//! (`thetao_4` is its own `(time, y, x)` array) or **compact** (`thetao(time, lev, y, x)` or
//! `(lev, time, y, x)`, channel `thetao_4` = level 4), legacy `var_lev_<depth>` names, and
//! level-free channels (`zos`, `tauuo`, `tauvo`, `hfds`). Everything is validated before any data is
//! read: float32 only, no packed data (`scale_factor`/`add_offset`), no non-NaN fill sentinels, no
//! derived channels (`hfds_anomalies`), one `(time, y, x)` grid.
//!
//! - [`Om4Store`]: open once; [`Om4Store::channels`] resolves and validates a [`ChannelSet`];
//!   [`Om4Store::select`] maps a date range to a [`Selection`]; [`Om4Store::reader`]'s [`Reader::read`] fills a
//!   `(positions, channels, y, x)` buffer from a shared [`ReadPool`].
//! - [`Om4Store::masks`] and [`StatsStore`]: land masks and normalization statistics per channel;
//!   [`compute_statistics`] and [`write_statistics`] make statistics stores for a store without.
//! - [`Om4Source`]: a validated time split of a store as om4-pipeline's
//!   [`BatchSource`](om4_pipeline::BatchSource), the loader's data source; [`DataConfig`], the `data`
//!   section of a Samudra run in Samudra's words, opens the store once into both splits.
//! - [`synthesize`]: OM4-like stores for tests, benchmarks and examples.
//!
//! An array whose metadata om4 cannot use does not stop the store from opening
//! ([`Om4Store::broken_arrays`]); asking for it is an error. Bad metadata, corrupt chunks and bad
//! requests are errors, never panics.
//!
//! ```
//! use om4_store::{Om4Store, ReadPool, SynthConfig, synthesize};
//!
//! # let dir = tempfile::tempdir()?;
//! # let cfg = SynthConfig { ny: 8, nx: 16, times: 6, levels: 2, ..SynthConfig::default() };
//! # let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
//! // paths.data is e.g. /data/om4_onedeg/OM4.zarr
//! let store = Om4Store::open(&paths.data)?;
//! let set = store.channels(&["thetao_1", "zos"])?;
//! let selection = store.select(&"1958-01-01..1958-01-31".parse()?)?; // six 5-day steps
//! let pool = ReadPool::new(2)?;
//! let mut planes = vec![0f32; 3 * set.len() * set.grid().plane()];
//! store.reader(&pool, &set, &selection).read(&[0, 2, 5], &mut planes)?;
//! assert!(planes.iter().any(|v| v.is_nan())); // land
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Chunks (or inner chunks of v3 shards) that hold one plane as raw little-endian float32, one
//! blosc frame or one zstd frame (the published OM4 layout) are decoded straight into the caller's
//! buffer; every other layout is read through zarrs. Tests hold both paths to the same bits.
//!
//! Stores live in local directories or, with feature `s3`, on S3 ([`StoreLocation`]:
//! `s3://bucket/path`, endpoint, region, anonymous access, credentials from the `AWS_*`
//! environment variables) or under an `http(s)://` URL (plain GETs; consolidated metadata
//! needed, as there is no listing): the same validation and the same two read paths over `object_store`,
//! bit for bit the same planes; a missing chunk (404) is NaN, any other failure an error naming the object.
//! A read's requests go out together, up to [`RequestOptions::concurrency`] in flight per store
//! (unset: as many as the measured round trips ask for), apart from the read pool's decode
//! threads; [`Om4Store::request_counts`] counts them.
//!
//! It compiles C-Blosc (via `zarrs`' `blosc-src`) and zstd. Feature `bench-reference` (for
//! `om4 bench read --reference` only) adds `Om4Store::read_decode_reference`, the composed
//! read-then-decode path reads are measured against.

#![warn(missing_docs)]

mod calendar;
mod channel;
mod channels;
mod data_config;
mod dates;
mod direct;
mod error;
mod location;
mod masks;
mod meta;
pub mod npy;
mod read;
#[cfg(feature = "bench-reference")]
mod reference;
#[cfg(feature = "s3")]
mod remote;
mod samudra;
mod source;
mod stats;
mod store;
mod store_writer;
mod synth;
mod time;
mod write;
mod zarr;

pub use calendar::Calendar;
pub use channels::{Channel, ChannelSet};
pub use data_config::{DataConfig, DataSource, DataSplits};
pub use dates::{DateRange, JulianDate};
pub use error::{Error, Result};
pub use location::{HttpLocation, RequestCounts, RequestOptions, S3Location, StoreLocation};
pub use meta::{ArrayInfo, Fill, ZarrFormat};
/// The read pool lives in om4-batch, below both the store and the pipeline that share it.
pub use om4_batch::ReadPool;
pub use read::Reader;
#[cfg(feature = "bench-reference")]
pub use reference::ReadDecodeTimes;
pub use samudra::{DEPTH_VARS, DZ, LEV, SURFACE_VARS, channel_names};
pub use source::{Om4Source, SourceConfig};
pub use stats::{ChannelStats, StatsStore, compute_statistics, write_statistics};
pub use store::{Layout, Om4Store, Selection};
pub use store_writer::Codec;
pub use synth::{DemoStore, SynthConfig, SynthLayout, SynthPaths, synthesize};
pub use time::{Instant, TimeAxis, parse_date};
pub use write::{PlaneWriter, TimeCoordinate};
