//! The bounded pool that every read fans out on.

use std::sync::Arc;

use crate::error::{Error, Result};

/// A bounded thread pool for plane reads (`max_concurrent_reads` threads), cheap to clone and
/// meant to be shared by every reader of a process (training and validation loaders included).
/// The store's readers fan their reads out on it and the loader prepares batches on it, so that
/// reading and preparing share one set of threads.
#[derive(Debug, Clone)]
pub struct ReadPool {
    pool: Arc<rayon::ThreadPool>,
}

impl ReadPool {
    /// The most threads a pool may have: far more reads in flight than any file system serves
    /// better, and few enough to start in a moment.
    pub const MAX_THREADS: usize = 1024;

    /// A pool of `max_concurrent_reads` threads named `om4-read-N`.
    ///
    /// # Errors
    /// [`Error::Pool`] for zero threads or more than [`ReadPool::MAX_THREADS`], or when the
    /// threads cannot be spawned.
    pub fn new(max_concurrent_reads: usize) -> Result<Self> {
        if max_concurrent_reads == 0 {
            return Err(Error::Pool { threads: 0, reason: "max_concurrent_reads must be at least 1".into() });
        }
        if max_concurrent_reads > Self::MAX_THREADS {
            return Err(Error::Pool {
                threads: max_concurrent_reads,
                reason: format!("max_concurrent_reads must be at most {}", Self::MAX_THREADS),
            });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(max_concurrent_reads)
            .thread_name(|i| format!("om4-read-{i}"))
            .build()
            .map_err(|e| Error::Pool { threads: max_concurrent_reads, reason: e.to_string() })?;
        Ok(Self { pool: Arc::new(pool) })
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Runs `f` inside the pool, so that rayon work it starts (om4-batch's normalization and
    /// gather, for one) shares the pool's threads instead of the global pool's.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_out_of_range_are_refused_with_the_count() {
        for threads in [0, ReadPool::MAX_THREADS + 1] {
            let e = ReadPool::new(threads).unwrap_err();
            assert!(matches!(e, Error::Pool { threads: t, .. } if t == threads), "{e}");
            assert!(e.to_string().contains("max_concurrent_reads"), "{e}");
        }
        let pool = ReadPool::new(3).unwrap();
        assert_eq!(pool.threads(), 3);
        assert_eq!(pool.install(rayon::current_num_threads), 3, "work installed runs on the pool");
    }
}
