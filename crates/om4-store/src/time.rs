//! CF time axes: decode `"<unit> since <date>"` under the calendars OM4 stores use, and select
//! half-open date ranges `[start, end)` as Samudra's time slices do (its samples are stamped 12:00,
//! its bounds 00:00, so label slicing never meets a bound exactly).

use std::fmt;
use std::ops::Range;

use serde::Serialize;

/// A CF calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Calendar {
    /// `noleap` / `365_day`.
    NoLeap,
    /// `all_leap` / `366_day`.
    AllLeap,
    /// `360_day`.
    Day360,
    /// `proleptic_gregorian`, and `standard`/`gregorian` for dates from 1582-10-15 on.
    Gregorian,
}

impl Calendar {
    /// Parses a CF calendar name (case-insensitive); `None` for unknown names.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "noleap" | "365_day" => Some(Self::NoLeap),
            "all_leap" | "366_day" => Some(Self::AllLeap),
            "360_day" => Some(Self::Day360),
            "standard" | "gregorian" | "proleptic_gregorian" => Some(Self::Gregorian),
            _ => None,
        }
    }

    fn is_leap(self, year: i64) -> bool {
        match self {
            Self::NoLeap | Self::Day360 => false,
            Self::AllLeap => true,
            Self::Gregorian => (year % 4 == 0 && year % 100 != 0) || year % 400 == 0,
        }
    }

    fn month_days(self, year: i64, month: u32) -> u32 {
        if self == Self::Day360 {
            return 30;
        }
        match month {
            2 if self.is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    fn year_days(self, year: i64) -> i64 {
        match self {
            Self::Day360 => 360,
            _ if self.is_leap(year) => 366,
            _ => 365,
        }
    }

    /// Days from 0001-01-01 to the date.
    fn ordinal(self, year: i64, month: u32, day: u32) -> i64 {
        let y = year - 1;
        let before_year = match self {
            Self::NoLeap => 365 * y,
            Self::AllLeap => 366 * y,
            Self::Day360 => 360 * y,
            Self::Gregorian => 365 * y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400),
        };
        let before_month: i64 = (1..month).map(|m| i64::from(self.month_days(year, m))).sum();
        before_year + before_month + i64::from(day) - 1
    }

    fn date_of(self, mut days: i64) -> (i64, u32, u32) {
        // Walk from an estimate; exact for all four calendars.
        let mut year = days.div_euclid(366) + 1;
        while self.ordinal(year + 1, 1, 1) <= days {
            year += 1;
        }
        while self.ordinal(year, 1, 1) > days {
            year -= 1;
        }
        days -= self.ordinal(year, 1, 1);
        debug_assert!(days < self.year_days(year));
        let mut month = 1;
        while days >= i64::from(self.month_days(year, month)) {
            days -= i64::from(self.month_days(year, month));
            month += 1;
        }
        (year, month, days as u32 + 1)
    }
}

/// The years dates may name: far beyond any model run, and small enough that day counts never
/// overflow.
const YEARS: std::ops::RangeInclusive<i64> = -1_000_000..=1_000_000;

/// A point in time under a calendar, as fractional days since 0001-01-01 of that calendar.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Instant {
    /// Days since 0001-01-01 00:00.
    pub days: f64,
    /// The calendar.
    pub calendar: Calendar,
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.days.floor();
        // Days outside the years a date can name (or not finite) print as a day count.
        let namable = whole.is_finite() && whole.abs() <= 366.0 * *YEARS.end() as f64;
        if !namable {
            return write!(f, "day {} since 0001-01-01", self.days);
        }
        let (y, m, d) = self.calendar.date_of(whole as i64);
        let secs = ((self.days - whole) * 86_400.0).round() as i64;
        write!(f, "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    }
}

