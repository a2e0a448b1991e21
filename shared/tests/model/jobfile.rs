//! docs/job-files.md: job files, defaults, shorthand, and every validation error with
//! its line and column.

use ax_shared::jobfile::{
    DagFile, FileError, ValidateOptions, check_after, is_ignored_name, parse_dag,
};
use ax_shared::*;
use proptest::prelude::*;
use std::time::Duration;

fn opts() -> ValidateOptions {
    ValidateOptions {
        pools: Some(vec!["default".into(), "io".into()]),
    }
}

fn parse(text: &str) -> Result<DagFile, Vec<FileError>> {
    parse_dag("weekly-report", "weekly-report.toml", text, &opts())
}

fn errors(text: &str) -> Vec<String> {
    parse(text)
        .expect_err("should be rejected")
        .iter()
        .map(|e| e.to_string())
        .collect()
}

const WEEKLY: &str = r#"
description = "Weekly sales report"
schedule    = "0 8 * * MON"
timezone    = "Asia/Shanghai"
catchup     = "latest"
overlap     = "skip"
enabled     = true
on_failure  = "notify-send 'ax: $AX_DAG failed'"
on_success  = ""
owner       = "data-team"
tags        = ["report"]

[defaults]
pool     = "default"
priority = 50
timeout  = "10m"
retries  = 2
backoff  = { kind = "exponential", base = "1s", max = "30s", jitter = "500ms" }

[[job]]
id      = "fetch_sales"
command = "python3 fetch.py sales"
cwd     = "/srv/report"
env     = { REGION = "cn" }

[[job]]
id   = "fetch_stock"
argv = ["python3", "fetch.py", "stock"]
pool = "io"

[[job]]
id       = "calc_report"
command  = "python3 calc.py"
deps     = ["fetch_sales", "fetch_stock"]
dep_mode = "any"
priority = 70
timeout  = "none"
heartbeat = "30s"
kill_grace = "2s"
retry_on = [75, 111]
preemptible = true
"#;

#[test]
fn full_file_with_defaults() {
    let dag = parse(WEEKLY).unwrap().spec;
    assert_eq!(dag.name, "weekly-report");
    assert_eq!(dag.schedule.as_deref(), Some("0 8 * * MON"));
    assert_eq!(dag.timezone.as_deref(), Some("Asia/Shanghai"));
    assert_eq!(dag.catchup, Catchup::Latest);
    assert_eq!(dag.overlap, Overlap::Skip);
    assert_eq!(dag.on_success, None, "empty hook means none");
    assert_eq!(dag.tags, vec!["report"]);
    assert_eq!(dag.jobs.len(), 3);
    let sales = &dag.jobs[0];
    assert_eq!(sales.exec, Exec::Shell("python3 fetch.py sales".into()));
    assert_eq!(
        sales.cwd.as_deref(),
        Some(std::path::Path::new("/srv/report"))
    );
    assert_eq!(sales.env.get("REGION").map(String::as_str), Some("cn"));
    assert_eq!(sales.timeout, Timeout::After(Duration::from_secs(600)));
    assert_eq!(sales.retries, 2);
    assert_eq!(sales.pool, "default");
    let stock = &dag.jobs[1];
    assert_eq!(
        stock.exec,
        Exec::Argv(vec!["python3".into(), "fetch.py".into(), "stock".into()])
    );
    assert_eq!(stock.pool, "io");
    let calc = &dag.jobs[2];
    assert_eq!(calc.deps, vec!["fetch_sales", "fetch_stock"]);
    assert_eq!(calc.dep_mode, DepMode::Any);
    assert_eq!(calc.priority, 70);
    assert_eq!(calc.timeout, Timeout::Never);
    assert_eq!(calc.heartbeat, Some(Duration::from_secs(30)));
    assert_eq!(calc.kill_grace, Duration::from_secs(2));
    assert_eq!(calc.retry_on, Some(vec![75, 111]));
    assert!(calc.preemptible);
}

