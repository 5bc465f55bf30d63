//! Dates and date ranges as Samudra names its time splits: a bare date of the Julian calendar,
//! taken at 12:00, and a range that includes both of its ends.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::calendar::Calendar;

/// A time bound as Samudra writes one (`"1975-01-03"`): a date of the Julian calendar, taken at
/// 12:00 of that day. Parsed as upstream's `JulianDate` does (m2lines/Samudra 018a6a7,
/// `config.py`, `strptime("%Y-%m-%d")`): an optional sign, four year digits, a one- or two-digit
/// month and day, no time of day; years are numbered without a year 0.
///
/// ```
/// let date: om4_store::JulianDate = "1975-01-03".parse()?;
/// assert_eq!(date.to_string(), "1975-01-03");
/// assert!("1975-01-03 06:00".parse::<om4_store::JulianDate>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JulianDate {
    /// Astronomical year (year 0 is 1 BC).
    year: i64,
    month: u32,
    day: u32,
}

impl JulianDate {
    /// The astronomical year, month and day (year 0 is 1 BC).
    pub(crate) fn astronomical(self) -> (i64, u32, u32) {
        (self.year, self.month, self.day)
    }
}

impl FromStr for JulianDate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        parse(text).map(|(year, month, day)| Self { year, month, day })
    }
}

impl fmt::Display for JulianDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let y = Calendar::Julian.numbered(self.year);
        let sign = if y < 0 { "-" } else { "" };
        write!(f, "{sign}{:04}-{:02}-{:02}", y.abs(), self.month, self.day)
    }
}

impl Serialize for JulianDate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JulianDate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A time split as Samudra selects one: every time from `start` 12:00 to `end` 12:00, **both ends
/// included**; an absent bound is open. In configuration files a table `{start = "…", end = "…"}`
/// (either may be left out), on command lines `START..END`, `START..` or `..END`.
///
/// ```
/// use om4_store::DateRange;
/// let train: DateRange = "1975-01-03..2013-10-05".parse()?;
/// assert_eq!(train.to_string(), "1975-01-03..2013-10-05");
/// assert_eq!("..".parse::<DateRange>()?, DateRange::ALL);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct DateRange {
    /// First day (at 12:00) in the range; `None`: from the first time.
    pub start: Option<JulianDate>,
    /// Last day (at 12:00) in the range; `None`: to the last time.
    pub end: Option<JulianDate>,
}

impl DateRange {
    /// Every time.
    pub const ALL: Self = Self { start: None, end: None };

    /// From `start` on.
    pub fn from(start: JulianDate) -> Self {
        Self { start: Some(start), end: None }
    }

    /// Up to `end`, included.
    pub fn until(end: JulianDate) -> Self {
        Self { start: None, end: Some(end) }
    }

    /// From `start` to `end`, both included.
    pub fn between(start: JulianDate, end: JulianDate) -> Self {
        Self { start: Some(start), end: Some(end) }
    }

    /// True when neither end is bounded.
    pub fn is_all(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
}

impl FromStr for DateRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (start, end) = text
            .split_once("..")
            .ok_or_else(|| format!("{text:?} is not a date range (START..END, START.. or ..END)"))?;
        let bound = |s: &str| if s.is_empty() { Ok(None) } else { s.parse().map(Some) };
        Ok(Self { start: bound(start)?, end: bound(end)? })
    }
}

impl fmt::Display for DateRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.start {
            write!(f, "{s}")?;
        }
        f.write_str("..")?;
        if let Some(e) = self.end {
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for DateRange {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// A table `{start, end}`, or the pair `[start, end]` of checkpoints written before the type.
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "a date range: a table with `start` and/or `end` (dates YYYY-MM-DD)")]
        enum Form {
            Table(Table),
            Pair(Option<String>, Option<String>),
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default)]
            start: Option<String>,
            #[serde(default)]
            end: Option<String>,
        }
        let (start, end) = match Form::deserialize(deserializer)? {
            Form::Table(Table { start, end }) | Form::Pair(start, end) => (start, end),
        };
        let bound = |s: Option<String>| s.map(|s| s.parse()).transpose().map_err(serde::de::Error::custom);
        Ok(Self { start: bound(start)?, end: bound(end)? })
    }
}

