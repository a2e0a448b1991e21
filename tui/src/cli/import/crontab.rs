//! A crontab's lines as cron reads them: comments, environment lines
//! (`NAME=value`, quotes stripped as cronie does) and entries (a schedule,
//! in system crontabs a user, then the command), and whether a file is a
//! system crontab (with a user column) or a user's.

use ax_shared::jobfile::valid_account_name;

/// The macros cron knows, written as cron requires (lower case).
pub(crate) const MACROS: &[&str] = &[
    "@reboot",
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Whether a crontab has a user column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// `/etc/crontab`, `/etc/cron.d/*`: `SCHEDULE USER COMMAND`.
    System,
    /// `crontab -l`: `SCHEDULE COMMAND`.
    User,
}

/// One meaningful line of a crontab, numbered from 1.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Env {
        line: usize,
        name: String,
        value: String,
    },
    Entry {
        line: usize,
        /// The line as written, for the job file's header.
        text: String,
        /// The words of the line from the schedule on; split by [`entry`].
        body: String,
    },
    /// A line cron would refuse, with why.
    Bad { line: usize, reason: String },
}

/// The lines of a crontab that are not blank or comments, classified.
/// Lines end at `\n` only, as for cron (a `\r` stays part of the line).
pub(crate) fn lines(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = i + 1;
        let trimmed = raw.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match env_line(trimmed) {
            Some(Ok((name, value))) => out.push(Line::Env { line, name, value }),
            Some(Err(reason)) => out.push(Line::Bad { line, reason }),
            None => out.push(Line::Entry {
                line,
                text: raw.to_string(),
                body: trimmed.to_string(),
            }),
        }
    }
    out
}

/// `NAME=value` as cronie's `load_env` reads it: the name runs to the first
/// blank or `=`, blanks may surround the `=`, and a value wholly in `'…'` or
/// `"…"` loses its quotes (nothing may follow the closing one); an unquoted
/// value loses its trailing blanks. `None` when the line is not one.
fn env_line(line: &str) -> Option<Result<(String, String), String>> {
    let name_end = line.find([' ', '\t', '='])?;
    let name = &line[..name_end];
    let after = line[name_end..].trim_start_matches([' ', '\t']);
    let value = after.strip_prefix('=')?.trim_start_matches([' ', '\t']);
    if name.is_empty() || name.starts_with('@') {
        return None;
    }
    let value = match value.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let inner = &value[1..];
            let Some(close) = inner.find(q) else {
                return Some(Err(format!(
                    "environment line {name}: the value's opening {q} is not closed"
                )));
            };
            if !inner[close + 1..].trim_matches([' ', '\t']).is_empty() {
                return Some(Err(format!(
                    "environment line {name}: text after the value's closing {q}"
                )));
            }
            inner[..close].to_string()
        }
        _ => value.trim_end_matches([' ', '\t']).to_string(),
    };
    Some(Ok((name.to_string(), value)))
}

/// The next blank-separated word of `s` and what follows it (leading
/// blanks removed).
fn next_word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    Some((&s[..end], s[end..].trim_start_matches([' ', '\t'])))
}

/// An entry's parts.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// A macro (`@daily`), or the five fields joined by single spaces.
    pub schedule: String,
    /// The user column of a system crontab.
    pub user: Option<String>,
    /// The command field, unprocessed (`%` still in it).
    pub command: String,
}

/// Splits an entry's body (the line from the schedule on) by `format`.
pub(crate) fn entry(body: &str, format: Format) -> Result<Entry, String> {
    let (schedule, rest) = schedule(body)?;
    let (user, command) = match format {
        Format::User => (None, rest),
        Format::System => {
            let Some((user, command)) = next_word(rest) else {
                return Err("no user column and no command after the schedule".into());
            };
            if !valid_account_name(user) {
                return Err(format!(
                    "user column {user:?} is not a user name (a system crontab has one after the schedule)"
                ));
            }
            (Some(user.to_string()), command)
        }
    };
    if command.trim().is_empty() {
        return Err(match format {
            Format::System => "no command after the user column".into(),
            Format::User => "no command after the schedule".into(),
        });
    }
    Ok(Entry {
        schedule,
        user,
        command: command.to_string(),
    })
}

/// The schedule at the start of `body` and the rest of the line.
fn schedule(body: &str) -> Result<(String, &str), String> {
    let (first, rest) = next_word(body).ok_or("empty line")?;
    if first.starts_with('@') {
        if !MACROS.contains(&first) {
            return Err(format!(
                "unknown macro {first}; cron knows {}",
                MACROS.join(" ")
            ));
        }
        return Ok((first.to_string(), rest));
    }
    let mut fields = vec![first];
    let mut rest = rest;
    for _ in 0..4 {
        let Some((field, after)) = next_word(rest) else {
            return Err(format!(
                "{} schedule field(s), then the line ends; cron needs 5 (minute hour day-of-month month day-of-week)",
                fields.len()
            ));
        };
        fields.push(field);
        rest = after;
    }
    Ok((fields.join(" "), rest))
}