#[test]
fn defaults_of_the_spec_table() {
    let dag = parse("[[job]]\nid = \"a\"\ncommand = \"true\"\n")
        .unwrap()
        .spec;
    let job = &dag.jobs[0];
    assert_eq!(job.priority, 50);
    assert_eq!(job.pool, "default");
    assert_eq!(job.timeout, Timeout::Default);
    assert_eq!(job.kill_grace, Duration::from_secs(10));
    assert_eq!(job.retries, 0);
    assert_eq!(job.backoff, Backoff::default());
    assert_eq!(job.dep_mode, DepMode::All);
    assert!(!job.preemptible);
    assert_eq!(dag.catchup, Catchup::Latest);
    assert_eq!(dag.overlap, Overlap::Skip);
    assert!(dag.enabled);
}

#[test]
fn single_job_shorthand() {
    let text = "schedule = \"@daily\"\ncommand = \"backup.sh\"\nretries = 3\ntimeout = \"1h30m\"\n";
    let dag = parse_dag("team-a/backup", "team-a/backup.toml", text, &opts())
        .unwrap()
        .spec;
    assert_eq!(dag.name, "team-a/backup");
    assert_eq!(dag.jobs.len(), 1);
    assert_eq!(dag.jobs[0].id, "backup");
    assert_eq!(dag.jobs[0].retries, 3);
    assert_eq!(
        dag.jobs[0].timeout,
        Timeout::After(Duration::from_secs(5400))
    );
}

#[test]
fn every_error_is_listed_with_its_location() {
    let text = r#"schedule = "0 0 31 2 *"
timezone = "Mars/Olympus"
colour = "red"
[[job]]
id = "a"
command = "true"
priority = 101
timeout = "ten"
pool = "gpu"
[[job]]
id = "a"
command = "x"
argv = ["x"]
[[job]]
id = "b"
deps = ["nope", "b"]
[[job]]
id = "c"
command = "true"
cwd = "relative/dir"
dep_mode = "some"
"#;
    let errs = errors(text);
    let want = [
        "weekly-report.toml:3:1: unknown key `colour`",
        "weekly-report.toml:1:12: schedule: never fires",
        "weekly-report.toml:2:12: timezone: unknown time zone \"Mars/Olympus\"",
        "weekly-report.toml:7:12: priority 101 out of range 1-100",
        "weekly-report.toml:8:11: timeout: bad duration \"ten\"",
        "weekly-report.toml:9:8: unknown pool \"gpu\"",
        "weekly-report.toml:13:8: job \"a\" has both `command` and `argv`",
        "weekly-report.toml:14:1: job \"b\" needs `command` or `argv`",
        "weekly-report.toml:20:7: cwd \"relative/dir\" must be an absolute path",
        "weekly-report.toml:21:12: dep_mode: \"some\" is not one of all, any",
        "weekly-report.toml:11:6: duplicate job id \"a\" (first defined on line 5)",
        "weekly-report.toml:16:17: job \"b\" depends on itself",
        "weekly-report.toml:16:9: job \"b\": unknown dep \"nope\"",
    ];
    for w in want {
        assert!(
            errs.iter().any(|e| e.starts_with(w)),
            "missing {w:?} in {errs:#?}"
        );
    }
    assert_eq!(errs.len(), want.len(), "{errs:#?}");
}

#[test]
fn cycles_are_named_as_a_path() {
    let text = r#"
[[job]]
id = "a"
command = "true"
deps = ["c"]
[[job]]
id = "b"
command = "true"
deps = ["a"]
[[job]]
id = "c"
command = "true"
deps = ["b"]
[[job]]
id = "d"
command = "true"
deps = ["a"]
"#;
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("cycle: a -> b -> c -> a"), "{errs:?}");
    assert!(errs[0].starts_with("weekly-report.toml:3:6:"), "{errs:?}");
}

#[test]
fn toml_syntax_errors_have_line_and_column() {
    let errs = errors("[[job]]\nid = \"a\"\ncommand = \"true\npriority = 3\n");
    assert!(errs[0].starts_with("weekly-report.toml:3:"), "{errs:?}");
    assert!(errs[0].contains("TOML syntax"), "{errs:?}");
}

