//! Any text as a cron expression, and any accepted one asked for its next
//! fire times in zones with DST gaps and folds: no panic, no hang, and the
//! times strictly increase.
#![no_main]
use ax_shared::cron::{Schedule, parse_zone};
use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;

const ZONES: &[&str] = &["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let zone = ZONES[data[0] as usize % ZONES.len()];
    let Ok(text) = std::str::from_utf8(&data[1..]) else {
        return;
    };
    let Ok(schedule) = Schedule::parse(text) else {
        return;
    };
    let tz = parse_zone(zone).expect("known zone");
    let mut at: DateTime<Utc> = DateTime::from_timestamp(1_700_000_000 + (data[0] as i64) * 86_400 * 3, 0).unwrap();
    for _ in 0..4 {
        match schedule.next_after(at, &tz) {
            Some(next) => {
                assert!(next > at, "{text:?} in {zone}: {next} not after {at}");
                at = next;
            }
            None => break,
        }
    }
});
