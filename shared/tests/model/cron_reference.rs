//! The next 20 fire times of ax's schedules against a reference written
//! here from cron's rules: a walk through local wall time, minute by
//! minute, over the crontab fields as Vixie cron and cronie read them,
//! with the DST rule docs/job-files.md documents ("Time zones and
//! daylight-saving time", ISC cron's):
//!
//! * fixed-time (neither minute nor hour starts with `*`): a wall time in
//!   a spring-forward gap fires once, at the first instant after the gap;
//!   a repeated wall time fires at its first occurrence only;
//! * otherwise every instant whose wall clock matches fires: both passes
//!   of a repeated hour, nothing for wall times that do not exist.
//!
//! Day of month and day of week: when both are restricted (neither starts
//! with `*`), a day matching either fires; else both must match (cron's
//! `DOM_STAR`/`DOW_STAR` rule).
//!
//! The schedules are those of the migration crontab (`ax import cron`'s
//! fixture) and tricky ones, in Berlin, New York and UTC, from just before
//! each DST change of 2026 and 2027. The time-zone data is chrono-tz's,
//! as ax's; only the cron rules are the reference's own.

use std::collections::BTreeSet;

use ax_shared::cron::Schedule;
use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// A crontab line's five fields as cron's bitmaps.
struct Reference {
    minute: Vec<bool>,
    hour: Vec<bool>,
    dom: Vec<bool>,
    month: Vec<bool>,
    dow: Vec<bool>,
    dom_star: bool,
    dow_star: bool,
    fixed_time: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn value(text: &str, names: &[&str], offset: u32) -> u32 {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(text))
        .map(|i| i as u32 + offset)
        .unwrap_or_else(|| text.parse().unwrap_or_else(|_| panic!("bad value {text}")))
}

/// A field's bitmap over `lo..=hi`: lists of `*`, `N`, `A-B`, each with an
/// optional `/STEP`.
fn field(text: &str, lo: u32, hi: u32, names: &[&str], offset: u32) -> Vec<bool> {
    let mut bits = vec![false; hi as usize + 1];
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().unwrap()),
            None => (item, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, offset), value(b, names, offset))
        } else {
            let v = value(range, names, offset);
            (v, v)
        };
        let mut v = a;
        while v <= b {
            bits[v as usize] = true;
            v += step;
        }
    }
    bits
}

impl Reference {
    fn parse(expr: &str) -> Reference {
        let expanded = match expr {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            e => e,
        };
        let f: Vec<&str> = expanded.split_whitespace().collect();
        assert_eq!(f.len(), 5, "{expr}");
        let mut dow = field(f[4], 0, 7, &DAYS, 0);
        // Sunday is 0 or 7.
        if dow[7] {
            dow[0] = true;
        }
        Reference {
            minute: field(f[0], 0, 59, &[], 0),
            hour: field(f[1], 0, 23, &[], 0),
            dom: field(f[2], 1, 31, &[], 0),
            month: field(f[3], 1, 12, &MONTHS, 1),
            dow,
            dom_star: f[2].starts_with('*'),
            dow_star: f[4].starts_with('*'),
            fixed_time: !f[0].starts_with('*') && !f[1].starts_with('*'),
        }
    }

    fn day_matches(&self, d: NaiveDate) -> bool {
        let dom = self.dom[d.day() as usize];
        let dow = self.dow[d.weekday().num_days_from_sunday() as usize];
        self.month[d.month() as usize]
            && if self.dom_star || self.dow_star {
                dom && dow
            } else {
                dom || dow
            }
    }

    fn time_matches(&self, t: NaiveDateTime) -> bool {
        self.minute[t.minute() as usize] && self.hour[t.hour() as usize]
    }

    /// The first `n` fire instants strictly after `after` in `tz`.
    fn next_n(&self, tz: &Tz, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut fires = BTreeSet::new();
        let mut day = after.with_timezone(tz).date_naive() - Duration::days(1);
        loop {
            // Instants of later local days lie beyond this bound (offsets
            // are within ±14 h), so the first n are known.
            let bound =
                Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap()) - Duration::days(2);
            if fires
                .iter()
                .filter(|t| **t > after)
                .nth(n - 1)
                .is_some_and(|t| *t < bound)
            {
                break;
            }
            if self.day_matches(day) {
                for m in 0..24 * 60 {
                    let wall = day.and_hms_opt(0, 0, 0).unwrap() + Duration::minutes(m);
                    if !self.time_matches(wall) {
                        continue;
                    }
                    match tz.from_local_datetime(&wall) {
                        LocalResult::Single(t) => {
                            fires.insert(t.with_timezone(&Utc));
                        }
                        LocalResult::Ambiguous(a, b) => {
                            let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
                            fires.insert(a.min(b));
                            if !self.fixed_time {
                                fires.insert(a.max(b));
                            }
                        }
                        LocalResult::None if self.fixed_time => {
                            fires.insert(after_gap(tz, wall));
                        }
                        LocalResult::None => {}
                    }
                }
            }
            day += Duration::days(1);
        }
        fires.into_iter().filter(|t| *t > after).take(n).collect()
    }
}

