//! Merging a round's byte ranges: adjacent inner chunks of one shard that one read needs go as
//! one ranged GET, and its answer is split back into each chunk's bytes without a copy.

use super::{Fetched, Part, Span};

/// The longest request that adjacent byte ranges of one object are merged into.
const MAX_COALESCED_BYTES: u64 = 64 << 20;

/// One request sent for one or more recorded parts: a byte range covering adjacent ranges of the
/// same object (the inner chunks of a shard one read needs), or a part on its own.
pub(super) struct Request {
    pub(super) part: Part,
    /// The parts it answers, each with its `(offset, length)` in the answer (`None`: all of it).
    members: Vec<(Part, Option<(u64, u64)>)>,
    pub(super) tag: usize,
}

impl Request {
    /// The answer of each member part.
    pub(super) fn split(self, answer: Fetched) -> Vec<(Part, Fetched)> {
        self.members
            .into_iter()
            .map(|(part, slice)| {
                let mine = match (&answer, slice) {
                    (Fetched::Bytes(bytes), Some((offset, len))) => {
                        Fetched::Bytes(bytes.slice(offset as usize..(offset + len) as usize))
                    }
                    (other, _) => other.clone(),
                };
                (part, mine)
            })
            .collect()
    }
}

/// Adjacent byte ranges of one object, being merged into one request.
struct Run {
    key: String,
    start: u64,
    end: u64,
    /// Each part with its own start and length.
    members: Vec<(Part, u64, u64)>,
    tag: usize,
}

impl Run {
    fn request(self) -> Request {
        let start = self.start;
        Request {
            part: Part::Range(self.key, Span::From(start, Some(self.end - start))),
            members: self.members.into_iter().map(|(p, s, len)| (p, Some((s - start, len)))).collect(),
            tag: self.tag,
        }
    }
}

/// The requests for `parts`: bounded byte ranges of one object that touch or overlap are merged
/// (up to [`MAX_COALESCED_BYTES`]), everything else goes alone.
pub(super) fn coalesce(parts: Vec<(Part, usize)>) -> Vec<Request> {
    let mut requests = Vec::with_capacity(parts.len());
    let mut ranges: Vec<(String, u64, u64, Part, usize)> = Vec::new();
    for (part, tag) in parts {
        match &part {
            Part::Range(key, Span::From(start, Some(len))) => ranges.push((key.clone(), *start, *len, part, tag)),
            _ => requests.push(Request { members: vec![(part.clone(), None)], part, tag }),
        }
    }
    ranges.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
    let mut open: Option<Run> = None;
    for (key, start, len, part, tag) in ranges {
        let end = start + len;
        match &mut open {
            Some(run) if run.key == key && start <= run.end && end.max(run.end) - run.start <= MAX_COALESCED_BYTES => {
                run.end = end.max(run.end);
                run.members.push((part, start, len));
            }
            _ => {
                requests.extend(open.take().map(Run::request));
                open = Some(Run { key, start, end, members: vec![(part, start, len)], tag });
            }
        }
    }
    requests.extend(open.map(Run::request));
    requests
}

#[cfg(test)]
mod tests {
    use super::*;
    use zarrs_storage::Bytes;

    fn range(key: &str, start: u64, len: u64) -> Part {
        Part::Range(key.into(), Span::From(start, Some(len)))
    }

    #[test]
    fn adjacent_ranges_of_one_object_merge() {
        let parts = vec![
            (range("a/c/0", 100, 50), 1),
            (range("a/c/0", 0, 100), 0),
            (range("a/c/0", 150, 10), 2),
            (range("a/c/0", 400, 10), 3), // a gap: its own request
            (range("b/c/0", 160, 10), 4), // another object
            (Part::Whole("a/0.0".into()), 5),
            (Part::Range("a/c/0".into(), Span::Suffix(36)), 6), // an index: alone
        ];
        let mut requests = coalesce(parts);
        requests.sort_by_key(|r| r.tag);
        let got: Vec<(Part, usize)> = requests.iter().map(|r| (r.part.clone(), r.members.len())).collect();
        assert_eq!(
            got,
            vec![
                (range("a/c/0", 0, 160), 3),
                (range("a/c/0", 400, 10), 1),
                (range("b/c/0", 160, 10), 1),
                (Part::Whole("a/0.0".into()), 1),
                (Part::Range("a/c/0".into(), Span::Suffix(36)), 1),
            ]
        );
        // the merged answer splits back into each part's own bytes
        let merged = requests.remove(0);
        let answer = Fetched::Bytes(Bytes::from((0..160u8).collect::<Vec<u8>>()));
        for (part, fetched) in merged.split(answer) {
            let (Part::Range(_, Span::From(start, Some(len))), Fetched::Bytes(bytes)) = (&part, fetched) else {
                panic!("{part:?}")
            };
            assert_eq!(bytes.to_vec(), (*start as u8..(*start + *len) as u8).collect::<Vec<u8>>());
        }
    }

    #[test]
    fn a_missing_object_is_missing_for_every_merged_part() {
        let mut requests = coalesce(vec![(range("k", 0, 4), 0), (range("k", 4, 4), 1)]);
        assert_eq!(requests.len(), 1);
        let parts = requests.remove(0).split(Fetched::Missing);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|(_, f)| matches!(f, Fetched::Missing)));
    }
}
