//! One crontab entry as an ax job file: the environment lines above it
//! (`CRON_TZ`, `SHELL`, `MAILTO`, `RANDOM_DELAY`, the rest as `env`), its
//! schedule checked by ax's own parser, its command by cron's `%` rule,
//! and the caveats of what cron meant.

use std::collections::BTreeMap;

use ax_shared::cron::{Schedule, parse_zone};

use super::caveats::{duration, of_entry, random_sleep};
use super::command::{program_name, split_percent, tokens, with_stdin};
use super::crontab::Entry;
use super::jobtoml::{JobFile, Notify};

/// What the environment lines read so far in one crontab set, as cron
/// applies them to the entries below them. A setting ax cannot take holds
/// the reason, and each entry below it fails with that reason.
#[derive(Default, Clone)]
pub(crate) struct Settings {
    timezone: Option<Result<String, String>>,
    shell: Option<Result<String, String>>,
    /// `Some("")`: `MAILTO=""`, cron mails nothing.
    mailto: Option<String>,
    random_delay: Option<Result<u32, String>>,
    env: BTreeMap<String, String>,
}

impl Settings {
    /// Applies `NAME=value` from line `line`.
    pub(crate) fn set(&mut self, line: usize, name: &str, value: &str) {
        let bad = |why: String| Err(format!("{name}={value:?} (line {line}): {why}"));
        match name {
            "CRON_TZ" | "TZ" => {
                self.timezone = Some(match parse_zone(value) {
                    Ok(_) => Ok(value.to_string()),
                    Err(e) => bad(e),
                });
                // cron hands TZ to the job as well; CRON_TZ is its own.
                if name == "TZ" {
                    self.env.insert(name.into(), value.into());
                }
            }
            "SHELL" => {
                self.shell = Some(if value.starts_with('/') {
                    Ok(value.to_string())
                } else {
                    bad("ax's shell must be an absolute path".into())
                });
            }
            "MAILTO" => self.mailto = Some(value.to_string()),
            "RANDOM_DELAY" => {
                self.random_delay = Some(value.parse::<u32>().map_err(|_| {
                    format!("{name}={value:?} (line {line}): not a number of minutes")
                }));
            }
            _ => {
                self.env.insert(name.into(), value.into());
            }
        }
    }
}

/// A converted entry: its job file's text and what names it.
pub(crate) struct Converted {
    pub user: Option<String>,
    pub program: String,
    pub text: String,
    pub caveats: Vec<String>,
}

/// Where an entry comes from, for the job file's header.
pub(crate) struct Origin<'a> {
    pub file: &'a str,
    pub line: usize,
    pub text: &'a str,
    /// How the file's format was decided.
    pub format_note: &'a str,
}

/// Converts one entry under `settings`; `user` is the user of a user
/// crontab (`--user`), used when the entry has no user column. The error
/// says why the entry cannot be converted.
pub(crate) fn convert(
    origin: &Origin<'_>,
    entry: Entry,
    settings: &Settings,
    user: Option<&str>,
) -> Result<Converted, String> {
    // ax's parser takes `@reboot` as cron does; it has no clock slots to check.
    if entry.schedule != "@reboot" {
        Schedule::parse(&entry.schedule)
            .map_err(|e| format!("schedule: {}", e.reason))
            .map_err(|e| format!("{e} (in {:?})", entry.schedule))?;
    }
    let timezone = settings.timezone.clone().transpose()?;
    let shell = settings.shell.clone().transpose()?;
    let random_delay = settings.random_delay.clone().transpose()?;
    let mut split = split_percent(&entry.command);
    if split.command.trim().is_empty() {
        return Err("the command is empty (cron would run nothing)".into());
    }
    let mut caveats = Vec::new();
    let mut jitter = random_delay.filter(|m| *m > 0).map(|m| format!("{m}m"));
    if let Some(sleep) = random_sleep(&split.command) {
        match (&sleep.without, &jitter) {
            (Some(without), None) => {
                let j = duration(sleep.seconds);
                caveats.push(format!(
                    "random sleep `{}` dropped from the command: jitter = \"{j}\" delays each start by up to as long",
                    sleep.text
                ));
                jitter = Some(j);
                split.command = without.clone();
            }
            _ => caveats.push(format!(
                "random sleep `{}` kept in the command: ax's jitter = \"{}\" would delay each start without it",
                sleep.text,
                duration(sleep.seconds)
            )),
        }
    }
    caveats.extend(of_entry(&entry.schedule, &split.command));
    if split.stdin.is_some() && tokens(&split.command).1 {
        caveats.push(format!(
            "an unescaped % inside quotes ends the command, as cron reads it (`{}`); write \\% for a literal %",
            split.command
        ));
    }
    let program = program_name(&split.command).unwrap_or_else(|| "job".into());
    let mut comments = vec![
        format!(
            "Imported by `ax import cron` from {} ({}):",
            origin.file, origin.format_note
        ),
        format!("  {}:{}: {}", origin.file, origin.line, origin.text),
    ];
    if split.stdin.as_ref().is_some_and(|l| !l.is_empty()) {
        comments.push(
            "The text after % was cron's stdin: printf pipes the same lines into the command."
                .into(),
        );
    }
    let user = entry.user.or_else(|| user.map(str::to_owned));
    let mut file = JobFile::cron_like(entry.schedule, with_stdin(&split));
    file.notify = match settings.mailto.as_deref() {
        Some("") => {
            comments.push("MAILTO=\"\": cron mailed nothing, so no notify.".into());
            None
        }
        Some(to) => Some(Notify {
            mail: to
                .split(',')
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect(),
            on: vec!["output".into()],
        }),
        None => {
            comments.push(format!(
                "No MAILTO: cron mailed any output to the local user{}; notify = {{ mail = [\"…\"], on = [\"output\"] }} does that.",
                user.as_deref().map(|u| format!(" {u}")).unwrap_or_default()
            ));
            None
        }
    };
    comments.extend(caveats.iter().map(|c| format!("caveat: {c}")));
    file.timezone = timezone;
    file.user = user.clone();
    file.shell = shell;
    file.jitter = jitter;
    file.env = settings.env.clone();
    let text = file
        .render(&comments)
        .map_err(|e| format!("cannot write the job file as TOML: {e}"))?;
    Ok(Converted {
        user,
        program,
        text,
        caveats,
    })
}
