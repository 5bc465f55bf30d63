//! zarrs reads a remote store through these storage traits: whole objects, byte ranges and
//! listings, each one request on the store's runtime.

use zarrs_storage::byte_range::ByteRangeIterator;
use zarrs_storage::{
    AsyncListableStorageTraits, ListableStorageTraits, MaybeBytes, MaybeBytesIterator, ReadableStorageTraits,
    StorageError, StoreKey, StoreKeys, StoreKeysPrefixes, StorePrefix,
};

use std::sync::atomic::Ordering;

use super::{Fetched, Part, Remote, unexpected};

impl ReadableStorageTraits for Remote {
    fn get(&self, key: &StoreKey) -> Result<MaybeBytes, StorageError> {
        self.get_whole(key.as_str())
    }

    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        let parts: Vec<Part> = byte_ranges.map(|r| Part::Range(key.as_str().to_string(), r.into())).collect();
        let mut out = Vec::with_capacity(parts.len());
        for answer in self.answers(parts)? {
            match answer {
                Fetched::Bytes(bytes) => out.push(Ok(bytes)),
                Fetched::Missing => return Ok(None),
                Fetched::Size(_) => return Err(unexpected(key, "ranged GET")),
            }
        }
        Ok(Some(Box::new(out.into_iter())))
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        match self.answers(vec![Part::Size(key.as_str().to_string())])?.pop() {
            Some(Fetched::Size(size)) => Ok(Some(size)),
            Some(Fetched::Missing) => Ok(None),
            _ => Err(unexpected(key, "HEAD")),
        }
    }

    fn supports_get_partial(&self) -> bool {
        true
    }
}

impl ListableStorageTraits for Remote {
    fn list(&self) -> Result<StoreKeys, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.block_on(self.lister.list())?.map_err(|e| self.listing_failed("", e))
    }

    fn list_prefix(&self, prefix: &StorePrefix) -> Result<StoreKeys, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.block_on(self.lister.list_prefix(prefix))?.map_err(|e| self.listing_failed(prefix.as_str(), e))
    }

    fn list_dir(&self, prefix: &StorePrefix) -> Result<StoreKeysPrefixes, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.block_on(self.lister.list_dir(prefix))?.map_err(|e| self.listing_failed(prefix.as_str(), e))
    }

    fn size_prefix(&self, prefix: &StorePrefix) -> Result<u64, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.block_on(self.lister.size_prefix(prefix))?.map_err(|e| self.listing_failed(prefix.as_str(), e))
    }
}
