//! Array metadata read straight from `.zarray`/`.zattrs`, `.zmetadata` or `zarr.json`, so that
//! validation can name exactly what it rejects before zarrs decodes anything.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Zarr format version of an array (or of a store to write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ZarrFormat {
    /// Zarr v2 (`.zarray`; OM4 stores are published so, with consolidated `.zmetadata`).
    #[default]
    V2,
    /// Zarr v3 (`zarr.json`).
    V3,
}

/// A Zarr fill value, as far as om4 cares.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    /// NaN: missing chunks read as NaN, like land.
    Nan,
    /// No fill value (v2 `null`).
    Null,
    /// A number other than NaN: a sentinel om4 rejects for data channels.
    Number(f64),
    /// Anything else (kept verbatim).
    Other(String),
}

/// What om4 knows about one array of a store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArrayInfo {
    /// Array name (its folder under the store root).
    pub name: String,
    /// Zarr format.
    pub format: ZarrFormat,
    /// Shape.
    pub shape: Vec<u64>,
    /// Chunk shape (for sharded v3 arrays: the shard shape).
    pub chunks: Vec<u64>,
    /// Inner chunk shape of a sharded v3 array.
    pub inner_chunks: Option<Vec<u64>>,
    /// Data type, normalized (`float32`, `float64`, `int64`, `bool`, ...).
    pub dtype: String,
    /// Zarr fill value.
    pub fill: Fill,
    /// Dimension names (v2 `_ARRAY_DIMENSIONS`, v3 `dimension_names`), if present.
    pub dims: Option<Vec<String>>,
    /// Codec pipeline, e.g. `blosc(lz4, shuffle)` or `none`.
    pub codecs: String,
    /// Memory order inside a chunk (`C` or `F`).
    pub order: String,
    /// User attributes.
    #[serde(skip)]
    pub attrs: Map<String, Value>,
    /// Set when every chunk is stored as plain little-endian float32 bytes, raw or in one blosc
    /// frame, so it can be decoded straight into place without zarrs.
    #[serde(skip)]
    pub(crate) plain: Option<PlainChunks>,
    /// The array's metadata document as om4 read and checked it (v2 `.zarray`, v3 `zarr.json`;
    /// from `.zmetadata` or the root's `consolidated_metadata` when the store is consolidated):
    /// zarrs is handed this, never a second reading of the files.
    #[serde(skip)]
    pub(crate) metadata: Value,
}

/// How a plain chunk's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainCodec {
    /// Raw little-endian float32.
    Raw,
    /// One blosc frame.
    Blosc,
    /// One zstd frame.
    Zstd,
}

/// Layout of chunks simple enough to decode directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlainChunks {
    /// How each chunk is stored.
    pub(crate) codec: PlainCodec,
    /// Text before the chunk indices (`c/` for v3 default keys).
    pub(crate) prefix: String,
    /// Separator between chunk indices.
    pub(crate) separator: String,
    /// Set for a v3 sharded array: chunks live inside shard files.
    pub(crate) shard: Option<ShardLayout>,
}

/// Where inner chunks sit in a shard file (`sharding_indexed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardLayout {
    /// Shard shape (the outer chunk grid).
    pub(crate) outer: Vec<u64>,
    /// Inner chunk shape.
    pub(crate) inner: Vec<u64>,
    /// Index after the chunks (else before).
    pub(crate) index_at_end: bool,
    /// The index ends with a crc32c checksum.
    pub(crate) crc: bool,
}

impl ShardLayout {
    /// Inner chunks per shard.
    pub(crate) fn chunks(&self) -> u64 {
        self.outer.iter().zip(&self.inner).map(|(o, i)| o / i).product()
    }
    /// Index length in bytes.
    pub(crate) fn index_len(&self) -> u64 {
        self.chunks() * 16 + if self.crc { 4 } else { 0 }
    }
}

impl ArrayInfo {
    /// Attribute lookup.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attrs.get(key)
    }
}