/// Parses `YYYY-MM-DD`, optionally followed by ` HH:MM[:SS]` or `THH:MM[:SS]`, into days since
/// 0001-01-01 of `calendar`.
///
/// # Errors
/// A message when the text is not such a date or the date does not exist in the calendar.
pub fn parse_date(text: &str, calendar: Calendar) -> Result<f64, String> {
    let text = text.trim();
    let (date, time) = match text.find(['T', ' ']) {
        Some(i) => (&text[..i], text[i + 1..].trim()),
        None => (text, ""),
    };
    let bad = || format!("{text:?} is not a date (YYYY-MM-DD[ HH:MM[:SS]])");
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(bad());
    };
    let year: i64 = y.parse().map_err(|_| bad())?;
    let month: u32 = m.parse().map_err(|_| bad())?;
    let day: u32 = d.parse().map_err(|_| bad())?;
    if !YEARS.contains(&year) {
        return Err(format!("{text:?}: om4 handles years {} to {}", YEARS.start(), YEARS.end()));
    }
    if !(1..=12).contains(&month) || day == 0 || day > calendar.month_days(year, month) {
        return Err(format!("{text:?} does not exist in the {calendar:?} calendar"));
    }
    if calendar == Calendar::Gregorian && (year, month, day) < (1582, 10, 15) {
        return Err(format!("{text:?} is before 1582-10-15, where the standard calendar is not proleptic"));
    }
    let mut seconds = 0.0;
    if !time.is_empty() {
        let time = time.trim_end_matches('Z');
        let hms: Vec<&str> = time.split(':').collect();
        if hms.len() < 2 || hms.len() > 3 {
            return Err(bad());
        }
        let h: f64 = hms[0].parse().map_err(|_| bad())?;
        let mi: f64 = hms[1].parse().map_err(|_| bad())?;
        let s: f64 = hms.get(2).map_or(Ok(0.0), |s| s.parse()).map_err(|_| bad())?;
        if !((0.0..=24.0).contains(&h) && (0.0..60.0).contains(&mi) && (0.0..61.0).contains(&s)) {
            return Err(bad());
        }
        seconds = h * 3600.0 + mi * 60.0 + s;
    }
    Ok(calendar.ordinal(year, month, day) as f64 + seconds / 86_400.0)
}

/// A decoded time coordinate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeAxis {
    /// Raw coordinate values.
    pub raw: Vec<f64>,
    /// Decoded instants, when the coordinate has CF units.
    pub instants: Option<Vec<Instant>>,
    /// The `units` attribute, if any.
    pub units: Option<String>,
}

impl TimeAxis {
    /// An axis of plain positions (no `time` coordinate, or one without CF units).
    pub fn positions(raw: Vec<f64>) -> Self {
        Self { raw, instants: None, units: None }
    }

    /// Decodes raw values with CF `units` and `calendar` (default `standard`).
    ///
    /// # Errors
    /// A message for unknown units or calendars, and for non-increasing or repeated times.
    pub fn decode(raw: Vec<f64>, units: Option<&str>, calendar: Option<&str>) -> Result<Self, String> {
        if let Some(i) = raw.windows(2).position(|w| w[1] <= w[0] || w[0].is_nan()) {
            return Err(format!(
                "time values must increase strictly, but position {} holds {} after {}",
                i + 1,
                raw[i + 1],
                raw[i]
            ));
        }
        let Some(units) = units else {
            return Ok(Self::positions(raw));
        };
        let cal_name = calendar.unwrap_or("standard");
        let cal = Calendar::parse(cal_name).ok_or_else(|| format!("unsupported calendar {cal_name:?}"))?;
        let (unit, since) =
            units.split_once(" since ").ok_or_else(|| format!("units {units:?} are not \"<unit> since <date>\""))?;
        let scale = match unit.trim().to_ascii_lowercase().as_str() {
            "days" | "day" | "d" => 1.0,
            "hours" | "hour" | "h" => 1.0 / 24.0,
            "minutes" | "minute" | "min" => 1.0 / 1440.0,
            "seconds" | "second" | "s" => 1.0 / 86_400.0,
            other => return Err(format!("unsupported time unit {other:?}")),
        };
        let origin = parse_date(since, cal)?;
        let instants = raw.iter().map(|&v| Instant { days: origin + v * scale, calendar: cal }).collect();
        Ok(Self { raw, instants: Some(instants), units: Some(units.to_string()) })
    }