#[test]
fn wrong_types_and_shapes() {
    let errs = errors("job = 3\n");
    assert!(
        errs[0].contains("`job` must be an array of tables"),
        "{errs:?}"
    );
    let errs = errors(
        "[[job]]\nid = 1\ncommand = \"x\"\nretries = \"two\"\nbackoff = { kind = \"linear\", step = \"1s\" }\nenv = { A = 1 }\n",
    );
    for needle in [
        "`id` must be a string",
        "`retries` must be an integer",
        "backoff.kind: \"linear\" is not one of",
        "unknown key `step` in backoff",
        "`env value` must be a string",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(needle)),
            "missing {needle}: {errs:#?}"
        );
    }
    let errs = errors("");
    assert!(errs[0].contains("empty file"), "{errs:?}");
    let errs = errors("description = \"x\"\n");
    assert!(errs[0].contains("no jobs"), "{errs:?}");
    let errs = errors("[[job]]\nid = \"bad id!\"\ncommand = \"x\"\n");
    assert!(errs[0].contains("bad job id"), "{errs:?}");
    let errs = errors("command = \"x\"\n[[job]]\nid = \"a\"\ncommand = \"y\"\n");
    assert!(
        errs.iter().any(|e| e.contains("cannot also have [[job]]")),
        "{errs:?}"
    );
}

#[test]
fn pools_are_only_checked_when_known() {
    let text = "[[job]]\nid = \"a\"\ncommand = \"x\"\npool = \"gpu\"\n";
    assert!(parse_dag("d", "d.toml", text, &ValidateOptions::default()).is_ok());
    assert!(parse_dag("d", "d.toml", text, &opts()).is_err());
}

#[test]
fn after_references_and_cycles_across_files() {
    let a = parse_dag("a", "a.toml", "after = [\"b\"]\ncommand = \"x\"\n", &opts()).unwrap();
    let b = parse_dag("b", "b.toml", "after = [\"c\"]\ncommand = \"x\"\n", &opts()).unwrap();
    let c = parse_dag(
        "c",
        "c.toml",
        "after = [\"a\", \"zzz\"]\ncommand = \"x\"\n",
        &opts(),
    )
    .unwrap();
    let errs = check_after(&[&a, &b, &c]);
    let text: Vec<String> = errs.iter().map(|(_, e)| e.to_string()).collect();
    assert!(
        text.iter()
            .any(|e| e == "c.toml:1:15: after: unknown DAG \"zzz\""),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|e| e.contains("after cycle: a -> b -> c -> a")),
        "{text:?}"
    );
    let self_ref = parse_dag("a", "a.toml", "after = [\"a\"]\ncommand = \"x\"\n", &opts());
    assert!(self_ref.is_err());
}

#[test]
fn ignored_file_names() {
    for name in [
        ".hidden.toml",
        "x.toml~",
        "x.swp",
        "x.tmp",
        "x.part",
        "x.bak",
        "notes.txt",
        ".x.toml.swp",
    ] {
        assert!(is_ignored_name(name), "{name}");
    }
    for name in ["etl.toml", "weekly-report.toml"] {
        assert!(!is_ignored_name(name), "{name}");
    }
}

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn parser_never_panics_on_near_valid_files(
        key in "[a-z_]{1,10}",
        value in prop_oneof![Just("\"x\"".to_string()), Just("3".to_string()), Just("[\"a\"]".to_string()), Just("{ kind = \"x\" }".to_string()), Just("true".to_string())],
    ) {
        let text = format!("[[job]]\nid = \"a\"\ncommand = \"true\"\n{key} = {value}\n[defaults]\n{key} = {value}\n");
        let _ = parse(&text);
    }
}

/// Found by the `jobfile` fuzz target (`tests/fuzz_regressions/jobfile/`):
/// a schedule with an empty list item hung the parser for seconds in
/// croner's search. It is now an error at the schedule's line.
#[test]
fn fuzz_regression_empty_cron_list_item_is_a_located_error() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/jobfile");
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let errors = parse(&text).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("empty list item") && e.line == Some(2)),
            "{errors:?}"
        );
    }
}