/// A schedule field as cron reads it: its name, range and names.
struct FieldRule {
    name: &'static str,
    lo: u32,
    hi: u32,
    names: &'static [&'static str],
    /// The value of `names[0]`.
    first: u32,
}

const FIELDS: [FieldRule; 5] = [
    FieldRule {
        name: "minute",
        lo: 0,
        hi: 59,
        names: &[],
        first: 0,
    },
    FieldRule {
        name: "hour",
        lo: 0,
        hi: 23,
        names: &[],
        first: 0,
    },
    FieldRule {
        name: "day of month",
        lo: 1,
        hi: 31,
        names: &[],
        first: 0,
    },
    FieldRule {
        name: "month",
        lo: 1,
        hi: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
        first: 1,
    },
    FieldRule {
        name: "day of week",
        lo: 0,
        hi: 7,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
        first: 0,
    },
];

/// Checks five schedule fields against cron's syntax (lists of `*`, `N`
/// or `A-B`, each with an optional `/STEP`; month and weekday names) and
/// ranges. The error names the field and the value; ax's extensions (`L`,
/// `W`, `#`) are not cron's and are refused too.
pub(crate) fn check_fields(schedule: &str) -> Result<(), String> {
    for (text, rule) in schedule.split(' ').zip(&FIELDS) {
        for item in text.split(',') {
            check_item(item, rule).map_err(|why| format!("{} field {text:?}: {why}", rule.name))?;
        }
    }
    Ok(())
}

fn check_item(item: &str, rule: &FieldRule) -> Result<(), String> {
    let (range, step) = match item.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (item, None),
    };
    if let Some(step) = step {
        match step.parse::<u32>() {
            Ok(n) if n >= 1 => {}
            _ => return Err(format!("step {step:?} is not a number from 1")),
        }
    }
    if range == "*" {
        return Ok(());
    }
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = rule.names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(rule.first + i as u32);
        }
        let n: u32 = v.parse().map_err(|_| {
            format!(
                "{v:?} is not a number{}",
                if rule.names.is_empty() {
                    ""
                } else {
                    " or a name"
                }
            )
        })?;
        if n < rule.lo || n > rule.hi {
            return Err(format!("{n} is out of range {}-{}", rule.lo, rule.hi));
        }
        Ok(n)
    };
    match range.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
        }
        None => {
            value(range)?;
        }
    }
    Ok(())
}

/// The word after the schedule of an entry's body, and whether a command
/// follows it: what a user column would be. A "command" that starts with
/// `-` is the word's options (`mail -s hi bob`), not a command.
fn sixth_word(body: &str) -> Option<(&str, bool)> {
    let (_, rest) = schedule(body).ok()?;
    let (word, after) = next_word(rest)?;
    Some((word, !after.trim().is_empty() && !after.starts_with('-')))
}