/// Where metadata documents come from: the files of a local store, or the objects of a remote
/// one. Discovery, parsing and validation are the same for both.
pub(crate) trait MetaSource {
    /// How messages name `key` (a path or a URL).
    fn describe(&self, key: &str) -> String;
    /// Fails when the store's root cannot hold a store at all (a local path that is no directory).
    fn check_root(&self) -> std::result::Result<(), String>;
    /// The document at `key` (`.zmetadata`, `thetao/.zarray`), `None` when there is none.
    fn read(&self, key: &str) -> std::result::Result<Option<Vec<u8>>, String>;
    /// The documents at `keys`, in order (a remote store fetches them together).
    fn read_many(&self, keys: &[String]) -> Vec<std::result::Result<Option<Vec<u8>>, String>> {
        keys.iter().map(|key| self.read(key)).collect()
    }
    /// Names of the root's child folders (prefixes), where arrays live.
    fn child_dirs(&self) -> std::result::Result<Vec<String>, String>;
}

/// A local store's files.
pub(crate) struct LocalMeta<'a>(pub(crate) &'a Path);

impl MetaSource for LocalMeta<'_> {
    fn describe(&self, key: &str) -> String {
        self.0.join(key).display().to_string()
    }

    fn check_root(&self) -> std::result::Result<(), String> {
        if self.0.is_dir() { Ok(()) } else { Err("not a directory".into()) }
    }

    fn read(&self, key: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        let path = self.0.join(key);
        if !path.is_file() {
            return Ok(None);
        }
        std::fs::read(&path).map(Some).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn child_dirs(&self) -> std::result::Result<Vec<String>, String> {
        let mut dirs = Vec::new();
        for entry in std::fs::read_dir(self.0).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            if let Some(name) = entry.file_name().to_str()
                && entry.path().is_dir()
            {
                dirs.push(name.to_string());
            }
        }
        Ok(dirs)
    }
}

/// Every array under the store's root (one level deep), through `.zmetadata` when present: the
/// arrays whose metadata om4 understands, and the others with the reason (an array is refused
/// when it is asked for, so one bad array does not make the rest of the store unreadable).
pub(crate) struct Discovered {
    pub(crate) arrays: BTreeMap<String, ArrayInfo>,
    pub(crate) broken: BTreeMap<String, String>,
}