#[test]
fn env_file_and_secret_env_are_read_from_jobs_and_defaults() {
    let dag = parse(
        r#"
[defaults]
env_file = "/etc/ax/shared.env"
secret_env = ["DB_PASSWORD"]

[[job]]
id = "load"
command = "load.sh"
env = { API_KEY = "k-123456" }
secret_env = ["API_KEY", "DB_PASSWORD"]

[[job]]
id = "report"
command = "report.sh"
env_file = "/srv/report/report.env"
"#,
    )
    .unwrap();
    let load = dag.spec.job("load").unwrap();
    assert_eq!(
        load.env_file.as_deref(),
        Some("/etc/ax/shared.env".as_ref())
    );
    assert_eq!(load.secret_env, ["API_KEY", "DB_PASSWORD"]);
    let report = dag.spec.job("report").unwrap();
    assert_eq!(
        report.env_file.as_deref(),
        Some("/srv/report/report.env".as_ref())
    );
    assert_eq!(report.secret_env, ["DB_PASSWORD"], "from [defaults]");

    let shorthand = parse("command = \"x\"\nenv_file = \"/run/secrets/x.env\"\n").unwrap();
    assert!(shorthand.spec.jobs[0].env_file.is_some());
    assert!(shorthand.spec.jobs[0].secret_env.is_empty());
    assert_eq!(JobSpec::new("j", Exec::Shell("x".into())).env_file, None);
}

#[test]
fn env_file_must_be_absolute_and_secret_env_must_name_variables() {
    let errs = errors(
        r#"
[[job]]
id = "a"
command = "x"
env_file = "secrets.env"
secret_env = ["GOOD", "BAD=NAME", "", 7]

[[job]]
id = "b"
command = "x"
secret_env = "TOKEN"
env_file = 3
"#,
    );
    assert_eq!(
        errs,
        [
            "weekly-report.toml:5:12: env_file \"secrets.env\" must be an absolute path",
            "weekly-report.toml:6:23: secret_env: bad environment variable name \"BAD=NAME\"",
            "weekly-report.toml:6:35: secret_env: bad environment variable name \"\"",
            "weekly-report.toml:6:39: `secret_env entry` must be a string, not integer",
            "weekly-report.toml:12:12: `env_file` must be a string, not integer",
            "weekly-report.toml:11:14: `secret_env` must be an array, not string",
        ]
    );
}