/// The format of a crontab and why: files named `crontab` or in a folder
/// named `cron.d` are system crontabs; standard input (`-`) is a user's
/// unless `--system` says otherwise (what a pipe holds is often `crontab
/// -l` of a user who may write a "user column" of their own); another
/// file is a system crontab when every entry's sixth field is a user name
/// followed by a command, and one of those names is surely a user here
/// (`is_user`: an account, and no program of that name); else a user's.
pub(crate) fn detect(
    path: &str,
    lines: &[Line],
    is_user: &dyn Fn(&str) -> bool,
) -> (Format, String) {
    let p = std::path::Path::new(path);
    if p.file_name().is_some_and(|n| n == "crontab") {
        return (Format::System, "system crontab: named crontab".into());
    }
    if p.parent()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n == "cron.d")
    {
        return (Format::System, "system crontab: in a cron.d folder".into());
    }
    if path == "-" || path == super::STDIN_NAME {
        return (Format::User, "user crontab: standard input".into());
    }
    let bodies: Vec<&str> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Entry { body, .. } => Some(body.as_str()),
            _ => None,
        })
        .collect();
    let columns: Vec<Option<(&str, bool)>> = bodies.iter().map(|b| sixth_word(b)).collect();
    let all_users = !columns.is_empty()
        && columns
            .iter()
            .all(|c| c.is_some_and(|(w, cmd)| cmd && valid_account_name(w)));
    if all_users && let Some((known, _)) = columns.iter().flatten().find(|(w, _)| is_user(w)) {
        return (
            Format::System,
            format!(
                "system crontab: every entry's sixth field is a user name, {known} a user here"
            ),
        );
    }
    (Format::User, "user crontab: no user column".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(line: &str) -> Option<Result<(String, String), String>> {
        env_line(line)
    }

    fn ok(name: &str, value: &str) -> Option<Result<(String, String), String>> {
        Some(Ok((name.into(), value.into())))
    }

    #[test]
    fn environment_lines_lose_their_quotes_as_cronie_reads_them() {
        assert_eq!(env(r#"FOO="a b""#), ok("FOO", "a b"));
        assert_eq!(env("FOO = 'it\"s'  "), ok("FOO", "it\"s"));
        assert_eq!(env("MAILTO=\"\""), ok("MAILTO", ""));
        assert_eq!(env("PATH=/bin:/usr/bin  "), ok("PATH", "/bin:/usr/bin"));
        assert_eq!(env("X=a=b"), ok("X", "a=b"));
        assert_eq!(
            env("X=\"a\"b\"").unwrap().unwrap_err(),
            "environment line X: text after the value's closing \""
        );
        assert!(env("X=\"open").unwrap().is_err());
        // Entries are not environment lines.
        assert_eq!(env("*/5 * * * * FOO=bar cmd"), None);
        assert_eq!(env("@daily X=1 cmd"), None);
    }

    #[test]
    fn entries_split_into_schedule_user_and_command() {
        let e = entry("0 9 * * MON-FRI  root  echo  a  b", Format::System).unwrap();
        assert_eq!(e.schedule, "0 9 * * MON-FRI");
        assert_eq!(e.user.as_deref(), Some("root"));
        assert_eq!(e.command, "echo  a  b");
        let e = entry("@reboot\t/x", Format::User).unwrap();
        assert_eq!((e.schedule.as_str(), e.command.as_str()), ("@reboot", "/x"));
        assert!(
            entry("0 9 * *", Format::User)
                .unwrap_err()
                .contains("4 schedule field(s)")
        );
        assert!(
            entry("@Daily x", Format::User)
                .unwrap_err()
                .contains("unknown macro @Daily")
        );
        assert!(
            entry("0 9 * * * root", Format::System)
                .unwrap_err()
                .contains("no command")
        );
        assert!(
            entry("0 9 * * * /bin/x y", Format::System)
                .unwrap_err()
                .contains("not a user name")
        );
    }

    #[test]
    fn fields_are_checked_against_crons_ranges_and_named() {
        assert_eq!(check_fields("*/5 0-23 1,15 jan-Dec MON-FRI"), Ok(()));
        assert_eq!(check_fields("0 9 * * 7"), Ok(()));
        for (schedule, why) in [
            ("61 * * * *", "minute field \"61\": 61 is out of range 0-59"),
            ("0 24 * * *", "hour field \"24\": 24 is out of range 0-23"),
            (
                "0 0 0 * *",
                "day of month field \"0\": 0 is out of range 1-31",
            ),
            ("0 0 * 13 *", "month field \"13\": 13 is out of range 1-12"),
            (
                "0 0 * * 8",
                "day of week field \"8\": 8 is out of range 0-7",
            ),
            (
                "0 0 * * FRI#2",
                "day of week field \"FRI#2\": \"FRI#2\" is not a number or a name",
            ),
            (
                "0 0 L * *",
                "day of month field \"L\": \"L\" is not a number",
            ),
            (
                "*/0 * * * *",
                "minute field \"*/0\": step \"0\" is not a number from 1",
            ),
            (
                "0 5-1 * * *",
                "hour field \"5-1\": range \"5-1\" runs backwards",
            ),
        ] {
            assert_eq!(check_fields(schedule), Err(why.to_string()), "{schedule}");
        }
    }

    #[test]
    fn system_and_user_crontabs_are_told_apart() {
        let root_only = |u: &str| u == "root";
        let system = "SHELL=/bin/sh\n0 1 * * * root /x\n@daily nobody /y\n";
        let user = "0 1 * * * /x\n*/5 * * * * php artisan run\n";
        let (f, why) = detect("some-file", &lines(system), &root_only);
        assert_eq!(f, Format::System, "{why}");
        assert!(why.contains("root a user here"), "{why}");
        assert_eq!(
            detect("some-file", &lines(user), &root_only).0,
            Format::User
        );
        // `php` is a user name, but it is no user here.
        assert_eq!(
            detect("f", &lines("0 1 * * * php artisan run\n"), &root_only).0,
            Format::User
        );
        // What follows is the program's options: no user column.
        let mail = |u: &str| u == "mail";
        assert_eq!(
            detect("f", &lines("0 8 * * * mail -s hi bob\n"), &mail).0,
            Format::User
        );
        assert_eq!(
            detect("f", &lines("0 8 * * * mail /x\n"), &mail).0,
            Format::System
        );
        // One line without a user column makes it a user's crontab.
        assert_eq!(
            detect("f", &lines("0 1 * * * root /x\n0 2 * * * /y\n"), &root_only).0,
            Format::User
        );
        assert_eq!(
            detect("/etc/crontab", &lines(user), &root_only).0,
            Format::System
        );
        assert_eq!(
            detect("/etc/cron.d/certbot", &lines(user), &root_only).0,
            Format::System
        );
        assert_eq!(detect("-", &lines(""), &root_only).0, Format::User);
    }
}
