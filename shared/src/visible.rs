//! Text from other people made safe to show: a DAG name, a heartbeat
//! message or a client's name may hold terminal escapes (`ESC ] 0;…`
//! retitles the window, `ESC [ 2J` clears it) or newlines that would forge
//! a line of a table or of axd's log. [`visible`] shows every such
//! character as a visible escape, as `ls -b` and `journalctl` do.
//!
//! What is escaped: the C0 controls (U+0000–U+001F) and DEL, the C1
//! controls (U+0080–U+009F: U+009B alone starts a CSI sequence on many
//! terminals), and the bidirectional overrides and isolates
//! (U+202A–U+202E, U+2066–U+2069), which reorder what is displayed.
//! A backslash stays as it is: the output is for reading, not parsing
//! (`--json` and the API carry the exact text).

use std::borrow::Cow;
use std::fmt;

/// Whether `c` is shown escaped by [`visible`].
pub fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character shown as an escape: `\n`, `\r`,
/// `\t`, `\e` (ESC), `\xNN` for the other C0 controls and DEL, `\u{NNNN}`
/// for the rest. Borrowed when there is nothing to escape.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_visible(&mut out, c);
    }
    Cow::Owned(out)
}

/// Appends `c` to `out`, escaped when [`needs_escape`] says so.
pub fn push_visible(out: &mut String, c: char) {
    use fmt::Write;
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{1b}' => out.push_str("\\e"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Displays a string through [`visible`]: `format!("{}", Visible(name))`.
pub struct Visible<'a>(pub &'a str);

impl fmt::Display for Visible<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Through `pad`, so width and alignment (`{:<20}`) still apply.
        f.pad(&visible(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_and_plain_text_is_borrowed() {
        assert!(matches!(visible("etl nightly / é ✓"), Cow::Borrowed(_)));
        assert_eq!(
            visible("\u{1b}]0;HIJACK\u{7}\u{1b}[2J"),
            "\\e]0;HIJACK\\x07\\e[2J"
        );
        assert_eq!(visible("a\nb\r\tc\u{0}\u{7f}"), "a\\nb\\r\\tc\\x00\\x7f");
        assert_eq!(visible("\u{9b}31m"), "\\u{009b}31m");
        assert_eq!(visible("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(format!("[{:<6}]", Visible("a\u{7}")), "[a\\x07 ]");
    }

    proptest::proptest! {
        #[test]
        fn nothing_escaped_survives(text in ".*") {
            proptest::prop_assert!(!visible(&text).chars().any(needs_escape));
        }
    }
}