/// Parses a Samudra OM4 time bound as upstream's `JulianDate` does (m2lines/Samudra 018a6a7,
/// `config.py`): `cftime.datetime.strptime(value, "%Y-%m-%d", calendar="julian")`, i.e. an optional
/// sign, exactly four year digits, a month `01`–`12` or `1`–`9`, a day `01`–`31`, `1`–`9` or a
/// space and `1`–`9`, nothing before or after (no time of day), naming a date of the Julian
/// calendar (no year 0). Returns the Julian (astronomical) year, month and day.
fn parse(text: &str) -> Result<(i64, u32, u32), String> {
    let bad = || {
        format!(
            "{text:?} is not a Samudra time bound: a bare date YYYY-MM-DD of the julian calendar \
             (Samudra takes it at 12:00; a time of day is not allowed)"
        )
    };
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let mut parts = rest.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let month_ok = match m.len() {
        1 => m != "0",
        2 => (m.starts_with('0') && m != "00") || (m.starts_with('1') && m <= "12"),
        _ => false,
    };
    let d = match d.as_bytes() {
        [b' ', rest @ ..] if rest.len() == 1 => &d[1..],
        _ => d,
    };
    let day_ok = match d.len() {
        1 => d != "0",
        2 => d != "00" && d <= "31",
        _ => false,
    };
    if !(y.len() == 4 && digits(y) && digits(m) && month_ok && digits(d) && day_ok) {
        return Err(bad());
    }
    let year = sign * y.parse::<i64>().map_err(|_| bad())?;
    let (month, day) = (m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    let astro =
        Calendar::Julian.astronomical(year).ok_or_else(|| format!("{text:?}: the julian calendar has no year 0"))?;
    if !Calendar::Julian.exists(astro, month, day) {
        return Err(format!("{text:?} does not exist in the julian calendar"));
    }
    Ok((astro, month, day))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_follow_upstreams_format() {
        for (text, shown) in [("1975-01-03", "1975-01-03"), ("2013-1-6", "2013-01-06"), ("2013-10- 5", "2013-10-05")] {
            assert_eq!(text.parse::<JulianDate>().unwrap().to_string(), shown);
        }
        assert_eq!("-0001-03-01".parse::<JulianDate>().unwrap().to_string(), "-0001-03-01");
        for bad in ["1975-1-3 12:00", "75-01-03", "1975-13-01", "1975-02-30", "0000-01-01", "", "1975/01/03"] {
            assert!(bad.parse::<JulianDate>().is_err(), "{bad}");
        }
        assert!("1900-02-29".parse::<JulianDate>().is_ok()); // a Julian leap day
    }

    #[test]
    fn ranges_parse_from_flags_tables_and_old_pairs() {
        let d = |s: &str| s.parse::<JulianDate>().unwrap();
        assert_eq!("1975-01-03..".parse::<DateRange>().unwrap(), DateRange::from(d("1975-01-03")));
        assert_eq!("..2013-10-05".parse::<DateRange>().unwrap(), DateRange::until(d("2013-10-05")));
        assert!("1975-01-03".parse::<DateRange>().is_err());
        assert!("1975-01-03..2013-02-30".parse::<DateRange>().is_err());
        let table: DateRange = serde_json::from_str(r#"{"start": "1975-01-03", "end": "2013-10-05"}"#).unwrap();
        assert_eq!(table, DateRange::between(d("1975-01-03"), d("2013-10-05")));
        assert_eq!(
            serde_json::from_str::<DateRange>(r#"{"end": "2013-10-05"}"#).unwrap(),
            DateRange::until(d("2013-10-05"))
        );
        assert_eq!(
            serde_json::from_str::<DateRange>(r#"[null, "2013-10-05"]"#).unwrap(),
            DateRange::until(d("2013-10-05"))
        );
        assert_eq!(serde_json::from_str::<DateRange>(&serde_json::to_string(&table).unwrap()).unwrap(), table);
        assert!(serde_json::from_str::<DateRange>(r#"{"start": "1975-01-03 00:00"}"#).is_err());
        assert!(serde_json::from_str::<DateRange>(r#"{"start": "1975-01-03", "stop": "2013-10-05"}"#).is_err());
    }
}