    /// Number of time steps.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// True for an empty axis.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Calendar, when decoded.
    pub fn calendar(&self) -> Option<Calendar> {
        self.instants.as_ref().and_then(|i| i.first()).map(|i| i.calendar)
    }

    /// Rows whose time lies in `[start, end)`; an absent bound is open.
    ///
    /// # Errors
    /// A message when a bound is given but the axis has no CF units, or a bound is not a date.
    pub fn select(&self, start: Option<&str>, end: Option<&str>) -> Result<Range<usize>, String> {
        if start.is_none() && end.is_none() {
            return Ok(0..self.len());
        }
        let instants = self
            .instants
            .as_ref()
            .ok_or("the time coordinate has no CF units, so it can be selected by position only")?;
        let cal = self.calendar().unwrap_or(Calendar::Gregorian);
        let lo = start.map(|s| parse_date(s, cal)).transpose()?;
        let hi = end.map(|s| parse_date(s, cal)).transpose()?;
        let first = lo.map_or(0, |lo| instants.partition_point(|i| i.days < lo));
        let last = hi.map_or(instants.len(), |hi| instants.partition_point(|i| i.days < hi));
        Ok(first..last.max(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn om4_axis() -> TimeAxis {
        // 4745 five-day steps from 1958-01-03 12:00, noleap, in hours since 1958-01-01
        let raw = (0..4745).map(|k| 60.0 + 120.0 * k as f64).collect();
        TimeAxis::decode(raw, Some("hours since 1958-01-01 00:00:00"), Some("noleap")).unwrap()
    }

    #[test]
    fn samudra_splits_on_noleap_axis() {
        let t = om4_axis();
        assert_eq!(t.instants.as_ref().unwrap()[0].to_string(), "1958-01-03 12:00:00");
        assert_eq!(t.instants.as_ref().unwrap()[4744].to_string(), "2022-12-29 12:00:00");
        assert_eq!(t.select(Some("1975-01-03"), Some("2013-10-05")).unwrap(), 1241..4070);
        assert_eq!(t.select(Some("2013-10-05"), Some("2014-10-05")).unwrap(), 4070..4143);
        assert_eq!(t.select(Some("2014-10-10"), Some("2022-12-24")).unwrap(), 4144..4743);
        assert_eq!(t.select(None, None).unwrap(), 0..4745);
        assert_eq!(t.select(Some("2030-01-01"), None).unwrap(), 4745..4745);
    }

    #[test]
    fn calendars_round_trip() {
        for cal in [Calendar::NoLeap, Calendar::AllLeap, Calendar::Day360, Calendar::Gregorian] {
            for days in [577_000i64, 700_000, 730_000, 740_000] {
                let (y, m, d) = cal.date_of(days);
                assert_eq!(cal.ordinal(y, m, d), days, "{cal:?}");
            }
        }
        // 2000-03-01 minus 2000-02-28 is 2 days in the Gregorian calendar, 1 without leap days
        let g = |s| parse_date(s, Calendar::Gregorian).unwrap();
        assert_eq!(g("2000-03-01") - g("2000-02-28"), 2.0);
        let n = |s| parse_date(s, Calendar::NoLeap).unwrap();
        assert_eq!(n("2000-03-01") - n("2000-02-28"), 1.0);
        assert!(parse_date("2001-02-29", Calendar::Gregorian).is_err());
        assert!(parse_date("2001-02-30", Calendar::Day360).is_ok());
        // 1970-01-01 is day 719162 of the proleptic Gregorian calendar
        assert_eq!(g("1970-01-01"), 719_162.0);
    }

    #[test]
    fn bad_axes_rejected() {
        assert!(TimeAxis::decode(vec![0.0, 1.0, 1.0], None, None).is_err());
        assert!(TimeAxis::decode(vec![2.0, 1.0], None, None).is_err());
        assert!(TimeAxis::decode(vec![0.0], Some("fortnights since 2000-01-01"), None).is_err());
        assert!(TimeAxis::decode(vec![0.0], Some("days since 2000-01-01"), Some("julian")).is_err());
        let plain = TimeAxis::decode(vec![0.0, 1.0], None, None).unwrap();
        assert!(plain.select(Some("2000-01-01"), None).is_err());
    }
}