/// The first instant after the gap that holds the wall time `wall`: the
/// first later wall minute that exists.
fn after_gap(tz: &Tz, wall: NaiveDateTime) -> DateTime<Utc> {
    let mut w = wall;
    loop {
        w += Duration::minutes(1);
        if let Some(t) = tz.from_local_datetime(&w).earliest() {
            return t.with_timezone(&Utc);
        }
    }
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// The DST changes of 2026 and 2027 in Berlin and New York (UTC instants).
const CHANGES: &[(&str, &str)] = &[
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("Europe/Berlin", "2027-03-28T01:00:00Z"),
    ("Europe/Berlin", "2027-10-31T01:00:00Z"),
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("America/New_York", "2027-03-14T07:00:00Z"),
    ("America/New_York", "2027-11-07T06:00:00Z"),
];

/// The schedules of the migration crontab (`tui/tests/cli/fixtures/cron/`;
/// `@reboot` has no clock slots), then tricky ones.
const EXPRESSIONS: &[&str] = &[
    "17 * * * *",
    "25 6 * * *",
    "*/5 * * * *",
    "30 2 * * 1-5",
    "0 3 * * *",
    "0 */6 * * *",
    "0 */12 * * *",
    "0 9 * * MON-FRI",
    "*/10 * * * *",
    "0 2 * * *",
    "30 2 * * *",
    "30 1 * * *",
    "59 1 * * *",
    "0,30 2 * * *",
    "*/15 2 * * *",
    "0 12 13 * FRI",
    "0 0 1,15 * MON",
    "0 0 */10 * MON",
    "0 8 1-7 * */2",
    "0 0 * * */3",
    "0 0 29 2 *",
    "0 9 * jan,Dec sun-sat",
    "@hourly",
    "@daily",
    "@midnight",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
];

#[test]
fn the_changes_are_real_offset_changes() {
    for (zone, at) in CHANGES {
        let tz: Tz = zone.parse().unwrap();
        let t = utc(at);
        let before = tz.offset_from_utc_datetime(&(t - Duration::seconds(1)).naive_utc());
        let after = tz.offset_from_utc_datetime(&t.naive_utc());
        assert_ne!(before, after, "{zone} at {at}");
    }
}

#[test]
fn next_20_fire_times_equal_the_cron_reference_around_dst_changes() {
    let zones: Vec<Tz> = ["Europe/Berlin", "America/New_York", "UTC"]
        .iter()
        .map(|z| z.parse().unwrap())
        .collect();
    let mut checked = 0;
    for expr in EXPRESSIONS {
        let schedule = Schedule::parse(expr).unwrap();
        let reference = Reference::parse(expr);
        assert_eq!(schedule.is_fixed_time(), reference.fixed_time, "{expr}");
        for tz in &zones {
            for (_, change) in CHANGES {
                // Just before the change, in time for the */5 schedules to
                // reach across it within 20 fires.
                let from = utc(change) - Duration::minutes(90) + Duration::seconds(1);
                let got = schedule.upcoming(from, tz, 20);
                let want = reference.next_n(tz, from, 20);
                assert_eq!(got, want, "{expr:?} in {tz} after {from}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, EXPRESSIONS.len() * 3 * CHANGES.len());
}

#[test]
fn the_reference_follows_the_documented_examples() {
    // docs/job-files.md's examples, through the reference itself.
    let ny: Tz = "America/New_York".parse().unwrap();
    let show = |expr: &str, from: &str, n: usize| -> Vec<String> {
        Reference::parse(expr)
            .next_n(&ny, utc(from), n)
            .iter()
            .map(|t| t.with_timezone(&ny).to_rfc3339())
            .collect()
    };
    assert_eq!(
        show("30 2 * * *", "2025-03-08T12:00:00Z", 2),
        ["2025-03-09T03:00:00-04:00", "2025-03-10T02:30:00-04:00"]
    );
    assert_eq!(
        show("30 1 * * *", "2025-11-01T12:00:00Z", 2),
        ["2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00"]
    );
    assert_eq!(
        show("*/30 * * * *", "2025-11-02T05:00:00Z", 4),
        [
            "2025-11-02T01:30:00-04:00",
            "2025-11-02T01:00:00-05:00",
            "2025-11-02T01:30:00-05:00",
            "2025-11-02T02:00:00-05:00"
        ]
    );
    assert_eq!(
        show("*/30 * * * *", "2025-03-09T06:00:00Z", 3),
        [
            "2025-03-09T01:30:00-05:00",
            "2025-03-09T03:00:00-04:00",
            "2025-03-09T03:30:00-04:00"
        ]
    );
    // The leap day: 2100 is no leap year.
    let leap =
        Reference::parse("0 0 29 2 *").next_n(&chrono_tz::UTC, utc("2096-03-01T00:00:00Z"), 1);
    assert_eq!(leap, [utc("2104-02-29T00:00:00Z")]);
}