/// Discovers the arrays of the store that `src` reads; `root` names it in errors.
pub(crate) fn discover(src: &dyn MetaSource, root: &Path) -> Result<Discovered> {
    let store_err = |reason: String| Error::Store { store: root.to_path_buf(), reason };
    src.check_root().map_err(store_err)?;
    let mut found = Discovered { arrays: BTreeMap::new(), broken: BTreeMap::new() };
    let mut keep = |name: String, parsed: Result<ArrayInfo>| match parsed {
        Ok(info) => {
            found.arrays.insert(name, info);
        }
        Err(Error::Metadata { reason, .. }) => {
            found.broken.insert(name, reason);
        }
        Err(e) => {
            found.broken.insert(name, e.to_string());
        }
    };
    if let Some(v) = read_json(src, ".zmetadata").map_err(store_err)? {
        let entries = v
            .get("metadata")
            .and_then(Value::as_object)
            .ok_or_else(|| store_err(".zmetadata has no \"metadata\" object".into()))?;
        for (key, meta) in entries {
            if let Some(name) = key.strip_suffix("/.zarray").filter(|n| !n.contains('/')) {
                let attrs = entries.get(&format!("{name}/.zattrs")).cloned().unwrap_or(Value::Object(Map::new()));
                keep(name.to_string(), parse_v2(root, name, meta, &attrs));
            }
        }
        return Ok(found);
    }
    // Zarr v3 consolidated metadata (zarr-python's `consolidate_metadata`): the root `zarr.json`
    // holds every node's document under `consolidated_metadata.metadata`.
    let root_doc = read_json(src, "zarr.json").map_err(store_err)?;
    if let Some(consolidated) =
        root_doc.as_ref().and_then(|doc| doc.get("consolidated_metadata")).filter(|c| !c.is_null())
    {
        let kind = consolidated.get("kind").and_then(Value::as_str);
        let entries = consolidated.get("metadata").and_then(Value::as_object);
        let (Some("inline"), Some(entries)) = (kind, entries) else {
            return Err(store_err(format!(
                "zarr.json: consolidated_metadata must be {{\"kind\": \"inline\", \"metadata\": {{...}}}}, not {consolidated}"
            )));
        };
        for (name, meta) in entries.iter().filter(|(name, _)| !name.contains('/')) {
            if meta.get("node_type").and_then(Value::as_str) == Some("array") {
                keep(name.clone(), parse_v3(root, name, meta));
            }
        }
        return Ok(found);
    }
    // Every array's documents, read together. Under a v3 root group the arrays are v3: no
    // `.zarray` or `.zattrs` to look for.
    let group = |key: &str| src.read(key).map(|doc| doc.is_some()).map_err(store_err);
    const NO_GROUP: &str = "no Zarr group or arrays found (expected .zgroup, .zmetadata or zarr.json)";
    let names = match src.child_dirs() {
        Ok(names) => names,
        // a store that cannot be listed (plain HTTP) and has no root document: most likely none
        Err(e) if root_doc.is_none() && !group(".zgroup")? => {
            return Err(store_err(format!("{NO_GROUP}; listing it failed too: {e}")));
        }
        Err(e) => return Err(store_err(e)),
    };
    let files: &[&str] = if root_doc.is_some() { &["zarr.json"] } else { &[".zarray", ".zattrs", "zarr.json"] };
    let keys: Vec<String> = names.iter().flat_map(|n| files.iter().map(move |f| format!("{n}/{f}"))).collect();
    let mut docs: BTreeMap<String, std::result::Result<Option<Vec<u8>>, String>> =
        keys.iter().cloned().zip(src.read_many(&keys)).collect();
    let mut doc = |key: String| {
        let bytes = docs.remove(&key).unwrap_or(Ok(None));
        parse_json(src, &key, bytes)
    };
    for name in names {
        let meta_err = |reason: String| Error::Metadata { store: root.to_path_buf(), array: name.clone(), reason };
        match doc(format!("{name}/.zarray")).map_err(meta_err) {
            Ok(Some(meta)) => {
                let parsed = doc(format!("{name}/.zattrs"))
                    .map_err(meta_err)
                    .and_then(|attrs| parse_v2(root, &name, &meta, &attrs.unwrap_or(Value::Object(Map::new()))));
                keep(name.clone(), parsed);
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                keep(name.clone(), Err(e));
                continue;
            }
        }
        match doc(format!("{name}/zarr.json")).map_err(meta_err) {
            Ok(Some(meta)) if meta.get("node_type").and_then(Value::as_str) == Some("array") => {
                keep(name.clone(), parse_v3(root, &name, &meta));
            }
            Ok(_) => {}
            Err(e) => keep(name.clone(), Err(e)),
        }
    }
    if found.arrays.is_empty() && found.broken.is_empty() && root_doc.is_none() && !group(".zgroup")? {
        return Err(store_err(NO_GROUP.into()));
    }
    Ok(found)
}

/// The JSON document at `key`, `None` when there is none.
fn read_json(src: &dyn MetaSource, key: &str) -> std::result::Result<Option<Value>, String> {
    parse_json(src, key, src.read(key))
}

/// The JSON document read from `key`, `None` when there is none.
fn parse_json(
    src: &dyn MetaSource,
    key: &str,
    read: std::result::Result<Option<Vec<u8>>, String>,
) -> std::result::Result<Option<Value>, String> {
    let Some(bytes) = read? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| format!("{}: {e}", src.describe(key)))?;
    serde_json::from_str(text).map(Some).map_err(|e| format!("{}: {e}", src.describe(key)))
}

fn u64_list(v: Option<&Value>) -> Option<Vec<u64>> {
    v?.as_array()?.iter().map(Value::as_u64).collect()
}

