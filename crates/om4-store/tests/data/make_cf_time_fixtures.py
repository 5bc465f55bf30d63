"""Regenerate cf_time.json: CF time decoding by cftime, and time selection as Samudra does it.

Part `dates`: for every CF calendar name, several `units` and date strings, cftime's
`date2num(date, units, calendar)` and `str(num2date(that number, units, calendar))`, or `null`
where cftime rejects the date (it does not exist in that calendar).

Part `selections`: time axes (`units`, `calendar`, raw values) decoded by cftime into an xarray
coordinate, and `(start, end)` bounds turned into rows the way m2lines/Samudra 018a6a7 selects an
OM4 time range: each bound becomes upstream's own `JulianDate` class (`src/samudra/config.py`,
executed from the file given on the command line, not copied), the range is checked as
`DataSource.slice` checks it (`ValueError` when entirely outside the data), and the rows are those
of `data.sel(time=slice(start.datetime, end.datetime))` as `[first, last + 1]` (`[]` for none).
`error` names the exception upstream raises instead (`TypeError` on a `noleap` or `360_day` axis,
whose dates cftime will not compare with Julian ones).

    git --git-dir=<Samudra clone>/.git show 018a6a74:src/samudra/config.py > /tmp/config.py
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install cftime xarray pandas
    /tmp/venv/bin/python make_cf_time_fixtures.py /tmp/config.py > cf_time.json
"""

import ast
import json
import sys

import cftime
import numpy as np
import xarray as xr

CALENDARS = ["standard", "gregorian", "proleptic_gregorian", "julian", "noleap", "365_day", "all_leap",
             "366_day", "360_day"]
UNITS = [
    "days since 1958-01-01 00:00:00",
    "hours since 1958-01-01",
    "seconds since 1970-01-01 00:00:00",
    "days since 0001-01-01",
    "days since 1582-10-01",
    "hours since 1500-03-01 06:00:00",
    "minutes since 2000-02-28 12:00",
]
DATES = [
    "0001-01-01 00:00:00", "0100-03-01 00:00:00", "1000-02-29 18:30:15", "1500-02-29 00:00:00",
    "1582-10-04 12:00:00", "1582-10-10 00:00:00", "1582-10-15 00:00:00", "1600-02-29 06:00:00",
    "1700-02-29 00:00:00", "1900-02-29 00:00:00", "1900-03-01 00:00:00", "1958-01-03 12:00:00",
    "1975-01-03 12:00:00", "2000-02-29 00:00:00", "2000-02-30 00:00:00", "2000-12-31 23:59:59",
    "2001-02-29 00:00:00", "2013-10-05 12:00:00", "2022-12-29 12:00:00", "2100-02-29 00:00:00",
]


def julian_date_class(config_path):
    """Upstream's `JulianDate`, executed from its source file."""
    tree = ast.parse(open(config_path).read(), config_path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "JulianDate")
    namespace = {"cftime": cftime}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), config_path, "exec"), namespace)
    return namespace["JulianDate"]


def date_cases():
    cases = []
    for calendar in CALENDARS:
        for units in UNITS:
            try:
                cftime.date2num(cftime.datetime(2000, 1, 1, calendar=calendar), units, calendar)
            except ValueError:
                continue  # a reference date this calendar lacks
            for text in DATES:
                date, time = text.split(" ")
                y, m, d = map(int, date.split("-"))
                hh, mm, ss = map(int, time.split(":"))
                try:
                    dt = cftime.datetime(y, m, d, hh, mm, ss, calendar=calendar)
                except ValueError:
                    cases.append(dict(units=units, calendar=calendar, date=text, value=None, back=None))
                    continue
                value = cftime.date2num(dt, units, calendar)
                value = value.item() if hasattr(value, "item") else value
                back = str(cftime.num2date(value, units, calendar))
                cases.append(dict(units=units, calendar=calendar, date=text, value=value, back=back))
    return cases


def axes():
    om4 = [60.0 + 120.0 * k for k in range(4745)]  # five-day steps from 1958-01-03 12:00
    daily = [k + 0.5 for k in range(60)]
    out = []
    for calendar in ("julian", "standard", "proleptic_gregorian", "noleap"):
        out.append(dict(units="hours since 1958-01-01 00:00:00", calendar=calendar, raw=om4))
    for calendar in ("julian", "proleptic_gregorian", "360_day"):
        out.append(dict(units="days since 2000-01-01", calendar=calendar, raw=daily))
    return out


BOUNDS = [
    ("1975-01-03", "2013-10-05"), ("2013-10-05", "2014-10-05"), ("2014-10-10", "2022-12-24"),
    ("1958-01-03", "1958-01-03"), ("1958-01-01", "1958-01-02"), ("2022-12-29", "2030-01-01"),
    ("2022-12-30", "2030-01-01"), ("1900-01-01", "1958-01-02"), ("1900-01-01", "1958-01-03"),
    ("2013-10-15", "2013-10-05"), ("2013-1-5", "2013-10- 5"), ("2013-10-05T12:00", "2014-01-01"),
    ("2013-10-05", "2014-01-01 00:00"), ("1900-02-29", "1960-02-29"), ("2001-02-29", "2002-01-01"),
    ("+1960-01-01", "1961-01-01"), ("0000-01-01", "1961-01-01"), ("2000-01-01", "2000-01-01"),
    ("2000-01-14", "2000-01-20"), ("1999-12-20", "2000-02-29"),
]


def selection_cases(julian_date):
    cases = []
    for axis in axes():
        times = cftime.num2date(np.array(axis["raw"]), axis["units"], axis["calendar"])
        data = xr.DataArray(np.arange(len(times)), dims="time", coords={"time": times})
        assert isinstance(data.indexes["time"], xr.CFTimeIndex)
        for start, end in BOUNDS:
            case = dict(units=axis["units"], calendar=axis["calendar"], start=start, end=end)
            try:
                lo, hi = julian_date(start).datetime, julian_date(end).datetime
                # DataSource.slice: entirely outside the data raises
                t_min, t_max = data.time.values.min(), data.time.values.max()
                if lo > t_max or hi < t_min:
                    raise ValueError("entirely outside")
                rows = data.sel(time=slice(lo, hi)).values.tolist()
                assert rows == list(range(rows[0], rows[-1] + 1)) if rows else True
                case["rows"] = [rows[0], rows[-1] + 1] if rows else []
                case["error"] = None
            except (ValueError, TypeError) as e:
                case["rows"] = None
                case["error"] = type(e).__name__
            cases.append(case)
    return cases


def main():
    julian_date = julian_date_class(sys.argv[1])
    out = {
        "cftime": cftime.__version__,
        "xarray": xr.__version__,
        "upstream": "m2lines/Samudra 018a6a7 src/samudra/config.py JulianDate",
        "dates": date_cases(),
        "axes": axes(),
        "selections": selection_cases(julian_date),
    }
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
