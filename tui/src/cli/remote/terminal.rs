//! A job's output shown on a terminal (`ax logs` when stdout is one).
//!
//! The output is written by the job, which may be another user's or may
//! print what it was fed: an escape sequence in it would act on the
//! reader's terminal (retitle it, clear it, move the cursor, set the
//! clipboard with OSC 52). On a terminal, `ax logs` passes what `less -R`
//! passes: text, newlines, tabs, CR LF line ends and SGR sequences
//! (`ESC [ … m`: colours and bold), and shows every other control
//! character visibly (`\e]0;…`, `\x07`, `\r`). To a pipe or a file the
//! output is written byte for byte (`ax --help`, "Output", in docs/cli.md).

use ax_shared::visible::{needs_escape, push_visible};

/// The longest SGR sequence held back at the end of one chunk to be
/// completed by the next; a longer one is shown escaped.
const MAX_HELD: usize = 64;

/// Filters one attempt's output, chunk by chunk: an escape sequence or a
/// CR split between two chunks is judged once the next arrives.
#[derive(Default)]
pub(super) struct TerminalText {
    held: String,
}

impl TerminalText {
    /// The part of `held + chunk` that is safe to print now.
    pub(super) fn push(&mut self, chunk: &str) -> String {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(chunk);
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(c) = rest.chars().next() {
            match c {
                '\u{1b}' => match sgr_len(rest) {
                    Some(Ok(n)) => {
                        out.push_str(&rest[..n]);
                        rest = &rest[n..];
                        continue;
                    }
                    Some(Err(())) if rest.len() < MAX_HELD => {
                        self.held = rest.to_string();
                        return out;
                    }
                    _ => push_visible(&mut out, c),
                },
                '\r' if rest.len() == 1 => {
                    self.held = rest.to_string();
                    return out;
                }
                '\r' if rest[1..].starts_with('\n') => out.push('\r'),
                '\n' | '\t' => out.push(c),
                c if needs_escape(c) => push_visible(&mut out, c),
                c => out.push(c),
            }
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// What is still held at the end of the output, shown escaped.
    pub(super) fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        ax_shared::visible::visible(&held).into_owned()
    }
}

/// At an ESC: `Some(Ok(len))` for a whole SGR sequence (`ESC [ 0-9;: m`),
/// `Some(Err(()))` when `text` ends inside what may still become one,
/// `None` when it is something else.
fn sgr_len(text: &str) -> Option<Result<usize, ()>> {
    let bytes = text.as_bytes();
    match bytes.get(1) {
        None => return Some(Err(())),
        Some(b'[') => {}
        Some(_) => return None,
    }
    for (i, b) in bytes.iter().enumerate().skip(2) {
        match b {
            b'0'..=b'9' | b';' | b':' => {}
            b'm' => return Some(Ok(i + 1)),
            _ => return None,
        }
    }
    Some(Err(()))
}

#[cfg(test)]
mod tests {
    use super::TerminalText;

    fn shown(chunks: &[&str]) -> String {
        let mut t = TerminalText::default();
        let mut out: String = chunks.iter().map(|c| t.push(c)).collect();
        out.push_str(&t.finish());
        out
    }

    #[test]
    fn colours_pass_and_other_escapes_show() {
        assert_eq!(
            shown(&["\u{1b}[1;31mred\u{1b}[0m ok\r\n\tnext\n"]),
            "\u{1b}[1;31mred\u{1b}[0m ok\r\n\tnext\n"
        );
        assert_eq!(
            shown(&["\u{1b}]0;HIJACK\u{7}\u{1b}[2J\u{1b}[H50%\r60%\n"]),
            "\\e]0;HIJACK\\x07\\e[2J\\e[H50%\\r60%\n"
        );
    }

    #[test]
    fn a_sequence_split_between_chunks_is_judged_whole() {
        assert_eq!(
            shown(&["a\u{1b}[3", "2mgreen\r", "\n"]),
            "a\u{1b}[32mgreen\r\n"
        );
        assert_eq!(shown(&["a\u{1b}[3", "J"]), "a\\e[3J");
        assert_eq!(shown(&["end\u{1b}"]), "end\\e");
    }
}