fn parse_fill(v: Option<&Value>) -> Fill {
    match v {
        None | Some(Value::Null) => Fill::Null,
        Some(Value::Number(n)) => {
            n.as_f64().map_or(Fill::Other(n.to_string()), |x| if x.is_nan() { Fill::Nan } else { Fill::Number(x) })
        }
        Some(Value::String(s)) => match s.as_str() {
            "NaN" | "nan" => Fill::Nan,
            "Infinity" => Fill::Number(f64::INFINITY),
            "-Infinity" => Fill::Number(f64::NEG_INFINITY),
            hex if hex.starts_with("0x") => match u64::from_str_radix(&hex[2..], 16) {
                Ok(bits) if hex.len() <= 10 => {
                    let x = f32::from_bits(bits as u32);
                    if x.is_nan() { Fill::Nan } else { Fill::Number(f64::from(x)) }
                }
                Ok(bits) => {
                    let x = f64::from_bits(bits);
                    if x.is_nan() { Fill::Nan } else { Fill::Number(x) }
                }
                Err(_) => Fill::Other(s.clone()),
            },
            _ => Fill::Other(s.clone()),
        },
        Some(Value::Bool(b)) => Fill::Number(if *b { 1.0 } else { 0.0 }),
        Some(other) => Fill::Other(other.to_string()),
    }
}

fn dtype_v2(s: &str) -> String {
    let code = s.trim_start_matches(['<', '>', '|', '=']);
    match code {
        "f4" => "float32",
        "f8" => "float64",
        "f2" => "float16",
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "b1" => "bool",
        other => return format!("v2:{other}"),
    }
    .to_string()
}

fn describe_v2_codec(c: &Value) -> String {
    let id = c.get("id").and_then(Value::as_str).unwrap_or("?");
    match id {
        "blosc" => {
            let cname = c.get("cname").and_then(Value::as_str).unwrap_or("?");
            let shuffle = match c.get("shuffle").and_then(Value::as_i64) {
                Some(0) => "noshuffle",
                Some(1) => "shuffle",
                Some(2) => "bitshuffle",
                _ => "shuffle?",
            };
            format!("blosc({cname}, {shuffle})")
        }
        "zstd" | "gzip" | "zlib" => format!("{id}({})", c.get("level").map_or("?".into(), Value::to_string)),
        other => other.to_string(),
    }
}

/// The most bytes om4 lets one decoded chunk (the inner chunk of a sharded array) hold: far above
/// any real OM4 chunking, far below what would overflow a size computation or exhaust memory.
const MAX_CHUNK_BYTES: u64 = 16 << 30;

/// Shape and chunking describe an addressable array: one chunk extent per dimension, every
/// extent at least 1, and sizes that fit in memory arithmetic. Checked before zarrs sees the
/// metadata, whose size computations would overflow on absurd extents.
fn check_extents(shape: &[u64], chunks: &[u64], inner: Option<&[u64]>) -> std::result::Result<(), String> {
    let bytes = |dims: &[u64]| dims.iter().try_fold(4u64, |n, &d| n.checked_mul(d)).filter(|&n| n <= isize::MAX as u64);
    if bytes(shape).is_none() {
        return Err(format!("shape {shape:?} is too large to address"));
    }
    for (what, dims) in [("chunks", Some(chunks)), ("inner chunks", inner)] {
        let Some(dims) = dims else { continue };
        if dims.len() != shape.len() {
            return Err(format!("{what} {dims:?} do not match the rank of shape {shape:?}"));
        }
        if dims.contains(&0) {
            return Err(format!("{what} {dims:?} have a zero-sized extent"));
        }
        if bytes(dims).is_none() {
            return Err(format!("{what} {dims:?} are too large to address"));
        }
    }
    let decoded = inner.unwrap_or(chunks);
    match bytes(decoded) {
        Some(n) if n <= MAX_CHUNK_BYTES => Ok(()),
        _ => Err(format!(
            "a chunk of {decoded:?} holds more than {} GiB, om4's limit for one decoded chunk",
            MAX_CHUNK_BYTES >> 30
        )),
    }
}

