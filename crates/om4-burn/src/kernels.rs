//! What cubecl spent on kernels in this process: autotune and compilation, read back from the
//! records cubecl keeps in its environment database (`target/environment/default.db`), so that
//! a GPU run can say where its first step went.

use std::time::Duration;

/// Kernel work recorded by cubecl in this process so far (see [`kernel_work`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelWork {
    /// Autotune keys tuned (each ran and timed its candidates).
    pub tuned: usize,
    /// Kernels compiled from their definition.
    pub compiled: usize,
    /// Kernels loaded from the on-disk kernel cache instead.
    pub loaded: usize,
    /// Time spans `[start, end)` of tunes, on the process's cubecl clock.
    tunes: Vec<(Duration, Duration)>,
    /// Time spans of compilations (and cache loads).
    compiles: Vec<(Duration, Duration)>,
}

/// Seconds of a [`KernelWork`] difference: where a stretch of the run went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KernelSeconds {
    /// Autotune keys tuned, and the seconds spent tuning (their candidates' compilation included).
    pub tuned: usize,
    /// Seconds inside autotune.
    pub autotune_s: f64,
    /// Kernels compiled, and kernels read from the kernel cache.
    pub compiled: usize,
    /// Kernels read from the on-disk kernel cache.
    pub loaded: usize,
    /// Seconds compiling or loading kernels outside autotune.
    pub compile_s: f64,
}

impl KernelWork {
    /// The work done since `earlier` (a snapshot of the same process).
    pub fn since(&self, earlier: &KernelWork) -> KernelSeconds {
        let tunes = &self.tunes[earlier.tunes.len().min(self.tunes.len())..];
        let compiles = &self.compiles[earlier.compiles.len().min(self.compiles.len())..];
        let autotune = union(tunes.to_vec());
        let all = union(tunes.iter().chain(compiles).copied().collect());
        KernelSeconds {
            tuned: self.tuned.saturating_sub(earlier.tuned),
            autotune_s: autotune.as_secs_f64(),
            compiled: self.compiled.saturating_sub(earlier.compiled),
            loaded: self.loaded.saturating_sub(earlier.loaded),
            compile_s: all.saturating_sub(autotune).as_secs_f64(),
        }
    }
}

/// The length of the union of spans.
fn union(mut spans: Vec<(Duration, Duration)>) -> Duration {
    spans.sort();
    let (mut total, mut reach) = (Duration::ZERO, Duration::ZERO);
    for (start, end) in spans {
        let start = start.max(reach);
        if end > start {
            total += end - start;
            reach = end;
        }
    }
    total
}

#[cfg(feature = "gpu")]
mod read {
    use std::time::Duration;

    use cubecl_environment::persistence::Database;
    use cubecl_environment::records::{Record, Records};

    use super::KernelWork;

    /// The part of cubecl's autotune record read here.
    #[derive(serde::Deserialize)]
    struct Tune {
        wall: Duration,
    }
    impl Record for Tune {
        const KIND: &'static str = "autotune";
    }

    #[derive(serde::Deserialize, PartialEq)]
    enum Outcome {
        Compiled,
        Loaded,
        Rekeyed,
    }

    /// The part of cubecl's compilation record read here.
    #[derive(serde::Deserialize)]
    struct Compilation {
        outcome: Outcome,
        duration: Duration,
    }
    impl Record for Compilation {
        const KIND: &'static str = "compilation";
    }

    pub(super) fn kernel_work() -> Option<KernelWork> {
        let database = Database::open_active()?;
        let records = Records::new(&database);
        let process = std::process::id();
        let mut work = KernelWork::default();
        // cubecl keeps a session (and what it recorded) only once it has tuned a key or compiled
        // a kernel: none yet means no such work, everything came from the caches.
        let Some(session) = records.sessions().into_iter().filter(|s| s.process == process).map(|s| s.id).max() else {
            return Some(work);
        };
        for t in records.read::<Tune>().into_iter().filter(|r| r.stamp.session == session) {
            work.tuned += 1;
            work.tunes.push((t.stamp.offset, t.stamp.offset + t.record.wall));
        }
        for c in records.read::<Compilation>().into_iter().filter(|r| r.stamp.session == session) {
            match c.record.outcome {
                Outcome::Compiled => work.compiled += 1,
                Outcome::Loaded | Outcome::Rekeyed => work.loaded += 1,
            }
            work.compiles.push((c.stamp.offset, c.stamp.offset + c.record.duration));
        }
        Some(work)
    }
}

/// Everything cubecl recorded of this process's kernel work so far: autotune keys and
/// compilations with their time spans. Take one before and one after a stretch of the run and
/// [`KernelWork::since`] says what it spent on kernels (nothing while every kernel and tuning
/// came from the caches). `None` without a GPU feature or when cubecl's database cannot be opened
/// (a read-only disk). Call it only when a GPU device is in use: it opens cubecl's database.
pub fn kernel_work() -> Option<KernelWork> {
    #[cfg(feature = "gpu")]
    {
        read::kernel_work()
    }
    #[cfg(not(feature = "gpu"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(a: u64, b: u64) -> (Duration, Duration) {
        (Duration::from_millis(a), Duration::from_millis(b))
    }

    /// Compilations inside a tune count as autotune time; overlapping spans count once.
    #[test]
    fn seconds_split_into_autotune_and_compilation_outside_it() {
        let earlier =
            KernelWork { tuned: 1, compiled: 2, loaded: 0, tunes: vec![ms(0, 5)], compiles: vec![ms(1, 2), ms(6, 7)] };
        let now = KernelWork {
            tuned: 3,
            compiled: 6,
            loaded: 1,
            tunes: vec![ms(0, 5), ms(10, 20), ms(15, 30)],
            compiles: vec![ms(1, 2), ms(6, 7), ms(11, 12), ms(29, 33), ms(40, 41), ms(40, 42)],
        };
        let s = now.since(&earlier);
        assert_eq!((s.tuned, s.compiled, s.loaded), (2, 4, 1));
        assert!((s.autotune_s - 0.020).abs() < 1e-12, "{}", s.autotune_s);
        assert!((s.compile_s - 0.005).abs() < 1e-12, "{}", s.compile_s); // 30..33 and 40..42
    }
}