#[test]
fn history_keep_runs_is_read_from_its_table() {
    let f = parse("[history]\nkeep_runs = 30\n[[job]]\nid = \"a\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(f.spec.keep_runs, Some(30));
    let f = parse("[[job]]\nid = \"a\"\ncommand = \"true\"\n").unwrap();
    assert_eq!(
        f.spec.keep_runs, None,
        "no [history]: only logs.retain prunes"
    );
}

#[test]
fn history_keep_runs_is_validated() {
    let job = "[[job]]\nid = \"a\"\ncommand = \"true\"\n";
    let e = errors(&format!("[history]\nkeep_runs = 0\n{job}"));
    assert!(
        e.iter()
            .any(|m| m.contains("history.keep_runs must be between 1")),
        "{e:?}"
    );
    let e = errors(&format!("[history]\nkeep_runs = -3\n{job}"));
    assert!(
        e.iter()
            .any(|m| m.contains("history.keep_runs must be between 1")),
        "{e:?}"
    );
    let e = errors(&format!("[history]\nkeep_runs = \"ten\"\n{job}"));
    assert!(e.iter().any(|m| m.contains("history.keep_runs")), "{e:?}");
    let e = errors(&format!("[history]\nkeep = 3\n{job}"));
    assert!(
        e.iter()
            .any(|m| m.contains("unknown key `keep` in [history]")),
        "{e:?}"
    );
    let e = errors(&format!("history = 5\n{job}"));
    assert!(
        e.iter().any(|m| m.contains("`history` must be a table")),
        "{e:?}"
    );
}

#[test]
fn dag_names_follow_one_rule_for_files_and_submits() {
    use ax_shared::jobfile::{MAX_DAG_NAME, check_dag_name};
    for ok in ["etl", "team-a/etl", "日次", &"x".repeat(MAX_DAG_NAME)] {
        assert!(check_dag_name(ok).is_ok(), "{ok:?}");
    }
    for (bad, says) in [
        ("", "empty"),
        ("two\nlines", "control"),
        ("nul\0", "control"),
        ("esc\u{1b}[2J", "control"),
        (&"x".repeat(MAX_DAG_NAME + 1), "at most"),
    ] {
        let e = check_dag_name(bad).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
    // A job file whose name breaks the rule is reported, not loaded.
    let dir = std::env::temp_dir().join(format!("ax-dag-name-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad\nname.toml");
    std::fs::write(&path, "command = \"true\"\n").unwrap();
    let errors = ax_shared::jobfile::load_file(&path, Some(&dir), &Default::default()).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(errors[0].message.contains("file name"), "{:?}", errors[0]);
}

/// A chain of `n` jobs, each after the one before; `dep_of_first` is the
/// first job's dep (`None`: it has none).
fn chain(n: usize, dep_of_first: Option<&str>) -> String {
    let mut text = String::with_capacity(n * 56);
    for i in 0..n {
        text.push_str(&format!("[[job]]\nid = \"j{i}\"\ncommand = \"true\"\n"));
        match (i, dep_of_first) {
            (0, Some(d)) => text.push_str(&format!("deps = [\"{d}\"]\n")),
            (0, None) => {}
            _ => text.push_str(&format!("deps = [\"j{}\"]\n", i - 1)),
        }
    }
    text
}

/// Validation is linear in the file: a 100,000-job chain (about 5 MiB)
/// is checked in one pass over ids, deps and cycles. (A search by id per
/// dep made this quadratic; `ax-bench jobsdir` measures the time.)
#[test]
fn a_chain_of_100k_jobs_validates() {
    let n = 100_000;
    let dag = parse_dag("big", "big.toml", &chain(n, None), &opts()).unwrap();
    assert_eq!(dag.spec.jobs.len(), n);
    assert_eq!(dag.spec.jobs[n - 1].deps, [format!("j{}", n - 2)]);
}

/// The same chain closed into a cycle is one error naming all of it, and
/// its line; errors in every job of a big file each get their line
/// without reading the file again per error.
#[test]
fn a_100k_job_cycle_and_100k_errors_are_reported_in_one_pass() {
    let n = 100_000;
    let errs = parse_dag("big", "big.toml", &chain(n, Some("j99999")), &opts()).unwrap_err();
    assert_eq!(errs.len(), 1, "{:?}", &errs[..errs.len().min(3)]);
    assert_eq!(errs[0].line, Some(2), "{:?}", errs[0].line);
    assert!(
        errs[0].message.starts_with("cycle: j0 -> j1 -> j2 -> "),
        "{}",
        &errs[0].message[..80]
    );
    assert!(errs[0].message.ends_with(" -> j99999 -> j0"));

    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[job]]\nid = \"j{i}\"\ncommand = \"true\"\ndeps = [\"x{i}\"]\n"
        ));
    }
    let errs = parse_dag("big", "big.toml", &text, &opts()).unwrap_err();
    assert_eq!(errs.len(), n);
    let last = &errs[n - 1];
    assert_eq!((last.line, last.column), (Some(4 * n), Some(9)), "{last:?}");
    assert_eq!(
        last.message,
        format!("job \"j{}\": unknown dep \"x{}\"", n - 1, n - 1)
    );
}

#[test]
fn user_group_umask_shell_fall_back_from_job_to_defaults_to_the_dag() {
    let text = r#"
user = "www-data"
umask = "027"
[defaults]
group = "adm"
[[job]]
id = "a"
command = "true"
[[job]]
id = "b"
command = "true"
user = "postgres"
shell = "/bin/bash"
umask = "0077"
"#;
    let dag = parse_dag("d", "d.toml", text, &opts()).unwrap();
    let a = &dag.spec.jobs[0];
    assert_eq!(a.user.as_deref(), Some("www-data"));
    assert_eq!(a.group.as_deref(), Some("adm"));
    assert_eq!(a.umask, Some(0o027));
    assert_eq!(a.shell, None);
    let b = &dag.spec.jobs[1];
    assert_eq!(b.user.as_deref(), Some("postgres"));
    assert_eq!(b.umask, Some(0o077));
    assert_eq!(b.shell.as_deref(), Some(std::path::Path::new("/bin/bash")));
}

#[test]
fn bad_user_and_umask_are_errors_that_name_the_key() {
    let text = "command = \"true\"\nuser = \"1000\"\numask = \"999\"\nshell = \"bash\"\n";
    let errors = parse_dag("d", "d.toml", text, &opts()).unwrap_err();
    let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(
        all.iter()
            .any(|e| e.contains("d.toml:2:8: `user`: bad user name \"1000\"")),
        "{all:?}"
    );
    assert!(
        all.iter().any(|e| e.contains("d.toml:3:9: `umask`")),
        "{all:?}"
    );
    assert!(all.iter().any(|e| e.contains("shell")), "{all:?}");
}