fn parse_v2(root: &Path, name: &str, meta: &Value, attrs: &Value) -> Result<ArrayInfo> {
    let err = |reason: &str| Error::Metadata {
        store: root.to_path_buf(),
        array: name.to_string(),
        reason: reason.to_string(),
    };
    let shape = u64_list(meta.get("shape")).ok_or_else(|| err("missing or bad \"shape\""))?;
    let chunks = u64_list(meta.get("chunks")).ok_or_else(|| err("missing or bad \"chunks\""))?;
    check_extents(&shape, &chunks, None).map_err(|r| err(&r))?;
    let dtype = meta.get("dtype").and_then(Value::as_str).map(dtype_v2).unwrap_or_else(|| "structured".into());
    let attrs = attrs.as_object().cloned().unwrap_or_default();
    let dims = attrs
        .get("_ARRAY_DIMENSIONS")
        .and_then(Value::as_array)
        .map(|d| d.iter().map(|x| x.as_str().unwrap_or("?").to_string()).collect());
    let mut codecs: Vec<String> = meta
        .get("filters")
        .and_then(Value::as_array)
        .map(|f| f.iter().map(describe_v2_codec).collect())
        .unwrap_or_default();
    if let Some(c) = meta.get("compressor").filter(|c| !c.is_null()) {
        codecs.push(describe_v2_codec(c));
    }
    let raw_dtype = meta.get("dtype").and_then(Value::as_str).unwrap_or("");
    let no_filters = meta.get("filters").is_none_or(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty));
    let codec = match meta.get("compressor").filter(|c| !c.is_null()) {
        None => Some(PlainCodec::Raw),
        Some(c) => match c.get("id").and_then(Value::as_str) {
            Some("blosc") => Some(PlainCodec::Blosc),
            Some("zstd") => Some(PlainCodec::Zstd),
            _ => None,
        },
    };
    let plain = codec
        .filter(|_| raw_dtype == "<f4" && no_filters && meta.get("order").and_then(Value::as_str).unwrap_or("C") == "C")
        .map(|codec| PlainChunks {
            codec,
            prefix: String::new(),
            separator: meta.get("dimension_separator").and_then(Value::as_str).unwrap_or(".").to_string(),
            shard: None,
        });
    Ok(ArrayInfo {
        metadata: meta.clone(),
        plain,
        name: name.to_string(),
        format: ZarrFormat::V2,
        shape,
        chunks,
        inner_chunks: None,
        dtype,
        fill: parse_fill(meta.get("fill_value")),
        dims,
        codecs: if codecs.is_empty() { "none".into() } else { codecs.join(" + ") },
        order: meta.get("order").and_then(Value::as_str).unwrap_or("C").to_string(),
        attrs,
    })
}

fn describe_v3_codecs(codecs: &[Value]) -> (Vec<String>, Option<Vec<u64>>, String) {
    let mut out = Vec::new();
    let mut inner = None;
    let mut order = "C".to_string();
    for c in codecs {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
        let conf = c.get("configuration");
        match name {
            "bytes" => {}
            "transpose" => order = "F".into(),
            "sharding_indexed" => {
                inner = u64_list(conf.and_then(|c| c.get("chunk_shape")));
                let sub = conf.and_then(|c| c.get("codecs")).and_then(Value::as_array).cloned().unwrap_or_default();
                let (names, _, o) = describe_v3_codecs(&sub);
                order = o;
                out.push(format!("sharding[{}]", if names.is_empty() { "none".into() } else { names.join(" + ") }));
            }
            "blosc" => {
                let get = |k: &str| conf.and_then(|c| c.get(k)).and_then(Value::as_str).unwrap_or("?").to_string();
                out.push(format!("blosc({}, {})", get("cname"), get("shuffle")));
            }
            other => out.push(match conf.and_then(|c| c.get("level")) {
                Some(l) => format!("{other}({l})"),
                None => other.to_string(),
            }),
        }
    }
    (out, inner, order)
}

