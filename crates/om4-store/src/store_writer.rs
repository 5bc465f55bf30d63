//! Writing Zarr stores: group and array metadata (v2 or v3, compressed or not, sharded,
//! consolidated), for the synthetic stores, the statistics stores and model output.

// Region lists name one range per dimension; a 1-D array's list has one range.
#![allow(clippy::single_range_in_vec_init)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::meta::ZarrFormat;
use crate::zarr::{ArrayWriter, Values};

/// Compression of the data arrays a store is written with (synthetic stores, statistics
/// stores, model output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Codec {
    /// Uncompressed (as OM4 stores are published).
    #[default]
    None,
    /// Blosc LZ4, byte shuffle, level 5.
    BloscLz4,
    /// Blosc zstd, byte shuffle, level 3.
    BloscZstd,
    /// Blosc blosclz, bit shuffle, level 5.
    BloscBlosclz,
    /// Blosc zlib, no shuffle, level 5.
    BloscZlib,
    /// Zstandard, level 3.
    Zstd,
    /// Gzip, level 5.
    Gzip,
}

fn codec_v2(codec: Codec) -> Value {
    let blosc = |cname: &str, clevel: u32, shuffle: u32| json!({"id": "blosc", "cname": cname, "clevel": clevel, "shuffle": shuffle, "blocksize": 0});
    match codec {
        Codec::None => Value::Null,
        Codec::BloscLz4 => blosc("lz4", 5, 1),
        Codec::BloscZstd => blosc("zstd", 3, 1),
        Codec::BloscBlosclz => blosc("blosclz", 5, 2),
        Codec::BloscZlib => blosc("zlib", 5, 0),
        Codec::Zstd => json!({"id": "zstd", "level": 3}),
        Codec::Gzip => json!({"id": "gzip", "level": 5}),
    }
}

fn codecs_v3(codec: Codec) -> Vec<Value> {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let blosc = |cname: &str, clevel: u32, shuffle: &str| json!({"name": "blosc", "configuration": {"cname": cname, "clevel": clevel, "shuffle": shuffle, "typesize": 4, "blocksize": 0}});
    let mut out = vec![bytes];
    match codec {
        Codec::None => {}
        Codec::BloscLz4 => out.push(blosc("lz4", 5, "shuffle")),
        Codec::BloscZstd => out.push(blosc("zstd", 3, "shuffle")),
        Codec::BloscBlosclz => out.push(blosc("blosclz", 5, "bitshuffle")),
        Codec::BloscZlib => out.push(blosc("zlib", 5, "noshuffle")),
        Codec::Zstd => out.push(json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}})),
        Codec::Gzip => out.push(json!({"name": "gzip", "configuration": {"level": 5}})),
    }
    out
}

/// Metadata of one array to write.
pub(crate) struct Spec<'a> {
    pub(crate) name: String,
    pub(crate) shape: Vec<u64>,
    pub(crate) chunks: Vec<u64>,
    pub(crate) dtype: &'a str,
    pub(crate) dims: Vec<&'a str>,
    pub(crate) attrs: Value,
    pub(crate) compressed: bool,
}

/// How a store's arrays are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteOptions {
    /// Zarr v2 or v3.
    pub(crate) format: ZarrFormat,
    /// Compression of the arrays whose [`Spec`] asks for it.
    pub(crate) codec: Codec,
    /// Time steps per shard (v3 only) for `(time, …)` arrays.
    pub(crate) shard: Option<usize>,
    /// Consolidated metadata (v2 `.zmetadata`, v3 inline in the root `zarr.json`).
    pub(crate) consolidated: bool,
}

/// Writes a store's arrays.
pub(crate) struct Writer {
    root: PathBuf,
    cfg: WriteOptions,
    consolidated: serde_json::Map<String, Value>,
}

