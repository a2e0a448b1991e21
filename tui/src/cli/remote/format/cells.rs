//! The cells of a table: cut text, sizes and ages.

use ax_shared::time::{Timestamp, elapsed_coarse};

/// `s` cut to `n` characters, the last one `…` when it was longer.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// A fire time as people read it, in the DAG's zone with its offset and
/// name: `2026-12-02 09:00 +01:00 Europe/Berlin` (seconds shown when not
/// 0). A zone ax does not know (a newer axd's) shows UTC.
pub(crate) fn in_zone(t: Timestamp, zone: Option<&str>) -> String {
    let Some(t) = t.to_datetime() else {
        return "-".into();
    };
    let zone: chrono_tz::Tz = zone.and_then(|z| z.parse().ok()).unwrap_or(chrono_tz::UTC);
    let local = t.with_timezone(&zone);
    let clock = if chrono::Timelike::second(&local) == 0 {
        "%Y-%m-%d %H:%M %:z"
    } else {
        "%Y-%m-%d %H:%M:%S %:z"
    };
    format!("{} {}", local.format(clock), zone.name())
}

/// Bytes in binary units with one decimal (`1.5 MiB`).
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// How long ago `created` was, coarsely (`5m`), or `-`.
pub(crate) fn age(created: Option<Timestamp>) -> String {
    match created {
        Some(t) => elapsed_coarse((chrono::Utc::now().timestamp_millis() - t.millis()) / 1000),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, in_zone};
    use ax_shared::time::Timestamp;

    #[test]
    fn fire_times_show_in_their_zone_with_offset() {
        // 2026-12-02T08:00:00Z
        let t = Timestamp::from_millis(1_796_198_400_000);
        assert_eq!(
            in_zone(t, Some("Europe/Berlin")),
            "2026-12-02 09:00 +01:00 Europe/Berlin"
        );
        assert_eq!(in_zone(t, Some("UTC")), "2026-12-02 08:00 +00:00 UTC");
        assert_eq!(in_zone(t, None), "2026-12-02 08:00 +00:00 UTC");
        let summer = Timestamp::from_millis(1_780_304_430_000);
        assert_eq!(
            in_zone(summer, Some("America/New_York")),
            "2026-06-01 05:00:30 -04:00 America/New_York"
        );
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
