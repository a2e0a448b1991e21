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
    use super::human_bytes;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
