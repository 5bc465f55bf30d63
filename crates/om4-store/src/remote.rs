//! Stores on object storage (feature `s3`): an `object_store` client (S3, or plain HTTP(S) GETs),
//! read by zarrs through om4's own synchronous storage adapter.
//!
//! Two ways a request reaches the server:
//!
//! * **Directly**, for the root's metadata: the calling thread blocks on the store's small tokio
//!   runtime until the answer is in. A whole-object `get` is one GET (zarrs' own async-to-sync adapter would make
//!   it a HEAD and a ranged GET), a byte range is one ranged GET, suffix ranges included, without a
//!   HEAD first.
//! * **Prefetched**, for plane reads, the arrays' metadata documents and the small arrays
//!   (coordinates, masks, statistics) ([`Prefetch`]): each task decodes (om4's direct path or
//!   zarrs) against the answers fetched so far; a request it lacks is recorded and the attempt
//!   stops at once. The recorded requests of all tasks are then fetched together on the runtime
//!   and the waiting tasks decode again. So request concurrency is set apart from the decode
//!   threads, and the decoder alone decides which requests a read needs (the direct path asks
//!   exactly what zarrs would): a plain chunk takes one round, a sharded v3 chunk two (its
//!   shard's index, then the inner chunk's byte range). Shard indexes stay cached for the
//!   store's lifetime, so later reads in a shard take one round, and adjacent byte ranges of one
//!   object go as one ranged GET ([`coalesce`]). Plane reads go in waves; the next waves' requests are in flight while a wave
//!   decodes (`Om4Store::read_planes`).
//!
//! Every request, direct or prefetched, holds one of the store's permits while in flight: as many
//! as `RequestOptions::concurrency`, or, left unset, as the measured round trips ask for
//! ([`limit`]). A 404 is "missing", which zarrs reads as the fill value; any other
//! failure is an error naming the object's URL, with `object_store`'s message and its sources
//! (HTTP status, server's error code, retries made, a timeout).
//!
//! One job per file: [`client`] builds the client (S3 or HTTP, deadlines, retries), this file
//! fetches (direct and prefetched requests, counters, the shard-index cache), [`storage`] is what
//! zarrs reads through, and [`coalesce`] and [`limit`] merge ranges and bound requests in flight.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use zarrs_object_store::AsyncObjectStore;
use zarrs_storage::byte_range::ByteRange;
use zarrs_storage::{Bytes, MaybeBytes, StorageError};

use crate::location::RequestCounts;

mod client;
mod coalesce;
mod limit;
mod storage;
use coalesce::coalesce;
use limit::Limit;

/// The object-store client of one remote store: S3 under the store's prefix, or HTTP under its URL.
type Client = Arc<dyn ObjectStore>;

/// Fetch rounds one task may take before its read gives up: a sharded chunk takes two (index,
/// then inner chunk).
pub(crate) const MAX_ROUNDS: usize = 8;

/// Shard indexes kept per store, in bytes, before the cache starts again empty.
const INDEX_CACHE_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
struct Counters {
    gets: AtomicU64,
    heads: AtomicU64,
    lists: AtomicU64,
    bytes: AtomicU64,
    rounds: AtomicU64,
}

/// One request as zarrs asks for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    Whole(String),
    Range(String, Span),
    Size(String),
}

/// A byte range of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Span {
    From(u64, Option<u64>),
    Suffix(u64),
}

impl From<ByteRange> for Span {
    fn from(r: ByteRange) -> Self {
        match r {
            ByteRange::FromStart(start, len) => Self::From(start, len),
            ByteRange::Suffix(len) => Self::Suffix(len),
        }
    }
}

impl Part {
    fn key(&self) -> &str {
        match self {
            Self::Whole(k) | Self::Range(k, _) | Self::Size(k) => k,
        }
    }
}

/// An answer: bytes, a size, or "no such object" (404).
#[derive(Debug, Clone)]
enum Fetched {
    Bytes(Bytes),
    Size(u64),
    Missing,
}

/// The requests of one read, fetched ahead of decoding (see the module docs). Made by
/// [`Remote::prefetch`]; dropped with everything it holds when the read is done.
pub(crate) struct Prefetch {
    owner: usize,
    cache: Mutex<HashMap<Part, Fetched>>,
    /// Requests recorded by waiting attempts, each with the tag of the first task that asked.
    pending: Mutex<HashMap<Part, usize>>,
}

