//! docs/job-files.md, "Cron schedules" and "Time zones and daylight-saving
//! time": cron syntax, the dom/dow rule, ISC DST rules in three zones with DST
//! (one with a 30-minute shift), leap days, and rejected expressions; plus a
//! property test against a brute-force search.

use ax_shared::cron::Schedule;
use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn next_n(expr: &str, tz: Tz, from: &str, n: usize) -> Vec<String> {
    Schedule::parse(expr)
        .unwrap()
        .upcoming(utc(from), &tz, n)
        .into_iter()
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect()
}

#[test]
fn table_of_fire_times() {
    use chrono_tz::America::New_York as NY;
    use chrono_tz::Australia::Lord_Howe as LH;
    use chrono_tz::Europe::Berlin as BER;
    use chrono_tz::UTC;
    #[rustfmt::skip]
    let cases: &[(&str, &str, Tz, &str, &[&str])] = &[
        // -- syntax ---------------------------------------------------------
        ("five fields", "*/15 9 * * *", UTC, "2025-06-01T00:00:00Z",
            &["2025-06-01T09:00:00Z", "2025-06-01T09:15:00Z", "2025-06-01T09:30:00Z"]),
        ("seconds field first", "*/20 * * * * *", UTC, "2025-06-01T00:00:00Z",
            &["2025-06-01T00:00:20Z", "2025-06-01T00:00:40Z", "2025-06-01T00:01:00Z"]),
        ("lists and ranges", "0 8-9,17 * * *", UTC, "2025-06-01T00:00:00Z",
            &["2025-06-01T08:00:00Z", "2025-06-01T09:00:00Z", "2025-06-01T17:00:00Z"]),
        ("names", "0 9 * JAN MON", UTC, "2025-01-01T00:00:00Z",
            &["2025-01-06T09:00:00Z", "2025-01-13T09:00:00Z", "2025-01-20T09:00:00Z"]),
        ("dow 7 is sunday", "0 0 * * 7", UTC, "2025-06-02T00:00:00Z",
            &["2025-06-08T00:00:00Z", "2025-06-15T00:00:00Z"]),
        ("dow 0 is sunday", "0 0 * * 0", UTC, "2025-06-02T00:00:00Z",
            &["2025-06-08T00:00:00Z"]),
        ("dom OR dow when both restricted", "0 0 13 * FRI", UTC, "2025-06-01T00:00:00Z",
            &["2025-06-06T00:00:00Z", "2025-06-13T00:00:00Z", "2025-06-20T00:00:00Z", "2025-06-27T00:00:00Z", "2025-07-04T00:00:00Z", "2025-07-11T00:00:00Z", "2025-07-13T00:00:00Z"]),
        ("dom only", "0 0 13 * *", UTC, "2025-06-01T00:00:00Z",
            &["2025-06-13T00:00:00Z", "2025-07-13T00:00:00Z"]),
        ("@hourly", "@hourly", UTC, "2025-06-01T00:30:00Z", &["2025-06-01T01:00:00Z"]),
        ("@daily", "@daily", UTC, "2025-06-01T00:30:00Z", &["2025-06-02T00:00:00Z"]),
        ("@weekly", "@weekly", UTC, "2025-06-02T00:00:00Z", &["2025-06-08T00:00:00Z"]),
        ("@monthly", "@monthly", UTC, "2025-06-02T00:00:00Z", &["2025-07-01T00:00:00Z"]),
        ("@yearly", "@yearly", UTC, "2025-06-02T00:00:00Z", &["2026-01-01T00:00:00Z"]),
        ("last day of month", "0 0 L * *", UTC, "2025-02-01T00:00:00Z", &["2025-02-28T00:00:00Z", "2025-03-31T00:00:00Z"]),
        ("strictly after", "0 12 * * *", UTC, "2025-06-01T12:00:00Z", &["2025-06-02T12:00:00Z"]),
        ("strictly after, sub-second", "* * * * * *", UTC, "2025-06-01T12:00:00.300Z", &["2025-06-01T12:00:01Z"]),
        // -- leap days -----------------------------------------------------------
        ("feb 29 waits for a leap year", "0 0 29 2 *", UTC, "2025-01-01T00:00:00Z",
            &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]),
        ("feb 29 skips 2100", "0 0 29 2 *", UTC, "2096-03-01T00:00:00Z", &["2104-02-29T00:00:00Z"]),
        // -- New York: spring forward 2025-03-09 02:00 EST -> 03:00 EDT -----------
        ("NY fixed slot in gap fires at gap end", "30 2 * * *", NY, "2025-03-08T12:00:00Z",
            &["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"]),
        ("NY several slots in one gap fire once", "0,15,30,45 2 * * *", NY, "2025-03-09T05:00:00Z",
            &["2025-03-09T07:00:00Z", "2025-03-10T06:00:00Z"]),
        ("NY wildcard skips nonexistent times", "30 * * * *", NY, "2025-03-09T05:00:00Z",
            &["2025-03-09T05:30:00Z", "2025-03-09T06:30:00Z", "2025-03-09T07:30:00Z"]),
        ("NY wildcard hour in gap does not fire", "*/30 2 * * *", NY, "2025-03-09T05:00:00Z",
            &["2025-03-10T06:00:00Z", "2025-03-10T06:30:00Z"]),
        // -- New York: fall back 2025-11-02 02:00 EDT -> 01:00 EST ---------------
        ("NY fixed repeated time fires at first pass", "30 1 * * *", NY, "2025-11-01T12:00:00Z",
            &["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"]),
        ("NY fixed repeated: between passes waits a day", "30 1 * * *", NY, "2025-11-02T06:00:00Z",
            &["2025-11-03T06:30:00Z"]),
        ("NY wildcard fires in both passes", "30 * * * *", NY, "2025-11-02T04:00:00Z",
            &["2025-11-02T04:30:00Z", "2025-11-02T05:30:00Z", "2025-11-02T06:30:00Z", "2025-11-02T07:30:00Z"]),
        ("NY wildcard minute, fixed hour, both passes", "0,30 1 * * *", NY, "2025-11-02T04:00:00Z",
            &["2025-11-02T05:00:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:00:00Z"]),
        ("NY star minute in repeated hour: both passes", "*/30 1 * * *", NY, "2025-11-02T04:00:00Z",
            &["2025-11-02T05:00:00Z", "2025-11-02T05:30:00Z", "2025-11-02T06:00:00Z", "2025-11-02T06:30:00Z", "2025-11-03T06:00:00Z"]),
        // -- Berlin: 2025-03-30 02:00 CET -> 03:00 CEST; 2025-10-26 03:00 CEST -> 02:00 CET
        ("Berlin fixed in gap", "15 2 * * *", BER, "2025-03-29T12:00:00Z",
            &["2025-03-30T01:00:00Z", "2025-03-31T00:15:00Z"]),
        ("Berlin fixed repeated", "15 2 * * *", BER, "2025-10-25T12:00:00Z",
            &["2025-10-26T00:15:00Z", "2025-10-27T01:15:00Z"]),
        ("Berlin wildcard repeated", "15 * * * *", BER, "2025-10-25T23:30:00Z",
            &["2025-10-26T00:15:00Z", "2025-10-26T01:15:00Z", "2025-10-26T02:15:00Z"]),
        ("Berlin daily at 8 across the change", "0 8 * * *", BER, "2025-03-29T12:00:00Z",
            &["2025-03-30T06:00:00Z", "2025-03-31T06:00:00Z"]),
        // -- Lord Howe: 30-minute DST. 2025-04-06 02:00 (+11) -> 01:30 (+10:30);
        //    2025-10-05 02:00 (+10:30) -> 02:30 (+11)
        ("Lord Howe fixed in 30-min gap", "15 2 * * *", LH, "2025-10-04T00:00:00Z",
            &["2025-10-04T15:30:00Z", "2025-10-05T15:15:00Z"]),
        ("Lord Howe fixed repeated half hour", "45 1 * * *", LH, "2025-04-05T00:00:00Z",
            &["2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z"]),
        ("Lord Howe wildcard repeated half hour", "45 * * * *", LH, "2025-04-05T13:00:00Z",
            &["2025-04-05T13:45:00Z", "2025-04-05T14:45:00Z", "2025-04-05T15:15:00Z", "2025-04-05T16:15:00Z"]),
        ("Lord Howe wildcard skips gap", "*/15 2 * * *", LH, "2025-10-04T15:00:00Z",
            &["2025-10-04T15:30:00Z", "2025-10-04T15:45:00Z", "2025-10-05T15:00:00Z"]),
    ];
    for (what, expr, tz, from, want) in cases {
        let got = next_n(expr, *tz, from, want.len());
        assert_eq!(&got, want, "{what}: {expr} in {tz} after {from}");
    }
}

