//! Time axes from arbitrary units, calendars, values and date strings: results or errors, never
//! a panic (dates come from users' configs, units and values from stores).

use om4_store::{Calendar, DateRange, JulianDate, TimeAxis, parse_date};
use proptest::prelude::*;

fn date_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,12}-[0-9]{1,3}-[0-9]{1,3}( [0-9]{1,3}:[0-9]{1,3}(:[0-9]{1,3}(\\.[0-9]{0,9})?)?)?",
        "[+-]?[0-9]{4}-[0-9]{1,2}-( ?[0-9]{1,2})",
        "[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}",
        "-?[0-9]{1,20}-[0-9]{0,3}-?[0-9]{0,3}T?[0-9:. +-]{0,12}",
        ".{0,24}",
    ]
}

fn units() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        date_like().prop_map(|d| Some(format!("days since {d}"))),
        date_like().prop_map(|d| Some(format!("hours since {d}"))),
        ".{0,30}".prop_map(Some),
    ]
}

fn calendar() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        prop::sample::select(vec![
            "noleap",
            "365_day",
            "360_day",
            "standard",
            "gregorian",
            "proleptic_gregorian",
            "all_leap",
            "julian"
        ])
        .prop_map(|c| Some(c.to_string())),
        ".{0,12}".prop_map(Some),
    ]
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![-1e6f64..1e6, any::<f64>(), Just(f64::NAN), Just(f64::INFINITY), Just(f64::MAX), Just(f64::MIN)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn time_axes_and_dates_never_panic(
        raw in prop::collection::vec(value(), 0..6), units in units(), cal in calendar(),
        start in prop::option::of(date_like()), end in prop::option::of(date_like()),
    ) {
        let outcome = std::panic::catch_unwind(|| {
            for c in [
                Calendar::NoLeap,
                Calendar::AllLeap,
                Calendar::Day360,
                Calendar::Gregorian,
                Calendar::Julian,
                Calendar::Standard,
            ] {
                let _ = start.as_deref().map(|s| parse_date(s, c));
            }
            let bound = |s: &Option<String>| s.as_deref().map(str::parse::<JulianDate>).transpose();
            let range = bound(&start).and_then(|start| Ok(DateRange { start, end: bound(&end)? }));
            if let Ok(axis) = TimeAxis::decode(raw.clone(), units.as_deref(), cal.as_deref()) {
                let _ = (axis.len(), axis.calendar());
                for instant in axis.instants.iter().flatten() {
                    let _ = instant.to_string();
                }
                if let Ok(range) = &range {
                    let _ = axis.select_inclusive(range);
                }
            }
            if let Ok(range) = &range {
                let _ = TimeAxis::positions(raw.clone()).select_inclusive(range);
            }
        });
        prop_assert!(outcome.is_ok());
    }
}