thread_local! {
    /// The attempts running on this thread, innermost last (a rayon thread may run another task
    /// inside one that waits on a join), each with its tag and whether it recorded a request.
    static ATTEMPTS: RefCell<Vec<(Arc<Prefetch>, usize, bool)>> = const { RefCell::new(Vec::new()) };
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Prefetch {
    /// Runs `f` (one task's decode) as an attempt tagged `tag`. Returns `f`'s result and whether
    /// the attempt recorded a request it lacked: then the result is to be thrown away and the
    /// task tried again after [`Remote::fetch_pending`].
    pub(crate) fn attempt<R>(self: &Arc<Self>, tag: usize, f: impl FnOnce() -> R) -> (R, bool) {
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                ATTEMPTS.with(|a| a.borrow_mut().pop());
            }
        }
        ATTEMPTS.with(|a| a.borrow_mut().push((Arc::clone(self), tag, false)));
        let pop = Pop;
        let result = f();
        let waited = ATTEMPTS.with(|a| a.borrow().last().is_some_and(|(_, _, waited)| *waited));
        drop(pop);
        (result, waited)
    }

    /// Requests waiting to be fetched.
    pub(crate) fn pending(&self) -> usize {
        lock(&self.pending).len()
    }
}

/// Requests being fetched in the background for a [`Prefetch`] (see [`Remote::start_fetch`]).
pub(crate) struct Fetching {
    task: Option<tokio::task::JoinHandle<Result<(), (usize, StorageError)>>>,
    remote: Arc<Remote>,
}

impl Fetching {
    /// Waits until every request is answered, or the first fails (the rest are then dropped).
    pub(crate) fn wait(mut self) -> Result<(), (usize, StorageError)> {
        let Some(task) = self.task.take() else { return Ok(()) };
        match self.remote.block_on(task).map_err(|e| (0, e))? {
            Ok(result) => result,
            Err(e) => Err((0, StorageError::Other(format!("fetching requests failed: {e}")))),
        }
    }
}

impl Drop for Fetching {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What a lookup in the running attempt found.
enum Lookup {
    /// No attempt of this store runs on this thread: fetch directly.
    Direct,
    /// Every part is in the prefetched answers.
    Hit(Vec<Fetched>),
    /// Some part was missing; it is recorded and the attempt must stop.
    Wait,
}

/// A remote store as synchronous zarrs storage.
pub(crate) struct Remote {
    /// The same client through zarrs' adapter, for listings.
    lister: AsyncObjectStore<Client>,
    client: Client,
    runtime: tokio::runtime::Runtime,
    /// `s3://bucket/path`, to name objects in errors.
    url: String,
    /// Requests in flight at most: every request of the store holds one of its permits.
    limit: Limit,
    counters: Counters,
    /// Shard indexes (suffix ranges) read so far, and their bytes.
    indexes: Mutex<(HashMap<Part, Bytes>, usize)>,
    /// Said after a failed listing: why the store may not list (plain HTTP), or nothing.
    listing_hint: &'static str,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Remote {
    /// Requests in flight at most, now: fixed by the options, or following the measured round
    /// trips (`remote/limit.rs`).
    pub(crate) fn concurrency(&self) -> usize {
        self.limit.current()
    }

    /// Requests sent so far.
    pub(crate) fn counts(&self) -> RequestCounts {
        let c = &self.counters;
        RequestCounts {
            gets: c.gets.load(Ordering::Relaxed),
            heads: c.heads.load(Ordering::Relaxed),
            lists: c.lists.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            rounds: c.rounds.load(Ordering::Relaxed),
        }
    }