/// Plain chunks of a v3 array: `bytes` (little endian) alone or followed by `blosc` or `zstd`, regular keys.
fn plain_v3(meta: &Value, dtype: &str, codecs: &[Value]) -> Option<PlainChunks> {
    let name = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_string);
    let little = |c: &Value| c.pointer("/configuration/endian").and_then(Value::as_str).is_none_or(|e| e == "little");
    if let [sharding] = codecs
        && name(sharding).as_deref() == Some("sharding_indexed")
    {
        let conf = sharding.get("configuration")?;
        let inner_codecs = conf.get("codecs")?.as_array()?;
        let index_codecs = conf.get("index_codecs").and_then(Value::as_array).cloned().unwrap_or_default();
        let crc = match index_codecs.as_slice() {
            [b] if name(b).as_deref() == Some("bytes") && little(b) => false,
            [b, c] if name(b).as_deref() == Some("bytes") && little(b) && name(c).as_deref() == Some("crc32c") => true,
            _ => return None,
        };
        let layout = ShardLayout {
            outer: u64_list(meta.pointer("/chunk_grid/configuration/chunk_shape"))?,
            inner: u64_list(conf.get("chunk_shape"))?,
            index_at_end: conf.get("index_location").and_then(Value::as_str).unwrap_or("end") == "end",
            crc,
        };
        let divides = layout.outer.len() == layout.inner.len()
            && layout.outer.iter().zip(&layout.inner).all(|(o, i)| *i > 0 && o % i == 0);
        let mut plain = plain_v3(meta, dtype, inner_codecs).filter(|_| divides)?;
        plain.shard = Some(layout);
        return Some(plain);
    }
    let codec = match codecs {
        [b] if name(b).as_deref() == Some("bytes") && little(b) => PlainCodec::Raw,
        [b, z] if name(b).as_deref() == Some("bytes") && little(b) => match name(z).as_deref() {
            Some("blosc") => PlainCodec::Blosc,
            Some("zstd") => PlainCodec::Zstd,
            _ => return None,
        },
        _ => return None,
    };
    if dtype != "float32" || meta.get("storage_transformers").and_then(Value::as_array).is_some_and(|t| !t.is_empty()) {
        return None;
    }
    let encoding = meta.get("chunk_key_encoding");
    let sep = |default: &str| {
        encoding
            .and_then(|e| e.pointer("/configuration/separator"))
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    match encoding.and_then(|e| e.get("name")).and_then(Value::as_str).unwrap_or("default") {
        "default" => {
            let separator = sep("/");
            Some(PlainChunks { codec, prefix: format!("c{separator}"), separator, shard: None })
        }
        "v2" => Some(PlainChunks { codec, prefix: String::new(), separator: sep("."), shard: None }),
        _ => None,
    }
}

fn parse_v3(root: &Path, name: &str, meta: &Value) -> Result<ArrayInfo> {
    let err = |reason: &str| Error::Metadata {
        store: root.to_path_buf(),
        array: name.to_string(),
        reason: reason.to_string(),
    };
    let shape = u64_list(meta.get("shape")).ok_or_else(|| err("missing or bad \"shape\""))?;
    let chunks = u64_list(meta.pointer("/chunk_grid/configuration/chunk_shape"))
        .ok_or_else(|| err("missing regular chunk grid"))?;
    let dtype = match meta.get("data_type") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
        _ => return Err(err("missing \"data_type\"")),
    };
    let codecs = meta.get("codecs").and_then(Value::as_array).cloned().unwrap_or_default();
    let (names, inner_chunks, order) = describe_v3_codecs(&codecs);
    check_extents(&shape, &chunks, inner_chunks.as_deref()).map_err(|r| err(&r))?;
    let dims = meta
        .get("dimension_names")
        .and_then(Value::as_array)
        .map(|d| d.iter().map(|x| x.as_str().unwrap_or("?").to_string()).collect());
    let plain = plain_v3(meta, &dtype, &codecs);
    Ok(ArrayInfo {
        metadata: meta.clone(),
        plain,
        name: name.to_string(),
        format: ZarrFormat::V3,
        shape,
        chunks,
        inner_chunks,
        dtype,
        fill: parse_fill(meta.get("fill_value")),
        dims,
        codecs: if names.is_empty() { "none".into() } else { names.join(" + ") },
        order,
        attrs: meta.get("attributes").and_then(Value::as_object).cloned().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_values() {
        assert_eq!(parse_fill(Some(&Value::String("NaN".into()))), Fill::Nan);
        assert_eq!(parse_fill(Some(&Value::String("0x7fc00000".into()))), Fill::Nan);
        assert_eq!(parse_fill(Some(&serde_json::json!(0.0))), Fill::Number(0.0));
        assert_eq!(parse_fill(Some(&Value::Null)), Fill::Null);
        assert_eq!(parse_fill(Some(&serde_json::json!(-9999))), Fill::Number(-9999.0));
    }

    #[test]
    fn v2_dtypes() {
        assert_eq!(dtype_v2("<f4"), "float32");
        assert_eq!(dtype_v2(">f4"), "float32");
        assert_eq!(dtype_v2("|b1"), "bool");
        assert_eq!(dtype_v2("<i2"), "int16");
    }
}
