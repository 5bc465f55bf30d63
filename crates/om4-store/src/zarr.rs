//! Every zarrs call of om4 lives here; no zarrs type leaves this module.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unsafe_cell_slice::UnsafeCellSlice;
use zarrs::array::{
    Array, ArrayBytesFixedDisjointView, ArrayMetadata, ArrayMetadataV2, ArrayMetadataV3, ArraySubset, CodecOptions,
};
use zarrs::filesystem::FilesystemStore;
use zarrs::storage::store::MemoryStore;
use zarrs::storage::{
    ListableStorageTraits, ReadableListableStorageTraits, ReadableStorageTraits, StoreKey, StorePrefix,
    WritableStorageTraits,
};

use crate::error::BoxError;
use crate::meta::{MetaSource, ZarrFormat};

/// Options for one decode call made from our own pool: no nested fan-out inside zarrs.
fn single_thread() -> CodecOptions {
    CodecOptions::default().with_concurrent_target(1)
}

/// How a 4-D array orders its time and level axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axes {
    /// `(time, y, x)`.
    TimeYX,
    /// `(time, lev, y, x)`.
    TimeLevYX,
    /// `(lev, time, y, x)`.
    LevTimeYX,
}

impl Axes {
    /// Levels of an array of this `shape` (1 for a `(time, y, x)` array).
    pub(crate) fn levels(self, shape: &[u64]) -> u64 {
        match self {
            Self::TimeYX => 1,
            Self::TimeLevYX => shape[1],
            Self::LevTimeYX => shape[0],
        }
    }
}

/// An open array of a store (cheap to clone: the array is shared).
#[derive(Clone)]
pub(crate) struct ZarrArray {
    array: Arc<Array<dyn ReadableStorageTraits>>,
}

impl std::fmt::Debug for ZarrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrArray").field("shape", &self.array.shape()).finish_non_exhaustive()
    }
}

/// A store's storage (a local directory, or object storage with feature `s3`), opened once and
/// shared by its arrays.
#[derive(Clone)]
pub(crate) struct Store {
    storage: Arc<dyn ReadableListableStorageTraits>,
    /// `s3://bucket/path` or the directory, to name keys in messages.
    name: String,
    /// The same storage when it is remote: reads prefetch through it.
    #[cfg(feature = "s3")]
    remote: Option<Arc<crate::remote::Remote>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the file-system store at `root`.
    pub(crate) fn open(root: &Path) -> Result<Self, BoxError> {
        Ok(Self {
            storage: Arc::new(FilesystemStore::new(root)?),
            name: root.display().to_string(),
            #[cfg(feature = "s3")]
            remote: None,
        })
    }

    /// The store at a remote location (S3 or HTTP), named `name` in errors.
    #[cfg(feature = "s3")]
    pub(crate) fn remote_at(remote: crate::remote::Remote, name: String) -> Self {
        let remote = Arc::new(remote);
        Self { storage: remote.clone(), name, remote: Some(remote) }
    }

    /// The remote storage, for a store on object storage.
    #[cfg(feature = "s3")]
    pub(crate) fn remote(&self) -> Option<&Arc<crate::remote::Remote>> {
        self.remote.as_ref()
    }
}

/// Metadata read through the storage: what a remote store's validation reads (a local store's
/// is read from its files, with the same parsing and checks).
impl MetaSource for Store {
    fn describe(&self, key: &str) -> String {
        format!("{}/{key}", self.name)
    }

    fn check_root(&self) -> Result<(), String> {
        Ok(())
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let key = StoreKey::new(key).map_err(|e| format!("{}: {e}", self.describe(key)))?;
        match self.storage.get(&key) {
            Ok(bytes) => Ok(bytes.map(|b| b.to_vec())),
            Err(e) => Err(e.to_string()),
        }
    }

    fn read_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>, String>> {
        #[cfg(feature = "s3")]
        if let Some(remote) = &self.remote
            && let Ok(docs) = remote.settle(keys.len(), |i| self.read(&keys[i]))
        {
            return docs;
        }
        // local, or a request failed: one by one, so that each key gets its own answer
        keys.iter().map(|key| self.read(key)).collect()
    }

    fn child_dirs(&self) -> Result<Vec<String>, String> {
        let listed = self.storage.list_dir(&StorePrefix::root()).map_err(|e| e.to_string())?;
        Ok(listed.prefixes().iter().map(|p| p.as_str().trim_end_matches('/').to_string()).collect())
    }
}

impl ZarrArray {
    /// Opens array `name` (a name discovered in the store root, never a user path) from the
    /// metadata document om4 validated (a v2 `.zarray` with its attributes, a v3 `zarr.json`;
    /// from the consolidated metadata when the store has it), so zarrs never reads a second copy
    /// and the array is the one validated: opening costs no request.
    pub(crate) fn open(
        store: &Store,
        name: &str,
        format: ZarrFormat,
        meta: &serde_json::Value,
        attrs: &serde_json::Map<String, serde_json::Value>,
        shape: &[u64],
    ) -> Result<Self, BoxError> {
        let path = format!("/{name}");
        let meta = match format {
            ZarrFormat::V2 => {
                let mut meta: ArrayMetadataV2 = serde_json::from_value(meta.clone())?;
                meta.attributes = attrs.clone();
                ArrayMetadata::V2(meta)
            }
            ZarrFormat::V3 => ArrayMetadata::V3(serde_json::from_value::<ArrayMetadataV3>(meta.clone())?),
        };
        let array = Array::new_with_metadata(store.storage.clone().readable(), &path, meta)?;
        debug_assert_eq!(array.shape(), shape, "the validated shape");
        Ok(Self { array: Arc::new(array) })
    }

