//! One crontab entry as an ax job file: the environment lines above it
//! (`CRON_TZ`, `SHELL`, `MAILTO`, `RANDOM_DELAY`, the rest as `env`), its
//! schedule checked by ax's own parser, its command by cron's `%` rule,
//! and the caveats of what cron meant.

use std::collections::BTreeMap;

use ax_shared::cron::{Schedule, parse_zone};
use ax_shared::envfile::valid_env_name;
use ax_shared::rules::check_mail_address;

use super::caveats::{duration, of_entry, random_sleep};
use super::command::{basename, program_name, split_percent, tokens, with_stdin};
use super::crontab::{Entry, check_fields};
use super::jobtoml::{JobFile, Notify};

/// What the environment lines read so far in one crontab set, as cron
/// applies them to the entries below them. A setting ax cannot take holds
/// the reason, and each entry below it fails with that reason.
#[derive(Default, Clone)]
pub(crate) struct Settings {
    timezone: Option<Result<String, String>>,
    shell: Option<Result<String, String>>,
    /// The addresses of `MAILTO` (none: `MAILTO=""`, cron mails nothing).
    mailto: Option<Result<Vec<String>, String>>,
    random_delay: Option<Result<u32, String>>,
    env: BTreeMap<String, String>,
    /// The last variable ax cannot pass on.
    bad_env: Option<String>,
}

impl Settings {
    /// Applies `NAME=value` from line `line`.
    pub(crate) fn set(&mut self, line: usize, name: &str, value: &str) {
        let bad = |why: String| format!("{name}={value:?} (line {line}): {why}");
        match name {
            "CRON_TZ" | "TZ" => {
                self.timezone = Some(match parse_zone(value) {
                    Ok(_) => Ok(value.to_string()),
                    Err(e) => Err(bad(e)),
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
                    Err(bad("ax's shell must be an absolute path".into()))
                });
            }
            "MAILTO" => {
                // cronie takes a comma-separated list.
                let addresses: Vec<String> = value
                    .split(',')
                    .map(|a| a.trim().to_string())
                    .filter(|a| !a.is_empty())
                    .collect();
                self.mailto = Some(
                    match addresses.iter().find_map(|a| check_mail_address(a).err()) {
                        Some(e) => Err(bad(e.to_string())),
                        None => Ok(addresses),
                    },
                );
            }
            "RANDOM_DELAY" => {
                self.random_delay = Some(
                    value
                        .parse::<u32>()
                        .map_err(|_| bad("not a number of minutes".into())),
                );
            }
            _ if !valid_env_name(name) => {
                self.bad_env = Some(bad("not a name ax can give a job".into()));
            }
            _ => {
                self.env.insert(name.into(), value.into());
            }
        }
    }
}