impl Writer {
    /// Creates (or replaces) the store at `root`.
    pub(crate) fn new(root: PathBuf, cfg: WriteOptions) -> Result<Self> {
        let err = |e: std::io::Error| Error::Write { path: root.clone(), reason: e.to_string() };
        if root.exists() {
            std::fs::remove_dir_all(&root).map_err(err)?;
        }
        std::fs::create_dir_all(&root).map_err(err)?;
        let format = cfg.format;
        let w = Self { root: root.clone(), cfg, consolidated: serde_json::Map::new() };
        match format {
            ZarrFormat::V2 => {
                std::fs::write(root.join(".zgroup"), r#"{"zarr_format": 2}"#).map_err(err)?;
                std::fs::write(root.join(".zattrs"), "{}").map_err(err)?;
            }
            ZarrFormat::V3 => {
                std::fs::write(root.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#)
                    .map_err(err)?;
            }
        }
        Ok(w)
    }

    pub(crate) fn create(&mut self, spec: &Spec<'_>) -> Result<ArrayWriter> {
        let fill = match spec.dtype {
            "float32" | "float64" => json!("NaN"),
            "bool" => json!(false),
            _ => json!(0),
        };
        let codec = if spec.compressed { self.cfg.codec } else { Codec::None };
        let files: Vec<(&str, String)> = match self.cfg.format {
            ZarrFormat::V2 => {
                let dtype = match spec.dtype {
                    "float32" => "<f4",
                    "float64" => "<f8",
                    "int64" => "<i8",
                    _ => "|b1",
                };
                let zarray = json!({
                    "zarr_format": 2, "shape": spec.shape, "chunks": spec.chunks, "dtype": dtype,
                    "compressor": codec_v2(codec), "fill_value": fill, "order": "C", "filters": null,
                    "dimension_separator": ".",
                });
                let mut attrs = spec.attrs.as_object().cloned().unwrap_or_default();
                attrs.insert("_ARRAY_DIMENSIONS".into(), json!(spec.dims));
                self.consolidated.insert(format!("{}/.zarray", spec.name), zarray.clone());
                self.consolidated.insert(format!("{}/.zattrs", spec.name), Value::Object(attrs.clone()));
                vec![(".zarray", zarray.to_string()), (".zattrs", Value::Object(attrs).to_string())]
            }
            ZarrFormat::V3 => {
                let sharded = self.cfg.shard.filter(|_| spec.shape.len() >= 3 && spec.dims[0] == "time");
                let (grid_chunks, codecs) = match sharded {
                    Some(shard) => {
                        let mut outer = spec.chunks.clone();
                        outer[0] = shard as u64;
                        let sharding = json!({"name": "sharding_indexed", "configuration": {
                            "chunk_shape": spec.chunks, "codecs": codecs_v3(codec),
                            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                            "index_location": "end"}});
                        (outer, vec![sharding])
                    }
                    None => (spec.chunks.clone(), codecs_v3(codec)),
                };
                let zarr_json = json!({
                    "zarr_format": 3, "node_type": "array", "shape": spec.shape, "data_type": spec.dtype,
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid_chunks}},
                    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                    "fill_value": fill, "codecs": codecs, "attributes": spec.attrs, "dimension_names": spec.dims,
                });
                self.consolidated.insert(spec.name.to_string(), zarr_json.clone());
                vec![("zarr.json", zarr_json.to_string())]
            }
        };
        ArrayWriter::create(&self.root, &spec.name, &files)
            .map_err(|e| Error::Write { path: self.root.join(&spec.name), reason: e.to_string() })
    }

    pub(crate) fn write(
        &mut self,
        spec: Spec<'_>,
        ranges_values: impl FnOnce(&ArrayWriter) -> std::result::Result<(), crate::error::BoxError>,
    ) -> Result<()> {
        let writer = self.create(&spec)?;
        ranges_values(&writer).map_err(|e| Error::Write { path: self.root.join(&spec.name), reason: e.to_string() })
    }

    pub(crate) fn finish(self) -> Result<()> {
        if self.cfg.format == ZarrFormat::V2 && self.cfg.consolidated {
            let mut meta = self.consolidated.clone();
            meta.insert(".zgroup".into(), json!({"zarr_format": 2}));
            meta.insert(".zattrs".into(), json!({}));
            let doc = json!({"zarr_consolidated_format": 1, "metadata": meta});
            std::fs::write(self.root.join(".zmetadata"), doc.to_string())
                .map_err(|e| Error::Write { path: self.root.join(".zmetadata"), reason: e.to_string() })?;
        }
        if self.cfg.format == ZarrFormat::V3 && self.cfg.consolidated {
            // as zarr-python's `consolidate_metadata` writes it
            let doc = json!({"zarr_format": 3, "node_type": "group", "attributes": {}, "consolidated_metadata": {
                "kind": "inline", "must_understand": false, "metadata": self.consolidated}});
            std::fs::write(self.root.join("zarr.json"), doc.to_string())
                .map_err(|e| Error::Write { path: self.root.join("zarr.json"), reason: e.to_string() })?;
        }
        Ok(())
    }
}

/// One array of a statistics store: a 0-d scalar, or a `lev` vector of a compact variable.
pub(crate) struct StatEntry {
    pub(crate) name: String,
    pub(crate) values: Vec<f32>,
    pub(crate) per_level: bool,
}

/// Writes a statistics store (`OM4_means.zarr` or `OM4_stds.zarr`) at `path`, replacing it.
pub(crate) fn write_stat_store(path: &Path, cfg: WriteOptions, entries: &[StatEntry]) -> Result<()> {
    let mut sw = Writer::new(path.to_path_buf(), cfg)?;
    for e in entries {
        let (shape, dims) = if e.per_level { (vec![e.values.len() as u64], vec!["lev"]) } else { (vec![], vec![]) };
        let ranges: Vec<std::ops::Range<u64>> = shape.iter().map(|&n| 0..n).collect();
        let spec = Spec {
            name: e.name.clone(),
            shape: shape.clone(),
            chunks: shape,
            dtype: "float32",
            dims,
            attrs: json!({}),
            compressed: false,
        };
        sw.write(spec, |a| a.write(&ranges, Values::F32(&e.values)))?;
    }
    sw.finish()
}
