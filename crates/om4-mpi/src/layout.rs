//! Which rank holds which planes: the ownership rule of the sharded store, pure arithmetic (no
//! MPI), so it is tested without MPI.

use std::ops::Range;

use crate::error::{Error, Result};

/// Where every plane of a source lives across `ranks` ranks.
///
/// The ranks form `ranks / width` *replica groups* of `width` consecutive ranks (`0..width`,
/// `width..2·width`, …); each group holds one full copy (DDStore's "width"). Inside a group,
/// member `m` (rank `group·width + m`) owns the `m`-th of `width` contiguous blocks of time
/// positions; the first `time_len % width` blocks have one position more. A member owns every
/// channel of every variable set at its time positions. Its window holds, per variable set in
/// order, its positions' blocks `(time, channel, y, x)`, so consecutive time positions of one set
/// are contiguous, and a reader fetches a run of them with one `MPI_Get`.
///
/// `width = ranks` (the default) shards over every rank, one copy in all; `width = 1` gives every
/// rank a whole copy (all reads local).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLayout {
    ranks: usize,
    width: usize,
    time_len: usize,
    set_floats: Vec<usize>,
}

impl ShardLayout {
    /// The layout of `time_len` time positions of variable sets of `set_floats[s]` floats per
    /// time position (channels × plane) over `ranks` ranks in groups of `width`.
    ///
    /// # Errors
    /// [`Error::Config`] when `width` is 0, above `ranks`, or does not divide it, or a rank's share
    /// overflows `usize`.
    pub fn new(ranks: usize, width: usize, time_len: usize, set_floats: Vec<usize>) -> Result<Self> {
        if width == 0 || width > ranks || !ranks.is_multiple_of(width) {
            return Err(Error::Config {
                reason: format!("width {width} must be between 1 and the {ranks} ranks and divide them"),
            });
        }
        let per_time = set_floats.iter().try_fold(0usize, |a, &b| a.checked_add(b));
        let most = time_len.div_ceil(width);
        if per_time.and_then(|p| p.checked_mul(most)).and_then(|f| f.checked_mul(4)).is_none() {
            return Err(Error::Config { reason: format!("a share of {most} time positions overflows usize") });
        }
        Ok(Self { ranks, width, time_len, set_floats })
    }

    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Ranks per replica group.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Full copies of the data (replica groups).
    pub fn replicas(&self) -> usize {
        self.ranks / self.width
    }

    /// Time positions rank `rank` holds.
    pub fn times_of(&self, rank: usize) -> Range<usize> {
        let member = rank % self.width;
        let (q, r) = (self.time_len / self.width, self.time_len % self.width);
        let start = member * q + member.min(r);
        start..start + q + usize::from(member < r)
    }

    /// The rank that serves time position `time` to rank `reader`: the owner in the reader's
    /// replica group.
    pub fn owner(&self, reader: usize, time: usize) -> usize {
        let (q, r) = (self.time_len / self.width, self.time_len % self.width);
        let big = r * (q + 1);
        let member = if time < big { time / (q + 1) } else { r + (time - big) / q.max(1) };
        (reader / self.width) * self.width + member
    }

    /// Floats in rank `rank`'s window.
    pub fn floats_of(&self, rank: usize) -> usize {
        self.times_of(rank).len() * self.set_floats.iter().sum::<usize>()
    }

    /// Where `(time, set)`'s block starts in the window of `owner` (which must own `time`), in
    /// floats.
    pub fn offset(&self, owner: usize, set: usize, time: usize) -> usize {
        let times = self.times_of(owner);
        let before: usize = self.set_floats[..set].iter().sum();
        times.len() * before + (time - times.start) * self.set_floats[set]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_has_one_owner_per_group_that_holds_it() {
        for (ranks, width, time_len) in [(4, 4, 23), (4, 2, 23), (4, 1, 5), (3, 3, 2), (6, 3, 7), (1, 1, 9), (4, 4, 0)]
        {
            let layout = ShardLayout::new(ranks, width, time_len, vec![6, 10]).unwrap();
            let mut covered = vec![0; time_len];
            for rank in 0..width {
                for t in layout.times_of(rank) {
                    covered[t] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c == 1), "{ranks} {width} {time_len}: {covered:?}");
            for reader in 0..ranks {
                for t in 0..time_len {
                    let owner = layout.owner(reader, t);
                    assert_eq!(owner / width, reader / width, "owner outside the reader's group");
                    assert!(layout.times_of(owner).contains(&t), "rank {owner} does not hold {t}");
                }
            }
            let total: usize = (0..width).map(|r| layout.floats_of(r)).sum();
            assert_eq!(total, time_len * 16);
        }
    }

    #[test]
    fn blocks_are_laid_out_set_by_set() {
        let layout = ShardLayout::new(2, 2, 5, vec![6, 10]).unwrap();
        assert_eq!(layout.times_of(0), 0..3);
        assert_eq!(layout.times_of(1), 3..5);
        assert_eq!(layout.offset(0, 0, 2), 12);
        assert_eq!(layout.offset(0, 1, 0), 18);
        assert_eq!(layout.offset(1, 1, 4), 2 * 6 + 10);
        assert_eq!(layout.floats_of(1), 32);
    }

    #[test]
    fn bad_widths_are_errors() {
        for (ranks, width) in [(4, 0), (4, 3), (2, 4)] {
            let err = ShardLayout::new(ranks, width, 10, vec![1]).unwrap_err();
            assert!(err.to_string().contains("width"), "{err}");
        }
    }
}
