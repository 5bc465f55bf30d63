//! CF time axes: decode `"<unit> since <date>"` under every CF calendar, and select date ranges
//! as Samudra does (bounds are Julian dates at 12:00, both ends included:
//! [`TimeAxis::select_inclusive`] with a [`DateRange`](crate::DateRange)).

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use crate::calendar::{Calendar, YEARS};
use crate::dates::{DateRange, JulianDate};

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
        // Days outside the years a date can name (or not finite) print as a day count.
        let namable = self.days.is_finite() && self.days.abs() <= 366.0 * *YEARS.end() as f64;
        if !namable {
            return write!(f, "day {} since 0001-01-01", self.days);
        }
        let seconds = (self.days * 86_400.0).round() as i64;
        let (y, m, d) = self.calendar.date_of(seconds.div_euclid(86_400));
        let secs = seconds.rem_euclid(86_400);
        let y = self.calendar.numbered(y);
        let sign = if y < 0 { "-" } else { "" };
        write!(f, "{sign}{:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", y.abs(), secs / 3600, secs / 60 % 60, secs % 60)
    }
}

/// Parses `YYYY-MM-DD`, optionally followed by ` HH:MM[:SS]` or `THH:MM[:SS]`, into days since
/// 0001-01-01 of `calendar`. Years are numbered as the calendar numbers them (no year 0 in
/// `julian` and `standard`).
///
/// # Errors
/// A message when the text is not such a date or the date does not exist in the calendar.
pub fn parse_date(text: &str, calendar: Calendar) -> Result<f64, String> {
    let (days, seconds) = parse_date_parts(text, calendar)?;
    Ok(days as f64 + seconds / 86_400.0)
}

/// [`parse_date`] as whole days since 0001-01-01 and seconds into the day.
fn parse_date_parts(text: &str, calendar: Calendar) -> Result<(i64, f64), String> {
    let text = text.trim();
    let (date, time) = match text.find(['T', ' ']) {
        Some(i) => (&text[..i], text[i + 1..].trim()),
        None => (text, ""),
    };
    let bad = || format!("{text:?} is not a date (YYYY-MM-DD[ HH:MM[:SS]])");
    let (negative, date) = match date.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, date),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(bad());
    };
    let year: i64 = y.parse().map_err(|_| bad())?;
    let year = if negative { -year } else { year };
    let month: u32 = m.parse().map_err(|_| bad())?;
    let day: u32 = d.parse().map_err(|_| bad())?;
    if !YEARS.contains(&year) {
        return Err(format!("{text:?}: om4 handles years {} to {}", YEARS.start(), YEARS.end()));
    }
    let Some(astro) = calendar.astronomical(year) else {
        return Err(format!("{text:?}: the {} calendar has no year 0", calendar.cf_name()));
    };
    if !calendar.exists(astro, month, day) {
        return Err(format!("{text:?} does not exist in the {} calendar", calendar.cf_name()));
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
    Ok((calendar.ordinal(astro, month, day), seconds))
}

/// Microseconds per unit of a CF time unit, as cftime spells them (`hr`, `secs`, `ms`, ...).
fn unit_micros(unit: &str, calendar: Calendar) -> Option<i64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "microseconds" | "microsecond" | "microsec" | "microsecs" => 1,
        "milliseconds" | "millisecond" | "millisec" | "millisecs" | "msec" | "msecs" | "ms" => 1_000,
        "seconds" | "second" | "sec" | "secs" | "s" => 1_000_000,
        "minutes" | "minute" | "min" | "mins" => 60_000_000,
        "hours" | "hour" | "hr" | "hrs" | "h" => 3_600_000_000,
        "days" | "day" | "d" => 86_400_000_000,
        "months" | "month" if calendar == Calendar::Day360 => 30 * 86_400_000_000,
        "common_years" | "common_year" if calendar == Calendar::NoLeap => 365 * 86_400_000_000,
        _ => return None,
    })
}