    /// Reads the whole array as `f64`, whatever its numeric or boolean dtype.
    pub(crate) fn read_all_f64(&self, dtype: &str) -> Result<Vec<f64>, BoxError> {
        let subset = ArraySubset::new_with_shape(self.array.shape().to_vec());
        let opts = CodecOptions::default();
        macro_rules! read_as {
            ($t:ty) => {
                self.array.retrieve_array_subset_opt::<Vec<$t>>(&subset, &opts)?.into_iter().map(|v| v as f64).collect()
            };
        }
        Ok(match dtype {
            "float32" => read_as!(f32),
            "float64" => read_as!(f64),
            "int8" => read_as!(i8),
            "int16" => read_as!(i16),
            "int32" => read_as!(i32),
            "int64" => read_as!(i64),
            "uint8" => read_as!(u8),
            "uint16" => read_as!(u16),
            "uint32" => read_as!(u32),
            "uint64" => read_as!(u64),
            "bool" => self
                .array
                .retrieve_array_subset_opt::<Vec<bool>>(&subset, &opts)?
                .into_iter()
                .map(|b| if b { 1.0 } else { 0.0 })
                .collect(),
            other => return Err(format!("cannot read dtype {other} as numbers").into()),
        })
    }
}

/// Decodes the planes of `levels` at time `row` of `array` (one plane for a `(time, y, x)` array)
/// into `out`, which holds exactly those planes.
pub(crate) fn read_planes_into(
    array: &ZarrArray,
    axes: Axes,
    row: u64,
    levels: Range<u64>,
    out: &mut [f32],
    ny: u64,
    nx: u64,
) -> Result<(), BoxError> {
    let n = levels.end - levels.start;
    let (src, shape): (Vec<Range<u64>>, Vec<u64>) = match axes {
        Axes::TimeYX => (vec![row..row + 1, 0..ny, 0..nx], vec![1, ny, nx]),
        Axes::TimeLevYX => (vec![row..row + 1, levels, 0..ny, 0..nx], vec![1, n, ny, nx]),
        Axes::LevTimeYX => (vec![levels, row..row + 1, 0..ny, 0..nx], vec![n, 1, ny, nx]),
    };
    let cell = UnsafeCellSlice::new(bytemuck::cast_slice_mut::<f32, u8>(out));
    let whole = ArraySubset::new_with_shape(shape.clone());
    // SAFETY: this is the only view over `out`, which is exclusively borrowed for the call.
    let mut view = unsafe { ArrayBytesFixedDisjointView::new(cell, 4, &shape, whole) }?;
    array.array.retrieve_array_subset_into_opt(
        &ArraySubset::new_with_ranges(&src),
        (&mut view).into(),
        &single_thread(),
    )?;
    Ok(())
}

/// Writes one array of a synthetic store: metadata files go straight to disk, chunks are encoded
/// by zarrs into memory and then written without a per-file `fsync`.
pub(crate) struct ArrayWriter {
    mem: Arc<MemoryStore>,
    array: Array<MemoryStore>,
    root: PathBuf,
}

/// Data of one write.
pub(crate) enum Values<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    I64(&'a [i64]),
    Bool(&'a [bool]),
}

impl ArrayWriter {
    /// Creates array `name` under `root` from its metadata files (`(file name, content)`).
    pub(crate) fn create(root: &Path, name: &str, files: &[(&str, String)]) -> Result<Self, BoxError> {
        let mem = Arc::new(MemoryStore::new());
        std::fs::create_dir_all(root.join(name))?;
        for (file, content) in files {
            std::fs::write(root.join(name).join(file), content)?;
            mem.set(&StoreKey::new(format!("{name}/{file}"))?, content.clone().into_bytes().into())?;
        }
        let array = Array::open(mem.clone(), &format!("/{name}"))?;
        Ok(Self { mem, array, root: root.to_path_buf() })
    }

    /// Encodes `values` into the region `ranges` and writes the chunks to disk.
    pub(crate) fn write(&self, ranges: &[Range<u64>], values: Values<'_>) -> Result<(), BoxError> {
        let subset = ArraySubset::new_with_ranges(ranges);
        let opts = CodecOptions::default();
        match values {
            Values::F32(v) => self.array.store_array_subset_opt(&subset, v, &opts)?,
            Values::F64(v) => self.array.store_array_subset_opt(&subset, v, &opts)?,
            Values::I64(v) => self.array.store_array_subset_opt(&subset, v, &opts)?,
            Values::Bool(v) => self.array.store_array_subset_opt(&subset, v, &opts)?,
        }
        for key in self.mem.list()? {
            let k = key.as_str();
            if k.ends_with(".zarray") || k.ends_with(".zattrs") || k.ends_with("zarr.json") {
                continue;
            }
            if let Some(bytes) = self.mem.get(&key)? {
                let path = self.root.join(k);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, &bytes)?;
            }
            self.mem.erase(&key)?;
        }
        Ok(())
    }
}
