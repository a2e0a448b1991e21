//! The job file of one crontab entry: a single-job file
//! (docs/job-files.md, "Single-job files") written by the `toml` crate's
//! serializer, so no crontab text is ever spliced into TOML quotes by
//! hand, under a header of comments made safe for TOML.

use std::collections::{BTreeMap, HashSet};

use ax_shared::visible::visible;
use serde::Serialize;

/// The keys of an imported job file, in the order they are written.
#[derive(Serialize, Debug, Default, Clone, PartialEq)]
pub(crate) struct JobFile {
    pub schedule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    pub command: String,
    pub timeout: String,
    pub overlap: String,
    pub catchup: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
}

/// `notify = { mail = [...], on = [...] }`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Notify {
    pub mail: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<String>,
}

impl JobFile {
    /// A job with cron's semantics: no timeout, every slot started (even
    /// beside a running one), no catch-up of slots missed while down.
    pub(crate) fn cron_like(schedule: String, command: String) -> JobFile {
        JobFile {
            schedule,
            command,
            timeout: "none".into(),
            overlap: "allow".into(),
            catchup: "none".into(),
            ..JobFile::default()
        }
    }

    /// The file's text: each comment line as a `#` line, then the keys.
    pub(crate) fn render(&self, comments: &[String]) -> Result<String, toml::ser::Error> {
        let mut out = String::new();
        for c in comments {
            for line in c.split('\n') {
                out.push_str(&comment_line(line));
                out.push('\n');
            }
        }
        out.push_str(&toml::to_string(self)?);
        Ok(out)
    }
}

/// `text` as a TOML comment line: TOML allows no control character but tab
/// in a comment, so they are shown as escapes (`\e`, `\x07`), as are the
/// characters that reorder what a terminal displays.
pub(crate) fn comment_line(text: &str) -> String {
    if text.is_empty() {
        "#".into()
    } else {
        format!("# {}", visible(text))
    }
}

/// Longest file stem: a single-job file's job id is its stem, and job ids
/// are at most 64 characters (docs/job-files.md, "Job fields").
const MAX_STEM: usize = 64;

/// A file stem from free text: the characters job ids allow (`A-Z a-z 0-9
/// _ . -`), others made `-`, runs of `-` collapsed, no leading `.` or `-`
/// (hidden and option-like names), at most [`MAX_STEM`] bytes.
pub(crate) fn stem(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
            c
        } else {
            '-'
        };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let trimmed = out.trim_start_matches(['.', '-']).trim_end_matches('-');
    let mut s: String = trimmed.chars().take(MAX_STEM).collect();
    while s.ends_with(['-', '.']) {
        s.pop();
    }
    if s.is_empty() { "job".into() } else { s }
}

/// Hands out file stems unique within one import: the second `root-php`
/// is `root-php-2`.
#[derive(Default)]
pub(crate) struct Names {
    taken: HashSet<String>,
}

impl Names {
    /// The stem for an entry of `user` (if any) running `program`.
    pub(crate) fn take(&mut self, user: Option<&str>, program: &str) -> String {
        let base = stem(&match user {
            Some(u) => format!("{u}-{program}"),
            None => program.to_string(),
        });
        let mut name = base.clone();
        let mut n = 2;
        while !self.taken.insert(name.clone()) {
            let suffix = format!("-{n}");
            let keep = MAX_STEM - suffix.len();
            name = format!("{}{suffix}", &base[..base.len().min(keep)]);
            n += 1;
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NASTY: &[&str] = &[
        "plain",
        "it's \"quoted\"",
        r"back\slash \\ \n \u0041",
        "new\nline\r\nand\ttab",
        "'''triple''' and \"\"\"triple\"\"\"",
        "ends with a quote'",
        "ends with a backslash\\",
        "\u{0}\u{1}\u{7}\u{1b}[31m\u{7f}\u{9b}",
        "unicode é 日本 \u{2028} \u{feff}",
        "# not a comment = \"x\"\n[table]\nkey = 1",
    ];

    #[test]
    fn nasty_strings_round_trip_through_toml() {
        for s in NASTY {
            let mut file = JobFile::cron_like(format!("0 * * * * {s}"), s.to_string());
            file.env.insert(s.to_string(), s.to_string());
            file.notify = Some(Notify {
                mail: vec![s.to_string()],
                on: vec!["output".into()],
            });
            let text = file.render(&[s.to_string(), format!("line: {s}")]).unwrap();
            let back: toml::Table = text
                .parse()
                .unwrap_or_else(|e| panic!("{s:?} wrote TOML that does not parse: {e}\n{text}"));
            assert_eq!(back["command"].as_str(), Some(*s));
            assert_eq!(back["env"][*s].as_str(), Some(*s));
            assert_eq!(back["notify"]["mail"][0].as_str(), Some(*s));
            // Every comment line stays a comment: no key comes from it.
            let keys: Vec<&String> = back.keys().collect();
            assert_eq!(
                keys,
                [
                    "catchup", "command", "env", "notify", "overlap", "schedule", "timeout"
                ]
            );
        }
    }

    #[test]
    fn comments_escape_control_characters() {
        assert_eq!(
            comment_line("a\u{1b}b\tc\u{7f}\u{202e}"),
            r"# a\eb\tc\x7f\u{202e}"
        );
        assert_eq!(comment_line(""), "#");
    }

    #[test]
    fn stems_are_valid_job_ids_and_unique() {
        assert_eq!(stem("www-data-php"), "www-data-php");
        assert_eq!(stem("../.hidden name$"), "hidden-name");
        assert_eq!(stem("@@@"), "job");
        assert_eq!(stem(&"x".repeat(100)).len(), 64);
        let mut names = Names::default();
        assert_eq!(names.take(Some("root"), "cron.daily"), "root-cron.daily");
        assert_eq!(names.take(Some("root"), "cron.daily"), "root-cron.daily-2");
        assert_eq!(names.take(Some("root"), "cron.daily"), "root-cron.daily-3");
        assert_eq!(names.take(None, "poll-feed"), "poll-feed");
        let long = "y".repeat(80);
        assert_eq!(names.take(None, &long).len(), 64);
        let second = names.take(None, &long);
        assert!(second.ends_with("-2") && second.len() == 64, "{second}");
        for s in NASTY {
            let id = stem(s);
            assert!(ax_shared::jobfile::valid_id(&id), "{s:?} -> {id:?}");
        }
    }
}