    /// A new, empty set of prefetched requests for one read.
    pub(crate) fn prefetch(&self) -> Arc<Prefetch> {
        Arc::new(Prefetch {
            owner: self as *const Self as usize,
            cache: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Starts fetching every request `prefetch`'s attempts recorded, in the background on the
    /// store's runtime (no more than `concurrency` of the store's requests in flight at once), into
    /// its answers. [`Fetching::wait`] waits for them; dropping it cancels what is still in flight.
    pub(crate) fn start_fetch(self: &Arc<Self>, prefetch: &Arc<Prefetch>) -> Fetching {
        let parts: Vec<(Part, usize)> = lock(&prefetch.pending).drain().collect();
        if parts.is_empty() {
            return Fetching { task: None, remote: Arc::clone(self) };
        }
        self.counters.rounds.fetch_add(1, Ordering::Relaxed);
        let (remote, prefetch) = (Arc::clone(self), Arc::clone(prefetch));
        let task = self.runtime.spawn(async move {
            let remote = &remote;
            let requests = coalesce(parts);
            let n = requests.len();
            let answers = futures::stream::iter(requests)
                .map(|request| async move {
                    match remote.fetch(&request.part).await {
                        Ok(answer) => {
                            let bytes = if let Fetched::Bytes(b) = &answer { b.len() as u64 } else { 0 };
                            Ok((bytes, request.split(answer)))
                        }
                        Err(e) => Err((request.tag, remote.named(request.part.key(), e))),
                    }
                })
                // the store's permits bound what is in flight
                .buffer_unordered(n)
                .try_collect::<Vec<_>>()
                .await?;
            remote.limit.fold(answers.iter().map(|(bytes, _)| bytes).sum(), answers.len() as u64);
            lock(&prefetch.cache).extend(answers.into_iter().flat_map(|(_, parts)| parts));
            Ok(())
        });
        Fetching { task: Some(task), remote: Arc::clone(self) }
    }

    /// Runs `f` for tasks `0..n` one after another against prefetched answers, fetching what the
    /// attempts lacked in rounds (each round's requests together) until every task has its
    /// result: one round trip for small reads that would otherwise take one each.
    ///
    /// # Errors
    /// A request that failed, or tasks still waiting after [`MAX_ROUNDS`] rounds, with the tag
    /// of the task concerned.
    pub(crate) fn settle<R>(
        self: &Arc<Self>,
        n: usize,
        f: impl Fn(usize) -> R,
    ) -> Result<Vec<R>, (usize, StorageError)> {
        let prefetch = self.prefetch();
        let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
        for _ in 0..=MAX_ROUNDS {
            for (i, slot) in results.iter_mut().enumerate().filter(|(_, slot)| slot.is_none()) {
                let (result, waited) = prefetch.attempt(i, || f(i));
                if !waited {
                    *slot = Some(result);
                }
            }
            if results.iter().all(Option::is_some) {
                return Ok(results.into_iter().flatten().collect());
            }
            self.fetch_pending(&prefetch)?;
        }
        let tag = results.iter().position(Option::is_none).unwrap_or(0);
        Err((tag, StorageError::Other(format!("still waiting for requests after {MAX_ROUNDS} rounds of fetches"))))
    }

    /// Fetches every request `prefetch`'s attempts recorded and waits for them. On a failure the
    /// requests still in flight are dropped and the error names the object, with the tag of the
    /// first task that asked for it.
    pub(crate) fn fetch_pending(self: &Arc<Self>, prefetch: &Arc<Prefetch>) -> Result<(), (usize, StorageError)> {
        self.start_fetch(prefetch).wait()
    }

    fn named(&self, key: &str, e: impl std::error::Error) -> StorageError {
        StorageError::Other(format!("{}/{key}: {}", self.url, chain(&e)))
    }

    /// A failed listing's error, naming the prefix, with the store's listing hint first (a server's
    /// answer may be a whole HTML page).
    fn listing_failed(&self, prefix: &str, e: impl std::error::Error) -> StorageError {
        StorageError::Other(format!("{}/{prefix}: listing failed{}: {}", self.url, self.listing_hint, chain(&e)))
    }

    /// Runs a request to completion on the store's runtime, from a thread outside any runtime.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output, StorageError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(StorageError::Other(
                "om4 reads object storage synchronously: call it from a thread outside an async runtime \
                 (for example with tokio::task::spawn_blocking)"
                    .into(),
            ));
        }
        Ok(self.runtime.block_on(future))
    }

