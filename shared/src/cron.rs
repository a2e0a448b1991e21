//! Cron schedules with the time-zone rules of docs/job-files.md, "Time zones
//! and daylight-saving time".
//!
//! Parsing and wall-clock matching come from `croner` (5 or 6 fields, names,
//! steps, lists, `L`/`W`/`#`, `@` macros, the classic day-of-month OR
//! day-of-week rule). croner's own DST handling calls an expression
//! "fixed-time" only when seconds, minutes and hours are single values, while
//! ax follows ISC cron: fixed-time means neither the minute nor the hour field
//! contains `*`. So croner is only asked for the next matching *wall-clock*
//! time (searched in UTC, where no DST exists), and this module maps wall-clock
//! times to instants itself:
//!
//! * fixed-time: a local time in a spring-forward gap fires once at the first
//!   instant after the gap; a repeated local time fires at its first
//!   occurrence only. Several slots in one gap map to the same instant and so
//!   fire once.
//! * otherwise the expression follows real time: it fires whenever the wall
//!   clock shows a matching time, both passes of a repeated hour included, and
//!   never for local times that do not exist.
//!
//! `@reboot` is no time of day: it fires once per boot of the machine
//! (docs/job-files.md, "Schedules"), which the engine decides from the
//! kernel's boot id; here it has no fire times.

use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};

/// A parsed, validated cron expression.
#[derive(Clone, Debug)]
pub struct Schedule {
    source: String,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    /// Fire times on the wall clock (boxed: a `croner::Cron` is large and
    /// `Boot` holds nothing).
    Clock {
        cron: Box<croner::Cron>,
        fixed_time: bool,
    },
    /// `@reboot`: once per boot of the machine.
    Boot,
}

/// Why an expression was rejected; `Display` names the expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad cron {expr:?}: {reason}")]
pub struct CronError {
    pub expr: String,
    pub reason: String,
}

/// Upper bound on segment hops and candidate checks in one search. Real
/// expressions need a handful; the bound only turns a bug into `None`
/// instead of a hang.
const SEARCH_STEPS: usize = 100_000;