/// Splits CF `units` into the microseconds of its unit and its reference date text.
fn split_units(units: &str, calendar: Calendar) -> Result<(i64, &str), String> {
    let malformed = || format!("units {units:?} are not \"<unit> since <date>\"");
    let units_trimmed = units.trim_start();
    let (unit, rest) = units_trimmed.split_once(char::is_whitespace).ok_or_else(malformed)?;
    let rest = rest.trim_start();
    let (since, date) = rest.split_once(char::is_whitespace).ok_or_else(malformed)?;
    if !since.eq_ignore_ascii_case("since") {
        return Err(malformed());
    }
    let micros = unit_micros(unit, calendar).ok_or_else(|| format!("unsupported time unit {unit:?}"))?;
    Ok((micros, date.trim()))
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

    /// Decodes raw values with CF `units` and `calendar` (default `standard`, the mixed
    /// Julian/Gregorian calendar, as CF and cftime).
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
        let (micros, since) = split_units(units, cal)?;
        let scale = micros as f64 / 86_400_000_000.0;
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

    /// Rows whose time lies in `[start 12:00, end 12:00]`, both ends included, as Samudra selects
    /// an OM4 time range (m2lines/Samudra 018a6a7: `Om4TimeConfig` bounds are `JulianDate`s,
    /// `cftime.datetime.strptime(value, "%Y-%m-%d", calendar="julian").replace(hour=12)`, and
    /// `DataSource.slice` takes `data.sel(time=slice(start, end))`, which keeps both ends). An
    /// absent bound is open.
    ///
    /// Each bound is a [`JulianDate`] (parsed as upstream parses it). Times are compared as cftime decodes them: whole microseconds, `value × unit` rounded
    /// (`num2date`). On a `julian`, `standard` or `proleptic_gregorian` axis a bound is the same
    /// instant as upstream's (so on a `proleptic_gregorian` axis the Julian `2000-01-01` is
    /// `2000-01-14`); on a `noleap`, `all_leap` or `360_day` axis, where upstream's comparison
    /// raises `TypeError`, om4 takes the same year, month and day in the axis's calendar (the date
    /// must exist in both).
    ///
    /// # Errors
    /// As upstream: a range entirely outside the axis
    /// (`start` after the last time or `end` before the first; upstream's `ValueError`) or an
    /// empty axis. Also an axis without CF units, or a time value that cftime could not decode
    /// (not finite, or beyond 64-bit microseconds).
    pub fn select_inclusive(&self, range: &DateRange) -> Result<Range<usize>, String> {
        let lo = range.start.map(JulianDate::astronomical);
        let hi = range.end.map(JulianDate::astronomical);
        if lo.is_none() && hi.is_none() {
            return Ok(0..self.len());
        }
        let micros = self.micros()?;
        let cal = self.calendar().expect("an axis with CF units and at least one time has a calendar");
        let bound = |(y, m, d): (i64, u32, u32)| -> Result<i128, String> {
            let days = match cal.days_of_julian_days(Calendar::Julian.ordinal(y, m, d)) {
                Some(days) => days,
                None if cal.exists(y, m, d) => cal.ordinal(y, m, d),
                None => {
                    return Err(format!(
                        "{:04}-{m:02}-{d:02} does not exist in the axis's {} calendar",
                        Calendar::Julian.numbered(y),
                        cal.cf_name()
                    ));
                }
            };
            Ok(i128::from(days) * 86_400_000_000 + 12 * 3_600_000_000)
        };
        let lo = lo.map(bound).transpose()?;
        let hi = hi.map(bound).transpose()?;
        let (min, max) = (micros[0], micros[micros.len() - 1]);
        if lo.is_some_and(|lo| lo > max) || hi.is_some_and(|hi| hi < min) {
            return Err(format!(
                "time range {} to {} is entirely outside the axis ({} to {})",
                range.start.map_or("(open)".to_string(), |d| d.to_string()),
                range.end.map_or("(open)".to_string(), |d| d.to_string()),
                self.instants.as_ref().expect("decoded")[0],
                self.instants.as_ref().expect("decoded")[micros.len() - 1]
            ));
        }
        let first = lo.map_or(0, |lo| micros.partition_point(|&t| t < lo));
        let last = hi.map_or(micros.len(), |hi| micros.partition_point(|&t| t <= hi));
        Ok(first..last.max(first))
    }

    /// Each time as whole microseconds since 0001-01-01 00:00 of the axis's calendar, decoded as
    /// cftime's `num2date` does: `rint(value × unit)` in microseconds, snapped to the whole second
    /// when one microsecond off (for units of a second or more), added to the reference date.
    fn micros(&self) -> Result<Vec<i128>, String> {
        let (Some(units), Some(cal)) = (self.units.as_deref(), self.calendar()) else {
            return Err(if self.units.is_some() {
                "the time axis is empty".to_string()
            } else {
                "the time coordinate has no CF units, so it can be selected by position only".to_string()
            });
        };
        let (unit, since) = split_units(units, cal)?;
        let (days, seconds) = parse_date_parts(since, cal)?;
        let origin = i128::from(days) * 86_400_000_000 + (seconds * 1e6).round() as i128;
        self.raw
            .iter()
            .map(|&v| {
                let x = v * unit as f64;
                if !x.is_finite() || x.abs() >= 9.2e18 {
                    return Err(format!("time value {v} cannot be decoded as microseconds"));
                }
                let mut n = x.round_ties_even() as i64;
                if unit >= 1_000_000 {
                    if n.rem_euclid(1_000_000) == 1 {
                        n = x.floor() as i64;
                    } else if n.rem_euclid(1_000_000) == 999_999 {
                        n = x.ceil() as i64;
                    }
                }
                Ok(origin + i128::from(n))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::SWITCH;

    /// Parses the bounds, then selects.
    fn sel(axis: &TimeAxis, start: Option<&str>, end: Option<&str>) -> Result<Range<usize>, String> {
        let bound = |s: Option<&str>| s.map(str::parse).transpose();
        axis.select_inclusive(&DateRange { start: bound(start)?, end: bound(end)? })
    }

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
        // configs/om4.toml's splits: the shared bound 2013-10-05 (row 4070) is in both, as upstream's
        assert_eq!(sel(&t, Some("1975-01-03"), Some("2013-10-05")).unwrap(), 1241..4071);
        assert_eq!(sel(&t, Some("2013-10-05"), Some("2014-10-05")).unwrap(), 4070..4144);
        assert_eq!(sel(&t, None, None).unwrap(), 0..4745);
        assert!(sel(&t, Some("2030-01-01"), None).is_err());
    }

    #[test]
    fn calendars_round_trip() {
        let all = [
            Calendar::NoLeap,
            Calendar::AllLeap,
            Calendar::Day360,
            Calendar::Gregorian,
            Calendar::Julian,
            Calendar::Standard,
        ];
        for cal in all {
            assert_eq!(Calendar::parse(cal.cf_name()), Some(cal));
            for days in [-800_000i64, -1, 0, 577_000, SWITCH - 1, SWITCH, 700_000, 730_000, 740_000] {
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
        assert!(TimeAxis::decode(vec![0.0], Some("days since 2000-01-01"), Some("tropical")).is_err());
        assert!(TimeAxis::decode(vec![0.0], Some("days after 2000-01-01"), None).is_err());
        let plain = TimeAxis::decode(vec![0.0, 1.0], None, None).unwrap();
        assert!(sel(&plain, Some("2000-01-01"), None).is_err());
    }

    #[test]
    fn julian_and_mixed_calendars() {
        let j = |s| parse_date(s, Calendar::Julian).unwrap();
        let st = |s| parse_date(s, Calendar::Standard).unwrap();
        let g = |s| parse_date(s, Calendar::Gregorian).unwrap();
        // Julian: every fourth year is leap, 1900 included
        assert_eq!(j("1900-03-01") - j("1900-02-28"), 2.0);
        assert!(parse_date("1900-02-29", Calendar::Gregorian).is_err());
        assert!(parse_date("1900-02-29", Calendar::Standard).is_err());
        assert_eq!(j("1901-01-01") - j("1801-01-01"), 36_525.0);
        assert_eq!(g("1901-01-01") - g("1801-01-01"), 36_524.0);
        // the mixed calendar: Julian up to 1582-10-04, then Gregorian 1582-10-15
        assert_eq!(st("1582-10-15") - st("1582-10-04"), 1.0);
        assert_eq!(st("1582-10-15"), SWITCH as f64);
        for day in 5..=14 {
            assert!(parse_date(&format!("1582-10-{day:02}"), Calendar::Standard).is_err());
            assert!(parse_date(&format!("1582-10-{day:02}"), Calendar::Julian).is_ok());
        }
        assert_eq!(st("1500-02-29"), j("1500-02-29"));
        assert_eq!(st("1582-10-04"), j("1582-10-04"));
        assert_eq!(st("2000-01-01"), g("2000-01-01") + 2.0);
        // the same instant: Julian 2000-01-01 is Gregorian 2000-01-14
        assert_eq!(j("2000-01-01"), st("2000-01-14"));
        // no year zero in julian and standard; year zero in proleptic_gregorian
        assert!(parse_date("0000-06-01", Calendar::Julian).is_err());
        assert!(parse_date("0000-06-01", Calendar::Standard).is_err());
        assert_eq!(j("0001-01-01") - j("-0001-12-31"), 1.0);
        assert_eq!(g("0001-01-01") - g("0000-12-31"), 1.0);
        let show = |days, calendar| Instant { days, calendar }.to_string();
        assert_eq!(show(-1.0, Calendar::Standard), "-0001-12-31 00:00:00");
        assert_eq!(show(-1.0, Calendar::Gregorian), "0000-12-31 00:00:00");
        assert_eq!(show(SWITCH as f64 - 0.5, Calendar::Standard), "1582-10-04 12:00:00");
        assert_eq!(show(SWITCH as f64, Calendar::Standard), "1582-10-15 00:00:00");
        // a day count a hair short of midnight is that midnight, never 24:00:00
        assert_eq!(show(1.0 - 1e-12, Calendar::Julian), "0001-01-02 00:00:00");
    }

    fn julian_om4_axis() -> TimeAxis {
        // five-day steps at 12:00 from 2013-09-30, julian, in days since 1958-01-01
        let origin = parse_date("2013-09-30 12:00", Calendar::Julian).unwrap()
            - parse_date("1958-01-01", Calendar::Julian).unwrap();
        let raw = (0..10).map(|k| origin + 5.0 * k as f64).collect();
        TimeAxis::decode(raw, Some("days since 1958-01-01 00:00:00"), Some("julian")).unwrap()
    }

    #[test]
    fn inclusive_selection_keeps_both_ends() {
        let t = julian_om4_axis();
        let shown: Vec<String> = t.instants.as_ref().unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(shown[1], "2013-10-05 12:00:00");
        assert_eq!(shown[3], "2013-10-15 12:00:00");
        // both the start's and the end's own steps are in
        assert_eq!(sel(&t, Some("2013-10-05"), Some("2013-10-15")).unwrap(), 1..4);
        assert_eq!(sel(&t, Some("2013-10-06"), Some("2013-10-14")).unwrap(), 2..3);
        assert_eq!(sel(&t, Some("2013-1-6"), None).unwrap(), 0..10);
        assert_eq!(sel(&t, None, Some("2013-10- 5")).unwrap(), 0..2);
        assert_eq!(sel(&t, None, None).unwrap(), 0..10);
        // reversed bounds select nothing, as xarray's slice does
        assert_eq!(sel(&t, Some("2013-10-15"), Some("2013-10-05")).unwrap(), 3..3);
        // entirely outside: upstream's ValueError
        assert!(sel(&t, Some("2014-01-01"), Some("2015-01-01")).is_err());
        assert!(sel(&t, Some("2000-01-01"), Some("2013-09-29")).is_err());
        assert!(sel(&t, Some("2000-01-01"), Some("2013-09-30")).is_ok());
        // upstream's strptime("%Y-%m-%d"): no time of day, four year digits, julian dates
        for bad in [
            "2013-10-05T12:00",
            "2013-10-05 00:00",
            " 2013-10-05",
            "2013-10-05 ",
            "13-10-05",
            "2013-13-01",
            "2013-02-30",
            "2013-10-32",
            "2013-00-10",
        ] {
            assert!(sel(&t, Some(bad), None).is_err(), "{bad}");
        }
        assert!(sel(&t, None, Some("1900-02-29")).is_err()); // a julian date, but before the axis
        assert!("1900-02-29".parse::<JulianDate>().is_ok());
        assert!("0000-01-01".parse::<JulianDate>().is_err());
        assert_eq!("-0005-01-01".parse::<JulianDate>().unwrap().astronomical(), (-4, 1, 1));
        assert_eq!("+2013-1-5".parse::<JulianDate>().unwrap().astronomical(), (2013, 1, 5));
        // an axis without CF units, or an empty one
        assert!(sel(&TimeAxis::positions(vec![0.0, 1.0]), Some("2013-10-05"), None).is_err());
        let empty = TimeAxis::decode(vec![], Some("days since 1958-01-01"), Some("julian")).unwrap();
        assert!(sel(&empty, Some("2013-10-05"), None).is_err());
    }

    #[test]
    fn inclusive_selection_across_calendars() {
        // days since 2000-01-01 00:00, one step per day at 12:00
        let axis = |cal| {
            TimeAxis::decode((0..40).map(|k| k as f64 + 0.5).collect(), Some("days since 2000-01-01"), Some(cal))
                .unwrap()
        };
        // the Julian 2000-01-01 12:00 is the Gregorian 2000-01-14 12:00: row 13
        assert_eq!(sel(&axis("proleptic_gregorian"), Some("2000-01-01"), Some("2000-01-01")).unwrap(), 13..14);
        assert_eq!(sel(&axis("standard"), Some("2000-01-01"), Some("2000-01-01")).unwrap(), 13..14);
        assert_eq!(sel(&axis("julian"), Some("2000-01-01"), Some("2000-01-01")).unwrap(), 0..1);
        // idealized calendars: the same year, month and day
        assert_eq!(sel(&axis("noleap"), Some("2000-01-03"), Some("2000-01-05")).unwrap(), 2..5);
        assert_eq!(sel(&axis("360_day"), Some("2000-01-30"), Some("2000-02-01")).unwrap(), 29..31);
        assert!(sel(&axis("noleap"), Some("2000-02-29"), None).is_err());
        // hours: 12:00 steps decoded exactly, whatever the float rounding of 1/24
        let hours = TimeAxis::decode(vec![12.0, 36.0, 60.0], Some("hours since 2000-01-01"), Some("julian")).unwrap();
        assert_eq!(sel(&hours, Some("2000-01-02"), Some("2000-01-03")).unwrap(), 1..3);
    }
}