#[test]
fn an_unknown_key_suggests_the_nearest_valid_one() {
    let text = "overlp = \"skip\"\nschedul = \"@daily\"\n[defaults]\nretires = 2\n[[job]]\nid = \"a\"\ncomand = \"true\"\ncommand = \"true\"\nbackoff = { knd = \"fixed\" }\n[history]\nkeep_run = 3\n";
    let errs = errors(text);
    for want in [
        "1:1: unknown key `overlp`: did you mean `overlap`?",
        "2:1: unknown key `schedul`: did you mean `schedule`?",
        "4:1: unknown key `retires` in [defaults]: did you mean `retries`?",
        "7:1: unknown key `comand` in [[job]]: did you mean `command`?",
        "unknown key `knd` in backoff: did you mean `kind`?",
        "11:1: unknown key `keep_run` in [history]: did you mean `keep_runs`?",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{want} not in {errs:#?}"
        );
    }
    let far = errors("colour = \"blue\"\n[[job]]\nid = \"a\"\ncommand = \"true\"\n");
    assert!(
        far.iter()
            .any(|e| e.contains("unknown key `colour` (valid: description, schedule")),
        "a key close to none lists the valid ones: {far:#?}"
    );
}

#[test]
fn cron_features_jitter_notify_and_reboot() {
    let f = parse(
        "schedule = \"0 */12 * * *\"\njitter = \"12h\"\nnotify = { mail = [\"ops@example.com\", \"root\"], on = [\"failure\", \"output\"] }\ncommand = \"certbot -q renew\"\n",
    )
    .unwrap();
    assert_eq!(f.spec.jitter, Some(Duration::from_secs(12 * 3600)));
    assert_eq!(
        f.spec.notify,
        Some(Notify {
            mail: vec!["ops@example.com".into(), "root".into()],
            on: vec![NotifyOn::Failure, NotifyOn::Output],
        })
    );
    let f = parse("schedule = \"@reboot\"\nnotify = { mail = [] }\ncommand = \"warm\"\n").unwrap();
    assert_eq!(f.spec.schedule.as_deref(), Some("@reboot"));
    assert_eq!(
        f.spec.notify,
        Some(Notify {
            mail: vec![],
            on: vec![NotifyOn::Failure]
        }),
        "`mail = []` is kept: it turns the daemon's default off"
    );
    let errs = errors(
        "jitter = \"5m\"\nnotify = { mail = [\"a b@c\"], on = [\"always\"], cc = [] }\ncommand = \"x\"\n",
    );
    for want in [
        "1:10: jitter delays a schedule's slots: set `schedule` too",
        "2:20: notify.mail: mail address \"a b@c\" must be",
        "2:36: notify.on: \"always\" is not one of failure, success, output",
        "2:47: unknown key `cc` in notify (valid: mail, on)",
    ] {
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{want} not in {errs:#?}"
        );
    }
    let errs = errors("schedule = \"@daily\"\njitter = \"300000000d\"\ncommand = \"x\"\n");
    assert!(
        errs.iter().any(|e| e.contains("2:10: jitter: at most 31d")),
        "{errs:#?}"
    );
    let errs = errors("schedule = \"@daily\"\nnotify = \"ops@example.com\"\ncommand = \"x\"\n");
    assert!(
        errs.iter()
            .any(|e| e.contains("2:10: `notify` must be a table")),
        "{errs:#?}"
    );
}

#[test]
fn a_huge_unknown_key_is_cut_in_its_error_and_costs_no_suggestion() {
    let key = "k".repeat(200_000);
    let text = format!("{key} = 1\n[[job]]\nid = \"a\"\ncommand = \"true\"\n");
    let errs = errors(&text);
    let e = errs.iter().find(|e| e.contains("unknown key")).unwrap();
    assert!(e.len() < 2_000, "{}", &e[..200]);
    assert!(
        e.contains(&format!("`{}…`", "k".repeat(64))),
        "{}",
        &e[..200]
    );
}
