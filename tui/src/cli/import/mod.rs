//! `ax import cron`: crontabs into job files, one per entry
//! (docs/operations.md, "Migrating from cron"). `crontab` reads the lines,
//! `command` applies cron's `%` rule and names the job, `caveats` spots
//! what ax says differently, `convert` builds each job file, `jobtoml`
//! writes it as TOML and hands out file names, `summary` reports.

mod caveats;
mod command;
mod convert;
mod crontab;
mod jobtoml;
mod summary;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ax_shared::jobfile::valid_account_name;

use crate::cli::args::ImportCronArgs;
use crate::cli::exit;
use convert::{Converted, Origin, Settings, convert};
use crontab::{Format, Line};
use jobtoml::Names;
use summary::Report;

/// What stdin is called in the summary and the job files' headers.
pub(crate) const STDIN_NAME: &str = "<stdin>";

/// A converted entry waiting for its file name.
struct Done {
    place: String,
    converted: Converted,
}

/// `ax import cron [FILE…|-] [--user NAME] [--out DIR] [--system|--user-format]`.
/// Returns the exit code: 0 when every entry was converted, 1 when one was
/// not (or a file could not be read or written), 2 on a bad `--user`.
pub fn import_cron(
    out: &mut dyn Write,
    err: &mut dyn Write,
    stdin: &mut dyn Read,
    args: &ImportCronArgs,
) -> i32 {
    if let Some(user) = &args.user
        && !valid_account_name(user)
    {
        let _ = writeln!(
            err,
            "ax import cron: --user {user:?}: not a user name (1-32 of a-z 0-9 _ . -)"
        );
        return exit::USAGE;
    }
    let forced = match (args.system, args.user_format) {
        (true, _) => Some(Format::System),
        (_, true) => Some(Format::User),
        _ => None,
    };
    let dash = [PathBuf::from("-")];
    let files: &[PathBuf] = if args.files.is_empty() {
        &dash
    } else {
        &args.files
    };
    let mut report = Report::default();
    let mut done = Vec::new();
    let mut stdin_read = false;
    for path in files {
        let (name, text) = if path.as_os_str() == "-" {
            if std::mem::replace(&mut stdin_read, true) {
                report.failure(STDIN_NAME, "`-` given twice: stdin is read once");
                continue;
            }
            (STDIN_NAME.to_string(), read_all(stdin))
        } else {
            let name = path.display().to_string();
            let text = std::fs::File::open(path).and_then(|mut f| read_all(&mut f));
            (name, text)
        };
        match text {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => import_file(
                    &name,
                    &text,
                    forced,
                    args.user.as_deref(),
                    &mut report,
                    &mut done,
                ),
                Err(e) => report.failure(
                    &name,
                    format!(
                        "not UTF-8 text (invalid byte at offset {})",
                        e.utf8_error().valid_up_to()
                    ),
                ),
            },
            Err(e) => report.failure(&name, format!("cannot read: {e}")),
        }
    }
    write_all(out, args.out.as_deref(), done, &mut report);
    report.print(err);
    if report.failures.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

fn read_all(r: &mut dyn Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Converts every entry of one crontab, applying its environment lines to
/// the entries below them.
fn import_file(
    name: &str,
    text: &str,
    forced: Option<Format>,
    user: Option<&str>,
    report: &mut Report,
    done: &mut Vec<Done>,
) {
    let lines = crontab::lines(text);
    // `--user` says whose crontab it is: a user column is then never
    // guessed, so a user's line `* * * * * root x` stays the command
    // `root x` run as that user, as cron runs it, not a root job.
    let (format, note) = match (forced, user) {
        (Some(Format::System), _) => (Format::System, "system crontab: --system".to_string()),
        (Some(Format::User), _) => (Format::User, "user crontab: --user-format".to_string()),
        (None, Some(_)) => (Format::User, "user crontab".to_string()),
        (None, None) => crontab::detect(name, &lines, &surely_a_user),
    };
    let note = match (format, user) {
        (Format::User, Some(u)) => format!("{note}, --user {u}"),
        _ => note,
    };
    let mut settings = Settings::default();
    for line in lines {
        match line {
            Line::Env {
                line,
                name: var,
                value,
            } => settings.set(line, &var, &value),
            Line::Bad { line, reason } => report.failure(format!("{name}:{line}"), reason),
            Line::Entry { line, text, body } => {
                let place = format!("{name}:{line}");
                let origin = Origin {
                    file: name,
                    line,
                    text: &text,
                    format_note: &note,
                };
                let result = crontab::entry(&body, format).and_then(|entry| {
                    let user = if format == Format::User { user } else { None };
                    convert(&origin, entry, &settings, user)
                });
                match result {
                    Ok(converted) => {
                        report.converted += 1;
                        report.caveat(&place, &converted.caveats);
                        done.push(Done { place, converted });
                    }
                    Err(why) => report.failure(place, why),
                }
            }
        }
    }
}

/// Whether `word`, in the sixth field of a crontab line, can only be a
/// user: an account here that is not also a program (on `PATH`, or one of
/// the accounts named after a program: `mail`, `sync`, `man`, `lp`,
/// `news`), since those begin many user crontabs' commands.
fn surely_a_user(word: &str) -> bool {
    if matches!(word, "mail" | "sync" | "man" | "lp" | "news") {
        return false;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(word).is_file()));
    !on_path && nix::unistd::User::from_name(word).ok().flatten().is_some()
}

/// Names the job files and writes them: into `dir` (one file each, never
/// over an existing one; their paths on `out`) or all on `out`, each after
/// a `# file: NAME.toml` line.
fn write_all(out: &mut dyn Write, dir: Option<&Path>, done: Vec<Done>, report: &mut Report) {
    let mut names = Names::default();
    if let Some(dir) = dir
        && !done.is_empty()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        for d in &done {
            let why = format!("cannot create {}: {e}", dir.display());
            report.unconvert(&d.place, !d.converted.caveats.is_empty(), why);
        }
        return;
    }
    for (i, d) in done.into_iter().enumerate() {
        let c = &d.converted;
        let file_name = format!("{}.toml", names.take(c.user.as_deref(), &c.program));
        match dir {
            None => {
                let gap = if i == 0 { "" } else { "\n" };
                let _ = write!(out, "{gap}# file: {file_name}\n{}", c.text);
            }
            Some(dir) => {
                let path = dir.join(&file_name);
                match write_new(&path, &c.text) {
                    Ok(()) => {
                        let _ = writeln!(out, "{}", path.display());
                    }
                    Err(e) => report.unconvert(
                        &d.place,
                        !c.caveats.is_empty(),
                        format!("cannot write {}: {e}", path.display()),
                    ),
                }
            }
        }
    }
}

/// Writes a new file; an existing one is an error, left as it is.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(text.as_bytes())
}