#[test]
fn fixed_time_classification_follows_isc() {
    for (expr, fixed) in [
        ("30 2 * * *", true),
        ("0,30 1-3 * * *", true),
        ("@daily", true),
        ("*/5 2 * * *", false),
        ("30 * * * *", false),
        ("@hourly", false),
        ("* 30 2 * * *", true),
    ] {
        assert_eq!(
            Schedule::parse(expr).unwrap().is_fixed_time(),
            fixed,
            "{expr}"
        );
    }
}

#[test]
fn rejected_expressions_name_the_problem() {
    for (expr, needle) in [
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 2 *", "never fires"),
        ("*/0 * * * *", ""),
        ("60 * * * *", ""),
        ("* 24 * * *", ""),
        ("* * *", "3 fields"),
        ("* * * * * * * *", "8 fields"),
        ("", "empty"),
        ("@boot", "unknown macro"),
        ("a b c d e", ""),
        ("0 0 * 13 *", ""),
        ("5-1/0 * * * *", ""),
    ] {
        let err = Schedule::parse(expr).expect_err(expr);
        assert_eq!(err.expr, expr);
        assert!(err.reason.contains(needle), "{expr}: {}", err.reason);
        assert!(err.to_string().contains("bad cron"), "{err}");
    }
}

/// Brute force, minute by minute, applying the rules of docs/job-files.md,
/// "Time zones and daylight-saving time", literally.
fn brute_next(
    s: &Schedule,
    after: DateTime<Utc>,
    tz: &Tz,
    horizon_min: i64,
) -> Option<DateTime<Utc>> {
    let start = Utc.timestamp_opt(after.timestamp() / 60 * 60, 0).unwrap();
    if s.is_fixed_time() {
        // Every matching wall-clock minute near the range, mapped to its instant.
        let local_start = start.with_timezone(tz).naive_local() - Duration::hours(4);
        let mut best: Option<DateTime<Utc>> = None;
        for m in 0..horizon_min + 480 {
            let slot: NaiveDateTime = local_start + Duration::minutes(m);
            if !s.matches_wall_clock(slot) {
                continue;
            }
            let instant = match tz.from_local_datetime(&slot) {
                LocalResult::Single(t) => t.with_timezone(&Utc),
                LocalResult::Ambiguous(a, _) => a.with_timezone(&Utc),
                LocalResult::None => {
                    // first instant whose wall clock is past the slot
                    let mut i = start - Duration::hours(30);
                    while i.with_timezone(tz).naive_local() <= slot {
                        i += Duration::minutes(1);
                    }
                    // step back to the exact transition minute
                    i
                }
            };
            if instant > after && best.is_none_or(|b| instant < b) {
                best = Some(instant);
            }
        }
        best
    } else {
        (1..=horizon_min)
            .map(|m| start + Duration::minutes(m))
            .find(|i| *i > after && s.matches_wall_clock(i.with_timezone(tz).naive_local()))
    }
}

