//! Human durations as job files and the config write them: `"90s"`, `"10m"`,
//! `"1h30m"`, `"500ms"`. Parsing is delegated to `humantime`; this module only
//! adds the error wording and the formatting ax uses in its output.

use std::time::Duration;

/// Parses `"90s"`, `"10m"`, `"1h30m"`, `"500ms"`.
///
/// A bare number is rejected on purpose: `timeout = "30"` is ambiguous
/// (seconds? minutes?) and a job file should say what it means.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration".into());
    }
    if trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "bad duration {text:?}: add a unit, e.g. \"{trimmed}s\" or \"{trimmed}m\""
        ));
    }
    humantime::parse_duration(trimmed)
        .map_err(|e| format!("bad duration {text:?}: {e} (use e.g. \"90s\", \"10m\", \"1h30m\")"))
}

/// Formats a duration compactly: `1h30m`, `45s`, `250ms`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400u64), ("h", 3600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 || out.is_empty() {
        out.push_str(&format!("{secs}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_job_files_use() {
        let cases = [
            ("90s", 90_000),
            ("10m", 600_000),
            ("1h30m", 5_400_000),
            ("500ms", 500),
            ("1h 30m", 5_400_000),
            ("2d", 172_800_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text).unwrap().as_millis(), ms, "{text}");
        }
    }

    #[test]
    fn rejects_bad_durations_with_the_text() {
        for text in ["", "30", "ten minutes", "5 parsecs", "-1s"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("duration"), "{text}: {err}");
        }
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
        assert_eq!(format_duration(Duration::from_secs(0)), "0s");
    }
}
