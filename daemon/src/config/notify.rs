//! `[notify]` and `mail_command` of `axd.toml` (docs/config.md, "Mail"):
//! whom the DAGs without a `notify` of their own mail, and the program
//! that sends. Every value is checked as it is read, so an error names its
//! key and line.

use std::path::PathBuf;

use ax_shared::{Notify, NotifyOn};
use serde::{Deserialize, Deserializer};

/// `mail_command` when not set: sendmail reading the recipients from the
/// message's `To:` (`-t`), a line of a lone `.` not ending it (`-oi`).
pub const DEFAULT_MAIL_COMMAND: &[&str] = &["/usr/sbin/sendmail", "-t", "-oi"];

/// `[notify]`: the default of every DAG that has no `notify`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    mail: Vec<Address>,
    on: Option<Vec<On>>,
}

impl RawNotify {
    pub(super) fn into_notify(self) -> Notify {
        let mut on = Vec::new();
        for On(o) in self.on.unwrap_or_else(|| vec![On(NotifyOn::Failure)]) {
            if !on.contains(&o) {
                on.push(o);
            }
        }
        Notify {
            mail: self.mail.into_iter().map(|a| a.0).collect(),
            on,
        }
    }
}

/// What mails nobody: the daemon's `[notify]` when the file has none.
pub fn no_mail() -> Notify {
    Notify {
        mail: Vec::new(),
        on: vec![NotifyOn::Failure],
    }
}

/// One `[notify] mail` entry, checked as `notify.mail` of a job file is.
struct Address(String);
impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ax_shared::rules::check_mail_address(&text).map_err(serde::de::Error::custom)?;
        Ok(Address(text))
    }
}

/// One `[notify] on` entry.
struct On(NotifyOn);
impl<'de> Deserialize<'de> for On {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        NotifyOn::ALL
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, on)| On(*on))
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{text:?} is not one of \"failure\", \"success\", \"output\""
                ))
            })
    }
}

/// `mail_command`: a string split on whitespace into the program and its
/// arguments, or an array of them (for an argument with a space). The
/// program is an absolute path or a bare name looked up in axd's `PATH`.
pub(super) struct MailCommand(pub(super) Vec<String>);
impl<'de> Deserialize<'de> for MailCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Line(String),
            Argv(Vec<String>),
        }
        let argv: Vec<String> = match Form::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "write a command line (\"/usr/sbin/sendmail -t -oi\") or an array of its words",
            )
        })? {
            Form::Line(line) => line.split_whitespace().map(str::to_string).collect(),
            Form::Argv(argv) => argv,
        };
        check_argv(&argv).map_err(serde::de::Error::custom)?;
        Ok(MailCommand(argv))
    }
}

fn check_argv(argv: &[String]) -> Result<(), String> {
    let Some(program) = argv.first().filter(|p| !p.trim().is_empty()) else {
        return Err("must name a program, e.g. \"/usr/sbin/sendmail -t -oi\"".into());
    };
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("a word holds a NUL byte".into());
    }
    if program.contains('/') && !PathBuf::from(program).is_absolute() {
        return Err(format!(
            "{program} is neither an absolute path nor a name looked up in PATH"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use ax_shared::NotifyOn;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/ax/axd.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_mail_nobody_through_sendmail() {
        let c = parse("").unwrap();
        assert!(c.notify.mail.is_empty());
        assert_eq!(c.mail_command, ["/usr/sbin/sendmail", "-t", "-oi"]);
    }

    #[test]
    fn notify_and_mail_command_in_both_forms() {
        let c = parse(
            "mail_command = \"/opt/mail/send  -x\"\n[notify]\nmail = [\"ops@example.com\", \"root\"]\non = [\"failure\", \"output\", \"failure\"]\n",
        )
        .unwrap();
        assert_eq!(c.mail_command, ["/opt/mail/send", "-x"]);
        assert_eq!(c.notify.mail, ["ops@example.com", "root"]);
        assert_eq!(c.notify.on, [NotifyOn::Failure, NotifyOn::Output]);
        let c = parse("mail_command = [\"/opt/my mail\", \"-t\"]\n[notify]\nmail = [\"a@b\"]\n")
            .unwrap();
        assert_eq!(c.mail_command, ["/opt/my mail", "-t"]);
        assert_eq!(c.notify.on, [NotifyOn::Failure], "on defaults to failure");
    }

    #[test]
    fn bad_values_name_their_key_and_line() {
        for (text, needle) in [
            (
                "[notify]\nmail = [\"ops@example.com\", \"a\\r\\nBcc: x@y\"]\n",
                "line 2, column 8 (key `notify.mail`): mail address",
            ),
            (
                "[notify]\nmail = [\"a@b\"]\non = [\"always\"]\n",
                "(key `notify.on`)",
            ),
            (
                "[notify]\nmail = [\"a@b\"]\non = [\"always\"]\n",
                "\"failure\"",
            ),
            ("[notify]\nto = [\"a@b\"]\n", "line 2"),
            ("[notify]\non = [\"failure\"]\n", "mail"),
            (
                "mail_command = \"\"\n",
                "line 1, column 16 (key `mail_command`)",
            ),
            ("mail_command = \"  \"\n", "must name a program"),
            ("mail_command = []\n", "must name a program"),
            ("mail_command = \"bin/sendmail -t\"\n", "absolute path"),
            (
                "mail_command = 5\n",
                "(key `mail_command`): write a command line",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
