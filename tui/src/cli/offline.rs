//! The commands that need no daemon: `ax validate` and `ax cron next`.

use std::io::Write;
use std::path::PathBuf;

use ax_shared::cron::{Schedule, parse_zone};
use ax_shared::jobfile::{DagFile, FileError, ValidateOptions, check_after, load_file};
use ax_shared::time::{format_in_zone, format_utc_ms};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Value, json};

use crate::cli::args::{CronNextArgs, ValidateArgs};
use crate::cli::exit;

/// `ax cron next EXPR [--tz TZ] [--from RFC3339] [-n N]`: prints the next N
/// fire times strictly after FROM, one RFC 3339 instant per line in the
/// zone's offset (UTC when the zone is UTC). Returns the exit code.
pub fn cron_next(
    out: &mut dyn Write,
    err: &mut dyn Write,
    args: &CronNextArgs,
    as_json: bool,
) -> i32 {
    let expr = args.expr.as_str();
    let schedule = match Schedule::parse(expr) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "ax: {e}");
            return exit::USAGE;
        }
    };
    let zone = match parse_zone(args.tz.as_deref().unwrap_or("local")) {
        Ok(z) => z,
        Err(e) => {
            let _ = writeln!(err, "ax: --tz: {e}");
            return exit::USAGE;
        }
    };
    let from: DateTime<Utc> = match args.from.as_deref() {
        None => Utc::now(),
        Some(text) => match DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => {
                let _ = writeln!(
                    err,
                    "ax: --from {text:?}: not an RFC 3339 time ({e}); e.g. 2026-03-08T12:00:00Z"
                );
                return exit::USAGE;
            }
        },
    };
    if schedule.is_at_boot() && !as_json {
        let _ = writeln!(out, "@reboot: once per boot of the machine, no time of day");
        return exit::OK;
    }
    let times = schedule.upcoming(from, &zone, usize::from(args.n));
    let shown: Vec<String> = times.iter().map(|t| format_in_zone(*t, &zone)).collect();
    if as_json {
        let doc = json!({
            "expression": expr,
            "timezone": zone.name(),
            "fixed_time": schedule.is_fixed_time(),
            "from": format_utc_ms(from),
            "next": times.iter().map(|t| format_utc_ms(*t)).collect::<Vec<_>>(),
        });
        let _ = writeln!(out, "{doc}");
    } else {
        for line in shown {
            let _ = writeln!(out, "{line}");
        }
    }
    exit::OK
}

/// `ax validate FILE…`: every error of every file with its location, or each
/// DAG's jobs and next five fire times. Exit 0 if all files are valid, 1 if
/// any is not, 2 if no file was given.
pub fn validate(
    out: &mut dyn Write,
    err: &mut dyn Write,
    args: &ValidateArgs,
    as_json: bool,
) -> i32 {
    let files = &args.files;
    let jobs_dir = args.jobs_dir.as_deref();
    if files.is_empty() {
        let _ = writeln!(err, "ax validate: give at least one job file");
        return exit::USAGE;
    }
    let default_zone = match DefaultZone::read(args.config.as_deref()) {
        Ok(z) => z,
        Err(e) => {
            let _ = writeln!(err, "ax validate: --config: {e}");
            return exit::USAGE;
        }
    };
    let opts = ValidateOptions {
        pools: args.pools.clone(),
    };
    let mut parsed: Vec<DagFile> = Vec::new();
    let mut failures: Vec<(PathBuf, Vec<FileError>)> = Vec::new();
    for f in files {
        match load_file(f, jobs_dir, &opts) {
            Ok(d) => parsed.push(d),
            Err(errors) => failures.push((f.clone(), errors)),
        }
    }
    // `after` names are only checked when the whole folder is known.
    let mut cross: Vec<(String, FileError)> = Vec::new();
    if jobs_dir.is_some() {
        let refs: Vec<&DagFile> = parsed.iter().collect();
        cross = check_after(&refs);
    }
    let now = Utc::now();
    let mut docs = Vec::new();
    for d in &parsed {
        let checked = Checked::new(d, &cross, &default_zone, now);
        if as_json {
            docs.push(checked.doc());
        } else {
            checked.print(out, err);
        }
    }
    for (file, errors) in &failures {
        if as_json {
            docs.push(json!({"file": file.display().to_string(), "ok": false, "errors": errors}));
        } else {
            for e in errors {
                let _ = writeln!(err, "{e}");
            }
        }
    }
    if as_json {
        let _ = writeln!(out, "{}", Value::Array(docs));
    }
    let invalid = failures.len()
        + parsed
            .iter()
            .filter(|d| cross.iter().any(|(n, _)| *n == d.spec.name))
            .count();
    if invalid > 0 {
        if !as_json {
            let _ = writeln!(err, "{invalid} of {} file(s) invalid", files.len());
        }
        exit::FAILED
    } else {
        exit::OK
    }
}