/// Shells that read the `printf … | ( … )` pipeline of [`with_stdin`].
const POSIX_SHELLS: &[&str] = &["sh", "bash", "dash", "ksh", "mksh", "zsh", "ash", "busybox"];

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
    if !entry.schedule.starts_with('@') {
        check_fields(&entry.schedule)?;
    }
    Schedule::parse(&entry.schedule)
        .map_err(|e| format!("schedule {:?}: {}", entry.schedule, e.reason))?;
    let timezone = settings.timezone.clone().transpose()?;
    let shell = settings.shell.clone().transpose()?;
    let random_delay = settings.random_delay.clone().transpose()?;
    let mailto = settings.mailto.clone().transpose()?;
    if let Some(e) = &settings.bad_env {
        return Err(e.clone());
    }
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
    if split.stdin.as_ref().is_some_and(|l| !l.is_empty())
        && let Some(sh) = shell.as_deref()
        && !POSIX_SHELLS.contains(&basename(sh))
    {
        caveats.push(format!(
            "the stdin pipeline (printf … | ( … )) is POSIX shell syntax, which SHELL={sh} may not read"
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
    let users_crontab = entry.user.is_none();
    let user = entry.user.or_else(|| user.map(str::to_owned));
    if users_crontab && user.is_none() {
        caveats.push(
            "a user's crontab without --user NAME: the job file names no user, so its job runs as axd's own user (root under the system unit); pass --user with whose crontab it is".into(),
        );
    }
    if users_crontab
        && let Some(Some(mail)) = &mailto.as_ref().map(|m| (!m.is_empty()).then_some(m))
        && mail.iter().any(|a| Some(a.as_str()) != user.as_deref())
    {
        caveats.push(format!(
            "MAILTO of a user's crontab: cron sent its mail as {}, axd sends it as its own user (root under the system unit) to {}",
            user.as_deref().unwrap_or("that user"),
            mail.join(", ")
        ));
    }
    let mut file = JobFile::cron_like(entry.schedule, with_stdin(&split));
    file.notify = match mailto {
        Some(mail) if mail.is_empty() => {
            comments.push(
                "MAILTO=\"\": cron mailed nothing; `mail = []` sends nothing, whatever axd.toml's [notify] says.".into(),
            );
            Some(Notify {
                mail,
                on: Vec::new(),
            })
        }
        Some(mail) => Some(Notify {
            mail,
            on: vec!["output".into()],
        }),
        None => {
            comments.push(format!(
                "No MAILTO: cron mailed any output to the local user{}; notify = {{ mail = [\"…\"], on = [\"output\"] }} does that (without it, axd.toml's [notify] applies).",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::import::crontab::{Format, Line, entry, lines};

    /// The job files of a user crontab's entries, parsed back, or why not.
    fn import(text: &str) -> Vec<Result<toml::Table, String>> {
        run(text)
            .into_iter()
            .map(|r| r.map(|c| c.text.parse().unwrap()))
            .collect()
    }

    /// A user crontab's entries converted, or why not.
    fn run(text: &str) -> Vec<Result<Converted, String>> {
        let mut settings = Settings::default();
        let mut out = Vec::new();
        for line in lines(text) {
            match line {
                Line::Env { line, name, value } => settings.set(line, &name, &value),
                Line::Bad { reason, .. } => out.push(Err(reason)),
                Line::Entry { line, text, body } => {
                    let origin = Origin {
                        file: "t",
                        line,
                        text: &text,
                        format_note: "user crontab",
                    };
                    out.push(
                        entry(&body, Format::User)
                            .and_then(|e| convert(&origin, e, &settings, Some("bob"))),
                    );
                }
            }
        }
        out
    }

    #[test]
    fn environment_lines_apply_to_the_entries_below_them() {
        let files = import(concat!(
            "0 1 * * * /a\n",
            "FOO=\"a b\"\n",
            "BAR = 'it\"s'\n",
            "TZ=America/New_York\n",
            "RANDOM_DELAY=30\n",
            "MAILTO=a@example.com, root\n",
            "SHELL=/bin/zsh\n",
            "0 2 * * * /b\n",
        ));
        let first = files[0].as_ref().unwrap();
        assert!(first.get("env").is_none() && first.get("jitter").is_none());
        assert!(first.get("timezone").is_none() && first.get("notify").is_none());
        assert_eq!(first["user"].as_str(), Some("bob"));
        let second = files[1].as_ref().unwrap();
        assert_eq!(second["env"]["FOO"].as_str(), Some("a b"));
        assert_eq!(second["env"]["BAR"].as_str(), Some("it\"s"));
        assert_eq!(second["env"]["TZ"].as_str(), Some("America/New_York"));
        assert_eq!(second["timezone"].as_str(), Some("America/New_York"));
        assert_eq!(second["jitter"].as_str(), Some("30m"));
        assert_eq!(second["shell"].as_str(), Some("/bin/zsh"));
        let mail: Vec<&str> = second["notify"]["mail"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(mail, ["a@example.com", "root"]);
        assert_eq!(second["notify"]["on"][0].as_str(), Some("output"));
    }

    #[test]
    fn settings_ax_cannot_take_fail_the_entries_below_them() {
        for (line, why) in [
            (
                "MAILTO=Ops <ops@example.com>",
                "MAILTO=\"Ops <ops@example.com>\" (line 1): mail address",
            ),
            (
                "SHELL=bash",
                "SHELL=\"bash\" (line 1): ax's shell must be an absolute path",
            ),
            (
                "RANDOM_DELAY=5m",
                "RANDOM_DELAY=\"5m\" (line 1): not a number of minutes",
            ),
            (
                "CRON_TZ=Nowhere",
                "CRON_TZ=\"Nowhere\" (line 1): unknown time zone",
            ),
        ] {
            let files = import(&format!("{line}\n0 1 * * * /a\n"));
            let e = files[0].as_ref().unwrap_err();
            assert!(e.starts_with(why), "{line}: {e}");
        }
        let files = run("SHELL=/usr/bin/fish\n0 1 * * * cat%x\n0 2 * * * /b\n");
        let with_stdin = files[0].as_ref().unwrap();
        assert!(
            with_stdin.caveats[0].contains("POSIX shell syntax, which SHELL=/usr/bin/fish"),
            "{:?}",
            with_stdin.caveats
        );
        assert!(with_stdin.text.contains("# caveat: the stdin pipeline"));
        assert_eq!(files[1].as_ref().unwrap().caveats, Vec::<String>::new());
        let files = import("MAILTO=\"\"\n0 1 * * * /a\n");
        let t = files[0].as_ref().unwrap();
        assert_eq!(t["notify"]["mail"].as_array().map(Vec::len), Some(0));
        assert!(t["notify"].get("on").is_none());
    }

    #[test]
    fn a_random_sleep_becomes_jitter_unless_random_delay_gives_one() {
        let files = import(concat!(
            "0 1 * * * sleep $((RANDOM \\% 90)) && /a\n",
            "RANDOM_DELAY=2\n",
            "0 1 * * * sleep $((RANDOM \\% 90)) && /a\n",
        ));
        let first = files[0].as_ref().unwrap();
        assert_eq!(first["jitter"].as_str(), Some("90s"));
        assert_eq!(first["command"].as_str(), Some("/a"));
        let second = files[1].as_ref().unwrap();
        assert_eq!(second["jitter"].as_str(), Some("2m"));
        assert_eq!(
            second["command"].as_str(),
            Some("sleep $((RANDOM % 90)) && /a")
        );
    }
}