impl Schedule {
    /// Parses and validates `expr`. Rejects malformed fields and expressions
    /// that can never fire (`0 0 31 2 *`).
    pub fn parse(expr: &str) -> Result<Schedule, CronError> {
        let err = |reason: String| CronError {
            expr: expr.to_string(),
            reason,
        };
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@reboot" => {
                return Ok(Schedule {
                    source: trimmed.to_string(),
                    kind: Kind::Boot,
                });
            }
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            m if m.starts_with('@') => {
                return Err(err(format!(
                    "unknown macro {trimmed}; use @reboot, @hourly, @daily, @weekly, @monthly or @yearly"
                )));
            }
            _ => trimmed.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (minute, hour, day_of_month, day_of_week) = match fields.len() {
            5 => (fields[0], fields[1], fields[2], fields[4]),
            6 => (fields[1], fields[2], fields[3], fields[5]),
            0 => return Err(err("empty expression".into())),
            n => {
                return Err(err(format!(
                    "{n} fields; expected 5 (min hour dom month dow) or 6 (sec min hour dom month dow)"
                )));
            }
        };
        // croner takes an empty list item ("," or "1,,2") as a field that
        // matches nothing; the never-fires search then walks 401 years
        // second by second (5 s for ", * * * * *", found by fuzzing).
        let names: &[&str] = if fields.len() == 6 {
            &[
                "second",
                "minute",
                "hour",
                "day-of-month",
                "month",
                "day-of-week",
            ]
        } else {
            &["minute", "hour", "day-of-month", "month", "day-of-week"]
        };
        for (field, name) in fields.iter().zip(names) {
            if field.split(',').any(str::is_empty) {
                return Err(err(format!(
                    "{name} field {field:?} has an empty list item"
                )));
            }
        }
        // Cron's day rule: a day matching either day field fires only when
        // both are restricted; a field starting with `*` (`*/10` too) is
        // not, and then a day must match both (Vixie cron's DOM_STAR and
        // DOW_STAR). croner would read `*/10` as restricted.
        let starred_day = day_of_month.starts_with('*') || day_of_week.starts_with('*');
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .dom_and_dow(starred_day)
            .build();
        let cron = parser
            .parse(&expanded)
            .map_err(|e| err(describe_croner_error(&e)))?;
        let schedule = Schedule {
            source: trimmed.to_string(),
            kind: Kind::Clock {
                cron: Box::new(cron),
                fixed_time: !minute.contains('*') && !hour.contains('*'),
            },
        };
        // The Gregorian calendar repeats every 400 years, so an expression
        // with no wall-clock match in 401 years never matches at all. The
        // window is the last 401 years croner searches (it stops at
        // YEAR_UPPER_LIMIT, 5000): from 2000 a never-matching expression
        // made croner walk 3,000 years (~1 ms; found by fuzzing).
        let origin = NaiveDate::from_ymd_opt(croner::YEAR_UPPER_LIMIT - 401, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .expect("valid constant date");
        match schedule.next_wall_clock(origin, true) {
            Some(t) if t < origin + Duration::days(401 * 366) => Ok(schedule),
            _ => Err(err("never fires (no matching date exists)".into())),
        }
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether ISC cron's fixed-time DST rules apply (no `*` in minute/hour).
    pub fn is_fixed_time(&self) -> bool {
        matches!(
            self.kind,
            Kind::Clock {
                fixed_time: true,
                ..
            }
        )
    }

    /// Whether this is `@reboot`, which fires once per boot of the machine
    /// and never at a time of day.
    pub fn is_at_boot(&self) -> bool {
        matches!(self.kind, Kind::Boot)
    }

    /// Whether the wall-clock time `local` matches the expression.
    pub fn matches_wall_clock(&self, local: NaiveDateTime) -> bool {
        match &self.kind {
            Kind::Clock { cron, .. } => cron
                .is_time_matching(&Utc.from_utc_datetime(&local))
                .unwrap_or(false),
            Kind::Boot => false,
        }
    }

    /// The first fire instant strictly after `after`, in time zone `tz`.
    /// `None` only if nothing fires before the year 5000, and for
    /// `@reboot`.
    pub fn next_after<Z: TimeZone>(&self, after: DateTime<Utc>, tz: &Z) -> Option<DateTime<Utc>> {
        match self.kind {
            Kind::Clock {
                fixed_time: true, ..
            } => self.next_fixed(after, tz),
            Kind::Clock { .. } => self.next_real_time(after, tz),
            Kind::Boot => None,
        }
    }

    /// The next `n` fire instants strictly after `after`.
    pub fn upcoming<Z: TimeZone>(
        &self,
        after: DateTime<Utc>,
        tz: &Z,
        n: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut cursor = after;
        while out.len() < n {
            match self.next_after(cursor, tz) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// Next matching wall-clock time at or after (`inclusive`) / strictly
    /// after `from`, at whole-second resolution, ignoring time zones.
    fn next_wall_clock(&self, from: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let Kind::Clock { cron, .. } = &self.kind else {
            return None;
        };
        cron.find_next_occurrence(&Utc.from_utc_datetime(&from), inclusive)
            .ok()
            .map(|t| t.naive_utc())
    }

    fn next_fixed<Z: TimeZone>(&self, after: DateTime<Utc>, tz: &Z) -> Option<DateTime<Utc>> {
        // Mapping wall-clock slots to instants is monotone for fixed-time
        // expressions (gap slots collapse onto the gap's end, repeated ones
        // onto their first pass), so the first slot whose instant lies after
        // `after` is the answer. Start a few hours early in wall-clock terms
        // because the offset at the answer may differ from the offset now.
        let local_now = after.naive_utc() + offset_at(tz, after);
        let mut slot = self.next_wall_clock(local_now - Duration::hours(3), true)?;
        for _ in 0..SEARCH_STEPS {
            if let Some(instant) = resolve_fixed(tz, slot)
                && instant > after
            {
                return Some(instant);
            }
            slot = self.next_wall_clock(slot, false)?;
        }
        None
    }

    fn next_real_time<Z: TimeZone>(&self, after: DateTime<Utc>, tz: &Z) -> Option<DateTime<Utc>> {
        // Walk real time in segments of constant UTC offset. Within a segment
        // wall-clock time and real time advance together, so the next match
        // is the next wall-clock match; if it lies beyond the segment's end,
        // continue from the transition (inclusive: the wall clock shows a new
        // time there).
        let mut t = after;
        let mut inclusive = false;
        for _ in 0..SEARCH_STEPS {
            let offset = offset_at(tz, t);
            let local = t.naive_utc() + offset;
            let slot = self.next_wall_clock(local, inclusive)?;
            let candidate = Utc.from_utc_datetime(&(slot - offset));
            match next_transition(tz, t, candidate, offset) {
                None => return Some(candidate),
                Some(change) => {
                    t = change;
                    inclusive = true;
                }
            }
        }
        None
    }
}

impl FromStr for Schedule {
    type Err = CronError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

fn describe_croner_error(e: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match e {
        E::EmptyPattern => "empty expression".into(),
        E::InvalidPattern(m) | E::IllegalCharacters(m) | E::ComponentError(m) => m.clone(),
        other => other.to_string(),
    }
}

/// The UTC offset in force at instant `t`.
fn offset_at<Z: TimeZone>(tz: &Z, t: DateTime<Utc>) -> Duration {
    let secs = tz
        .offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc();
    Duration::seconds(i64::from(secs))
}

/// The instant a fixed-time slot fires at: its only or first occurrence, or
/// the end of the gap it falls into.
fn resolve_fixed<Z: TimeZone>(tz: &Z, slot: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&slot) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Some(a.with_timezone(&Utc).min(b.with_timezone(&Utc))),
        LocalResult::None => gap_end(tz, slot),
    }
}

/// The first instant after the spring-forward gap that contains `slot`.
fn gap_end<Z: TimeZone>(tz: &Z, slot: NaiveDateTime) -> Option<DateTime<Utc>> {
    let before = tz
        .from_local_datetime(&(slot - Duration::hours(24)))
        .earliest()?
        .with_timezone(&Utc);
    let offset_before = offset_at(tz, before);
    // Read with the offset from before the gap, `slot` names an instant that
    // lies past the transition: the wall clock had already jumped over it.
    let past = Utc.from_utc_datetime(&(slot - offset_before));
    Some(first_change(tz, before, past, offset_before))
}

/// The first instant in `(from, until]` whose offset differs from `offset`,
/// if any. Probes day by day: tz transitions are weeks apart, never two in
/// one day.
fn next_transition<Z: TimeZone>(
    tz: &Z,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    offset: Duration,
) -> Option<DateTime<Utc>> {
    let mut lo = from;
    loop {
        let probe = (lo + Duration::days(1)).min(until);
        if probe <= lo {
            return None;
        }
        if offset_at(tz, probe) != offset {
            return Some(first_change(tz, lo, probe, offset));
        }
        if probe >= until {
            return None;
        }
        lo = probe;
    }
}

/// Binary search, to the second, for the first instant in `(lo, hi]` whose
/// offset differs from `offset`, given that `hi`'s does.
fn first_change<Z: TimeZone>(
    tz: &Z,
    lo: DateTime<Utc>,
    hi: DateTime<Utc>,
    offset: Duration,
) -> DateTime<Utc> {
    let at = |s: i64| Utc.timestamp_opt(s, 0).single().expect("in range");
    let mut lo_s = lo.timestamp();
    let mut hi_s = hi.timestamp() + i64::from(hi.timestamp_subsec_nanos() > 0);
    while hi_s - lo_s > 1 {
        let mid = lo_s + (hi_s - lo_s) / 2;
        if offset_at(tz, at(mid)) == offset {
            lo_s = mid;
        } else {
            hi_s = mid;
        }
    }
    at(hi_s)
}

/// Resolves a time-zone name: an IANA name, `UTC`, or `local` (the `TZ`
/// variable, else `/etc/localtime`, else UTC).
pub fn parse_zone(name: &str) -> Result<chrono_tz::Tz, String> {
    if name.eq_ignore_ascii_case("local") {
        return Ok(local_zone());
    }
    chrono_tz::Tz::from_str(name).map_err(|_| format!("unknown time zone {name:?} (use an IANA name like \"Europe/Berlin\", \"UTC\" or \"local\")"))
}

fn local_zone() -> chrono_tz::Tz {
    if let Ok(tz) = std::env::var("TZ")
        && let Ok(zone) = chrono_tz::Tz::from_str(tz.trim_start_matches(':'))
    {
        return zone;
    }
    if let Ok(target) = std::fs::read_link("/etc/localtime") {
        let target = target.to_string_lossy().into_owned();
        if let Some((_, name)) = target.split_once("zoneinfo/")
            && let Ok(zone) = chrono_tz::Tz::from_str(name)
        {
            return zone;
        }
    }
    if let Ok(name) = std::fs::read_to_string("/etc/timezone")
        && let Ok(zone) = chrono_tz::Tz::from_str(name.trim())
    {
        return zone;
    }
    chrono_tz::UTC
}