/// The zone axd plans DAGs without their own `timezone` in: its config's
/// `timezone` (default `local`), and where that was read from.
struct DefaultZone {
    zone: Tz,
    source: String,
}

impl DefaultZone {
    /// From `config` (an `axd.toml`), else axd's default `local` resolved
    /// in this process (which may differ from axd's: its `TZ`).
    fn read(config: Option<&std::path::Path>) -> Result<DefaultZone, String> {
        let Some(path) = config else {
            let zone = parse_zone("local")?;
            return Ok(DefaultZone {
                zone,
                source: "assumed: axd's default timezone \"local\", resolved here; \
                         --config reads axd.toml's"
                    .into(),
            });
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let name = match table.get("timezone") {
            None => "local",
            Some(toml::Value::String(s)) => s.as_str(),
            Some(_) => return Err(format!("{}: `timezone` must be a string", path.display())),
        };
        let zone = parse_zone(name).map_err(|e| format!("{}: timezone: {e}", path.display()))?;
        Ok(DefaultZone {
            zone,
            source: format!("timezone {name:?} of {}", path.display()),
        })
    }
}

/// A job file that parsed: the errors found across files (`after`), its
/// zone (and where it comes from when not the file) and its next five
/// fire times.
struct Checked<'a> {
    dag: &'a DagFile,
    errors: Vec<&'a FileError>,
    zone: Tz,
    zone_source: Option<&'a str>,
    next: Vec<DateTime<Utc>>,
}

impl<'a> Checked<'a> {
    fn new(
        dag: &'a DagFile,
        cross: &'a [(String, FileError)],
        default: &'a DefaultZone,
        now: DateTime<Utc>,
    ) -> Self {
        let errors = cross
            .iter()
            .filter(|(n, _)| *n == dag.spec.name)
            .map(|(_, e)| e)
            .collect();
        let own = dag
            .spec
            .timezone
            .as_deref()
            .and_then(|z| parse_zone(z).ok());
        let zone_source = own.is_none().then_some(default.source.as_str());
        let zone = own.unwrap_or(default.zone);
        let next = dag
            .spec
            .schedule
            .as_deref()
            .and_then(|s| Schedule::parse(s).ok())
            .map(|s| s.upcoming(now, &zone, 5))
            .unwrap_or_default();
        Checked {
            dag,
            errors,
            zone,
            zone_source,
            next,
        }
    }

    /// `--json`: the DAG's document.
    fn doc(&self) -> Value {
        let spec = &self.dag.spec;
        json!({
            "file": spec.file,
            "name": spec.name,
            "ok": self.errors.is_empty(),
            "errors": self.errors,
            "jobs": spec.jobs.iter().map(|j| json!({"id": j.id, "deps": j.deps, "pool": j.pool, "priority": j.priority})).collect::<Vec<_>>(),
            "schedule": spec.schedule,
            "timezone": self.zone.name(),
            "next_fire": self.next.iter().map(|t| format_utc_ms(*t)).collect::<Vec<_>>(),
        })
    }

    /// The errors on `err`; the DAG, its jobs, schedule and upstream DAGs
    /// on `out`.
    fn print(&self, out: &mut dyn Write, err: &mut dyn Write) {
        let spec = &self.dag.spec;
        for e in &self.errors {
            let _ = writeln!(err, "{e}");
        }
        let _ = writeln!(
            out,
            "{}: DAG {:?}, {} job{}{}",
            spec.file,
            spec.name,
            spec.jobs.len(),
            if spec.jobs.len() == 1 { "" } else { "s" },
            if self.errors.is_empty() {
                ""
            } else {
                " — INVALID"
            }
        );
        for j in &spec.jobs {
            let deps = if j.deps.is_empty() {
                String::new()
            } else {
                format!("  after {}", j.deps.join(", "))
            };
            let _ = writeln!(
                out,
                "  job {} [pool {}, priority {}]{deps}",
                j.id, j.pool, j.priority
            );
        }
        if spec
            .schedule
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("@reboot"))
        {
            let _ = writeln!(out, "  schedule \"@reboot\": once per boot of the machine");
        } else if let Some(s) = &spec.schedule {
            let source = self
                .zone_source
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  schedule {s:?} in {}{source}; next fire times:",
                self.zone.name()
            );
            for t in &self.next {
                let _ = writeln!(out, "    {}", format_in_zone(*t, &self.zone));
            }
            if let Some(j) = spec.jitter {
                let _ = writeln!(
                    out,
                    "  each slot starts after a random delay of up to {} (jitter)",
                    ax_shared::duration::format_duration(j)
                );
            }
        }
        if !spec.after.is_empty() {
            let _ = writeln!(out, "  triggered after: {}", spec.after.join(", "));
        }
    }
}
