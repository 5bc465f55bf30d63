//! CF calendars: day counts, leap rules and year numbering of every calendar CF names, shared by
//! the CF time axes (`time`) and Samudra's Julian dates (`dates`).

use serde::Serialize;

/// A CF calendar.
///
/// Years are counted as cftime counts them by default (CF 1.9): the real-world calendars
/// [`Julian`](Self::Julian) and [`Standard`](Self::Standard) have no year zero (1 BC is year -1);
/// the others have one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Calendar {
    /// `noleap` / `365_day`.
    NoLeap,
    /// `all_leap` / `366_day`.
    AllLeap,
    /// `360_day`.
    Day360,
    /// `proleptic_gregorian`: the Gregorian rules for every date, year zero included.
    #[serde(rename = "proleptic_gregorian")]
    Gregorian,
    /// `julian`: a leap year every 4 years, no century correction.
    Julian,
    /// `standard` / `gregorian`: CF's mixed calendar, Julian up to 1582-10-04, followed by the
    /// Gregorian 1582-10-15 (the ten dates between do not exist).
    Standard,
}

/// Days from 0001-01-01 to 1582-10-15 in the mixed calendar (577 737 Julian days to
/// 1582-10-05, the day the Gregorian 1582-10-15 replaced).
pub(crate) const SWITCH: i64 = 577_737;

impl Calendar {
    /// Parses a CF calendar name (case-insensitive); `None` for unknown names.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "noleap" | "365_day" => Some(Self::NoLeap),
            "all_leap" | "366_day" => Some(Self::AllLeap),
            "360_day" => Some(Self::Day360),
            "proleptic_gregorian" => Some(Self::Gregorian),
            "julian" => Some(Self::Julian),
            "standard" | "gregorian" => Some(Self::Standard),
            _ => None,
        }
    }

    /// The CF name (the first one where a calendar has two).
    pub fn cf_name(self) -> &'static str {
        match self {
            Self::NoLeap => "noleap",
            Self::AllLeap => "all_leap",
            Self::Day360 => "360_day",
            Self::Gregorian => "proleptic_gregorian",
            Self::Julian => "julian",
            Self::Standard => "standard",
        }
    }

    /// Whether year 0 exists (cftime's default `has_year_zero`): false for `julian` and
    /// `standard`, where year -1 precedes year 1.
    pub fn has_year_zero(self) -> bool {
        !matches!(self, Self::Julian | Self::Standard)
    }

    /// The astronomical year (with a year 0) of a year as the calendar numbers it; `None` for a
    /// year 0 that the calendar lacks.
    pub(crate) fn astronomical(self, year: i64) -> Option<i64> {
        match year {
            0 if !self.has_year_zero() => None,
            y if y < 0 && !self.has_year_zero() => Some(y + 1),
            y => Some(y),
        }
    }

    /// The year as the calendar numbers it, from an astronomical year.
    pub(crate) fn numbered(self, year: i64) -> i64 {
        if year <= 0 && !self.has_year_zero() { year - 1 } else { year }
    }

    /// Leap years, by astronomical year.
    pub(crate) fn is_leap(self, year: i64) -> bool {
        match self {
            Self::NoLeap | Self::Day360 => false,
            Self::AllLeap => true,
            Self::Gregorian => (year % 4 == 0 && year % 100 != 0) || year % 400 == 0,
            Self::Julian => year.rem_euclid(4) == 0,
            Self::Standard if year < 1582 => Self::Julian.is_leap(year),
            Self::Standard => Self::Gregorian.is_leap(year),
        }
    }

    pub(crate) fn month_days(self, year: i64, month: u32) -> u32 {
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

    /// Whether the (astronomical) date exists in the calendar.
    pub(crate) fn exists(self, year: i64, month: u32, day: u32) -> bool {
        let gap = self == Self::Standard && (year, month) == (1582, 10) && (5..=14).contains(&day);
        (1..=12).contains(&month) && day >= 1 && day <= self.month_days(year, month) && !gap
    }

    pub(crate) fn year_days(self, year: i64) -> i64 {
        match self {
            Self::Day360 => 360,
            _ if self.is_leap(year) => 366,
            _ => 365,
        }
    }

    /// Days from 0001-01-01 to the (astronomical) date.
    pub(crate) fn ordinal(self, year: i64, month: u32, day: u32) -> i64 {
        if self == Self::Standard {
            return if (year, month, day) < (1582, 10, 15) {
                Self::Julian.ordinal(year, month, day)
            } else {
                Self::Gregorian.ordinal(year, month, day) + 2
            };
        }
        let y = year - 1;
        let before_year = match self {
            Self::NoLeap => 365 * y,
            Self::AllLeap => 366 * y,
            Self::Day360 => 360 * y,
            Self::Gregorian => 365 * y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400),
            Self::Julian => 365 * y + y.div_euclid(4),
            Self::Standard => unreachable!("handled above"),
        };
        let before_month: i64 = (1..month).map(|m| i64::from(self.month_days(year, m))).sum();
        before_year + before_month + i64::from(day) - 1
    }

    /// The (astronomical) date `days` after 0001-01-01.
    pub(crate) fn date_of(self, mut days: i64) -> (i64, u32, u32) {
        if self == Self::Standard {
            return if days >= SWITCH { Self::Gregorian.date_of(days - 2) } else { Self::Julian.date_of(days) };
        }
        // Walk from an estimate; exact for the single-rule calendars.
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

    /// This calendar's day count of the day that is day `julian_days` of the Julian calendar, for
    /// the real-world calendars.
    pub(crate) fn days_of_julian_days(self, julian_days: i64) -> Option<i64> {
        match self {
            Self::Julian | Self::Standard => Some(julian_days),
            // the proleptic Gregorian 0001-01-01 is the Julian 0001-01-03
            Self::Gregorian => Some(julian_days - 2),
            Self::NoLeap | Self::AllLeap | Self::Day360 => None,
        }
    }
}

/// The years dates may name: far beyond any model run, and small enough that day counts never
/// overflow.
pub(crate) const YEARS: std::ops::RangeInclusive<i64> = -1_000_000..=1_000_000;