fn field(max: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        (1..=max.min(30)).prop_map(|s| format!("*/{s}")),
        (0..max).prop_map(|v| v.to_string()),
        (0..max, 0..max).prop_map(|(a, b)| format!("{},{}", a.min(b), a.max(b))),
        (0..max, 0..max, 1..5u32).prop_map(|(a, b, s)| format!("{}-{}/{s}", a.min(b), a.max(b))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn next_fire_matches_brute_force_and_increases(
        minute in field(60),
        hour in field(24),
        zone in prop_oneof![Just(chrono_tz::UTC), Just(chrono_tz::America::New_York), Just(chrono_tz::Australia::Lord_Howe)],
        // around the 2025 DST changes of those zones, and an ordinary day
        start in prop_oneof![
            Just("2025-03-08T20:00:00Z"), Just("2025-11-01T20:00:00Z"),
            Just("2025-04-05T06:00:00Z"), Just("2025-10-04T06:00:00Z"), Just("2025-06-10T00:00:00Z")],
        offset_min in 0i64..1440,
    ) {
        let expr = format!("{minute} {hour} * * *");
        let s = Schedule::parse(&expr).unwrap();
        let after = utc(start) + Duration::minutes(offset_min) + Duration::seconds(7);
        let mut cursor = after;
        for _ in 0..4 {
            let got = s.next_after(cursor, &zone);
            let want = brute_next(&s, cursor, &zone, 3 * 1440);
            prop_assert_eq!(got, want, "{} in {} after {}", expr, zone, cursor);
            let Some(t) = got else { break };
            prop_assert!(t > cursor);
            cursor = t;
        }
    }

    #[test]
    fn parser_never_panics(text in "[0-9*/,#LW@a-zA-Z -]{0,40}") {
        let _ = Schedule::parse(&text);
    }
}

/// Inputs the `cron` fuzz target found (`tests/fuzz_regressions/cron/`:
/// a zone byte, then the expression): croner took an empty list item as a
/// field matching nothing, and the never-fires search walked 401 years
/// second by second (5 s). Now refused at once, naming the field.
#[test]
fn fuzz_regressions_empty_list_items_are_refused_at_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/cron");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let expr = String::from_utf8_lossy(&bytes[1..]).into_owned();
        // Refused before croner's search is reached.
        let e = Schedule::parse(&expr).unwrap_err();
        assert!(
            e.reason.contains("empty list item"),
            "{expr:?}: {}",
            e.reason
        );
        n += 1;
    }
    assert!(n >= 2);
    for expr in ["1,,2 * * * *", "0 0 1, * *", "0 0 * * ,MON"] {
        let e = Schedule::parse(expr).unwrap_err();
        assert!(e.reason.contains("empty list item"), "{expr}: {}", e.reason);
    }
}

#[test]
fn reboot_is_a_schedule_with_no_time_of_day() {
    let s = Schedule::parse("@reboot").unwrap();
    assert!(s.is_at_boot());
    assert!(!s.is_fixed_time());
    assert!(
        s.upcoming(utc("2026-03-01T00:00:00Z"), &chrono_tz::UTC, 5)
            .is_empty()
    );
    assert!(!Schedule::parse("@daily").unwrap().is_at_boot());
}

#[test]
fn a_day_field_starting_with_a_star_makes_cron_match_both_day_fields() {
    // Vixie cron: `*/10` is not a restriction for the either-day rule.
    assert_eq!(
        next_n("0 0 */10 * MON", chrono_tz::UTC, "2026-01-01T00:00:00Z", 1),
        vec!["2026-05-11T00:00:00Z"]
    );
    // Both restricted: either day.
    assert_eq!(
        next_n("0 0 1,15 * MON", chrono_tz::UTC, "2026-01-01T00:00:00Z", 3),
        vec![
            "2026-01-05T00:00:00Z",
            "2026-01-12T00:00:00Z",
            "2026-01-15T00:00:00Z"
        ]
    );
}