    /// Sends one request, holding one of the store's permits while it is in flight.
    async fn fetch(&self, part: &Part) -> Result<Fetched, object_store::Error> {
        let _permit = self
            .limit
            .permits()
            .acquire()
            .await
            .map_err(|e| object_store::Error::Generic { store: "S3", source: e.into() })?;
        let path = object_store::path::Path::from(part.key());
        let sent = std::time::Instant::now();
        let result = match part {
            Part::Size(_) => {
                self.counters.heads.fetch_add(1, Ordering::Relaxed);
                let head = self.client.head(&path).await;
                self.answered(&head, sent);
                head.map(|meta| Fetched::Size(meta.size))
            }
            Part::Whole(_) | Part::Range(..) => {
                let range = match part {
                    Part::Range(_, Span::From(start, Some(len))) => Some(GetRange::Bounded(*start..start + len)),
                    Part::Range(_, Span::From(start, None)) => Some(GetRange::Offset(*start)),
                    Part::Range(_, Span::Suffix(len)) => Some(GetRange::Suffix(*len)),
                    _ => None,
                };
                self.counters.gets.fetch_add(1, Ordering::Relaxed);
                let options = GetOptions { range, ..GetOptions::default() };
                let answer = self.client.get_opts(&path, options).await;
                self.answered(&answer, sent);
                match answer {
                    Ok(answer) => answer.bytes().await.map(Fetched::Bytes),
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok(Fetched::Bytes(bytes)) => {
                self.counters.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if let Part::Range(_, span @ (Span::From(_, Some(len)) | Span::Suffix(len))) = part
                    && bytes.len() as u64 != *len
                {
                    return Err(object_store::Error::Generic {
                        store: "S3",
                        source: format!("range {span:?} returned {} bytes, not {len}", bytes.len()).into(),
                    });
                }
                if let Part::Range(_, Span::Suffix(_)) = part {
                    let mut indexes = lock(&self.indexes);
                    if indexes.1 + bytes.len() > INDEX_CACHE_BYTES {
                        *indexes = (HashMap::new(), 0);
                    }
                    indexes.1 += bytes.len();
                    indexes.0.insert(part.clone(), bytes.clone());
                }
                Ok(Fetched::Bytes(bytes))
            }
            Ok(other) => Ok(other),
            Err(object_store::Error::NotFound { .. }) => Ok(Fetched::Missing),
            Err(e) => Err(e),
        }
    }

    /// Notes the time to an answer's first byte for the requests in flight (`limit`): answers and
    /// 404s only, as a failure's time (a refused connection, retries) is no round trip.
    fn answered<T>(&self, answer: &Result<T, object_store::Error>, sent: std::time::Instant) {
        if matches!(answer, Ok(_) | Err(object_store::Error::NotFound { .. })) {
            self.limit.first_byte(sent.elapsed());
        }
    }

    /// Answers for `parts`: from the shard-index cache, the running attempt's prefetched answers,
    /// or (no attempt of this store on this thread) `Direct`.
    fn lookup(&self, parts: &[Part]) -> Lookup {
        // only suffix ranges (shard indexes) are cached per store: no lock for the others
        let cached: Vec<Option<Fetched>> = if parts.iter().any(|p| matches!(p, Part::Range(_, Span::Suffix(_)))) {
            let indexes = lock(&self.indexes);
            parts.iter().map(|p| indexes.0.get(p).cloned().map(Fetched::Bytes)).collect()
        } else {
            vec![None; parts.len()]
        };
        if cached.iter().all(Option::is_some) {
            return Lookup::Hit(cached.into_iter().flatten().collect());
        }
        let me = self as *const Self as usize;
        ATTEMPTS.with(|attempts| {
            let mut attempts = attempts.borrow_mut();
            let Some((prefetch, tag, waited)) = attempts.last_mut().filter(|(p, ..)| p.owner == me) else {
                return Lookup::Direct;
            };
            let answers = lock(&prefetch.cache);
            let found: Vec<Option<Fetched>> =
                parts.iter().zip(cached).map(|(p, cached)| cached.or_else(|| answers.get(p).cloned())).collect();
            if found.iter().all(Option::is_some) {
                return Lookup::Hit(found.into_iter().flatten().collect());
            }
            drop(answers);
            let mut pending = lock(&prefetch.pending);
            for (p, _) in parts.iter().zip(&found).filter(|(_, f)| f.is_none()) {
                pending.entry(p.clone()).or_insert(*tag);
            }
            *waited = true;
            Lookup::Wait
        })
    }

    /// An object's bytes (`None`: no such object), prefetched or fetched now: what zarrs' `get`
    /// asks, for om4's own direct decoding.
    pub(crate) fn get_whole(&self, key: &str) -> Result<MaybeBytes, StorageError> {
        self.get_bytes(Part::Whole(key.to_string()), "GET")
    }

    /// A byte range of an object (`None`: no such object), as zarrs' partial reads ask it.
    pub(crate) fn get_range(&self, key: &str, span: Span) -> Result<MaybeBytes, StorageError> {
        self.get_bytes(Part::Range(key.to_string(), span), "ranged GET")
    }

    /// The bytes answering one `what` request (`None`: no such object).
    fn get_bytes(&self, part: Part, what: &str) -> Result<MaybeBytes, StorageError> {
        let key = part.key().to_string();
        match self.answers(vec![part])?.pop() {
            Some(Fetched::Bytes(bytes)) => Ok(Some(bytes)),
            Some(Fetched::Missing) => Ok(None),
            _ => Err(unexpected(key, what)),
        }
    }

    /// Answers for `parts`, prefetched or fetched now.
    fn answers(&self, parts: Vec<Part>) -> Result<Vec<Fetched>, StorageError> {
        match self.lookup(&parts) {
            Lookup::Hit(found) => Ok(found),
            Lookup::Wait => Err(StorageError::Other("waiting for prefetched requests".into())),
            Lookup::Direct => {
                let fetches = futures::future::join_all(parts.iter().map(|p| self.fetch(p)));
                let results = self.block_on(fetches)?;
                // the round trip only: these answers are metadata, not the chunks reads fetch
                self.limit.fold(0, 0);
                parts.iter().zip(results).map(|(p, r)| r.map_err(|e| self.named(p.key(), e))).collect()
            }
        }
    }
}

/// An error's message with its sources' (a timeout hides under "error sending request"), each
/// once.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn unexpected(key: impl std::fmt::Display, what: &str) -> StorageError {
    StorageError::Other(format!("{key}: unexpected answer to a {what} request"))
}
