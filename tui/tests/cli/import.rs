//! `ax import cron` as a user runs it (docs/operations.md, "Migrating from
//! cron"): the crontab of the migration example, split into a system
//! crontab, a cron.d file and a user's crontab (`fixtures/cron/`), becomes
//! job files that the real `ax validate` accepts; stdin, failures, the
//! `%` rule end to end, and usage errors.
//!
//! `ax validate` checks that `user` is a well-formed name, not that the
//! account exists (docs/job-files.md, "Validation": only axd's load does),
//! so `user = "www-data"` or `"deploy"` validates on any machine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::parts;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/fixtures/cron")
}

/// `ax args` in folder `cwd` with `stdin`: exit code, stdout, stderr.
fn ax_in(cwd: &Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    parts(&child.wait_with_output().unwrap())
}

fn toml_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The summary's caveat lines as (place, the caveat's first words).
fn caveats(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter_map(|l| l.split_once(": caveat: "))
        .map(|(place, c)| {
            let head = c.split([':', ' ']).next().unwrap_or_default();
            (place.to_string(), head.to_string())
        })
        .collect()
}

#[test]
fn the_migration_crontab_imports_into_files_ax_validate_accepts() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let (code, stdout, stderr) = ax_in(
        &fixtures(),
        &[
            "import",
            "cron",
            "--out",
            dir,
            "etc-crontab",
            "cron.d/certbot",
        ],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.starts_with("8 entries converted, 5 with caveats, 0 could not be converted\n"),
        "{stderr}"
    );
    let want: Vec<(String, String)> = [
        ("etc-crontab:6", "run-parts"),
        ("etc-crontab:7", "anacron"),
        ("etc-crontab:7", "run-parts"),
        ("etc-crontab:11", "@reboot"),
        ("etc-crontab:12", "flock"),
        ("cron.d/certbot:2", "random"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    assert_eq!(caveats(&stderr), want, "{stderr}");
    assert_eq!(
        stdout.lines().count(),
        8,
        "one path per file written: {stdout}"
    );

    let (code, _, stderr) = ax_in(
        &fixtures(),
        &[
            "import",
            "cron",
            "--user",
            "alice",
            "--out",
            dir,
            "alice.crontab",
        ],
        "",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        "2 entries converted, 0 with caveats, 0 could not be converted\n"
    );
    let names = toml_files(out.path());
    assert_eq!(
        names,
        [
            "alice-poll-feed.toml",
            "alice-standup-reminder.toml",
            "deploy-run.toml",
            "postgres-pg_dump.toml",
            "root-backup.toml",
            "root-certbot.toml",
            "root-cron.daily.toml",
            "root-cron.hourly.toml",
            "root-warm-cache.toml",
            "www-data-php.toml",
        ]
    );

    let read = |name: &str| -> (String, toml::Table) {
        let text = std::fs::read_to_string(out.path().join(name)).unwrap();
        let table = text.parse().unwrap();
        (text, table)
    };
    let (text, pg) = read("postgres-pg_dump.toml");
    assert!(
        text.starts_with("# Imported by `ax import cron` from etc-crontab"),
        "{text}"
    );
    assert!(
        text.contains("#   etc-crontab:9: 30 2 * * 1-5    postgres  pg_dump -Fc app > /var/backups/app-$(date +\\%F).dump\n"),
        "the header quotes the line: {text}"
    );
    assert_eq!(pg["schedule"].as_str(), Some("30 2 * * 1-5"));
    assert_eq!(pg["timezone"].as_str(), Some("Europe/Berlin"));
    assert_eq!(pg["user"].as_str(), Some("postgres"));
    assert_eq!(pg["shell"].as_str(), Some("/bin/bash"));
    assert_eq!(
        pg["command"].as_str(),
        Some("pg_dump -Fc app > /var/backups/app-$(date +%F).dump")
    );
    assert_eq!(pg["timeout"].as_str(), Some("none"));
    assert_eq!(pg["overlap"].as_str(), Some("allow"));
    assert_eq!(pg["catchup"].as_str(), Some("none"));
    assert_eq!(
        pg["env"]["PATH"].as_str(),
        Some("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    );
    assert_eq!(pg["notify"]["mail"][0].as_str(), Some("ops@example.com"));
    assert_eq!(pg["notify"]["on"][0].as_str(), Some("output"));

    let (text, certbot) = read("root-certbot.toml");
    assert_eq!(certbot["jitter"].as_str(), Some("12h"));
    assert_eq!(
        certbot["command"].as_str(),
        Some("test -x /usr/bin/certbot && certbot -q renew")
    );
    assert!(certbot.get("timezone").is_none() && certbot.get("notify").is_none());
    assert!(text.contains("# No MAILTO"), "{text}");

    let (text, standup) = read("alice-standup-reminder.toml");
    assert_eq!(standup["user"].as_str(), Some("alice"));
    assert_eq!(standup["schedule"].as_str(), Some("0 9 * * MON-FRI"));
    // MAILTO="": no mail, whatever axd.toml's [notify] says.
    assert_eq!(standup["notify"]["mail"].as_array().map(Vec::len), Some(0));
    assert!(
        text.contains("# MAILTO=\"\": cron mailed nothing"),
        "{text}"
    );
    assert_eq!(
        read("root-warm-cache.toml").1["schedule"].as_str(),
        Some("@reboot")
    );

    // Every file passes the real `ax validate`, offline.
    let paths: Vec<String> = names
        .iter()
        .map(|n| out.path().join(n).display().to_string())
        .collect();
    let mut args = vec!["validate"];
    args.extend(paths.iter().map(String::as_str));
    let (code, stdout, stderr) = ax_in(out.path(), &args, "");
    assert_eq!(
        code, 0,
        "ax validate refused an imported file:\n{stderr}\n{stdout}"
    );
}

#[test]
fn stdin_is_read_with_a_dash_and_files_go_to_stdout() {
    let crontab = "CRON_TZ=UTC\n0 1 * * * /srv/a.sh\n0 2 * * * /srv/a.sh\n";
    let tmp = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = ax_in(tmp.path(), &["import", "cron", "-"], crontab);
    assert_eq!(code, 0, "{stderr}");
    // Without --user, whose jobs these are is unknown: each says so.
    assert!(
        stderr.starts_with("2 entries converted, 2 with caveats"),
        "{stderr}"
    );
    assert_eq!(
        stderr
            .matches("a user's crontab without --user NAME")
            .count(),
        2,
        "{stderr}"
    );
    // Two files, named apart, each after its `# file:` line.
    let headers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("# file: "))
        .collect();
    assert_eq!(headers, ["# file: a.toml", "# file: a-2.toml"]);
    assert!(
        stdout.contains("#   <stdin>:3: 0 2 * * * /srv/a.sh\n"),
        "{stdout}"
    );
    // Each part between the headers is a job file on its own.
    for part in stdout.split("# file: ").skip(1) {
        let table: toml::Table = part.split_once('\n').unwrap().1.parse().unwrap();
        assert_eq!(table["timezone"].as_str(), Some("UTC"));
        assert!(table.get("user").is_none(), "no --user: no user key");
    }
    // No file at all reads stdin too.
    let (code, stdout, _) = ax_in(tmp.path(), &["import", "cron", "--user-format"], crontab);
    assert_eq!(code, 0);
    assert_eq!(stdout.matches("# file: ").count(), 2);
}

#[test]
fn entries_that_cannot_be_converted_are_named_with_file_and_line_and_exit_1() {
    let crontab = "\
0 1 * * * root /ok.sh
61 * * * * root /bad-minute.sh
0 9 * * root /too-few.sh
@Daily root /bad-macro.sh
0 1 * * * /no-user-column.sh
X=\"open
0 1 * * * root %only-stdin
CRON_TZ=Mars/Olympus
0 2 * * * root /after-bad-zone.sh
CRON_TZ=UTC
0 0 31 2 * root /never.sh
";
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("crontab"), crontab).unwrap();
    let (code, stdout, stderr) = ax_in(tmp.path(), &["import", "cron", "crontab"], "");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with("1 entry converted, 0 with caveats, 8 could not be converted\n"),
        "{stderr}"
    );
    assert_eq!(stdout.matches("# file: ").count(), 1, "{stdout}");
    for (line, why) in [
        (2, "minute field \"61\": 61 is out of range 0-59"),
        (3, "not a user name"),
        (4, "unknown macro @Daily"),
        (5, "not a user name"),
        (6, "opening \" is not closed"),
        (7, "the command is empty"),
        (9, "unknown time zone \"Mars/Olympus\""),
        (11, "schedule \"0 0 31 2 *\": never fires"),
    ] {
        let place = format!("crontab:{line}: cannot convert: ");
        let found = stderr
            .lines()
            .find(|l| l.starts_with(&place))
            .unwrap_or_else(|| panic!("no failure for line {line}:\n{stderr}"));
        assert!(found.contains(why), "line {line}: {found}");
    }
    // A missing file is named too.
    let (code, _, stderr) = ax_in(tmp.path(), &["import", "cron", "nothing-here"], "");
    assert_eq!(code, 1);
    assert!(
        stderr.contains("nothing-here: cannot convert: cannot read"),
        "{stderr}"
    );
}

#[test]
fn cron_stdin_and_quoting_survive_toml_and_the_shell() {
    // cron's `%` rule: `\%` a literal %, then the lines after the first
    // unescaped `%` on stdin; quotes, backslashes and `'''` in the text.
    let crontab = concat!(
        r#"* * * * * cat > out; printf '\%s\n' "'''\" \\" >> out"#,
        r#"%it's 'quoted'%back\slash """ \%d%%"#,
        "\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = ax_in(tmp.path(), &["import", "cron", "--user-format"], crontab);
    assert_eq!(code, 0, "{stderr}");
    let body = stdout.split_once('\n').unwrap().1;
    let table: toml::Table = body.parse().unwrap();
    let command = table["command"].as_str().unwrap();
    let ran = Command::new("/bin/sh")
        .args(["-c", command])
        .current_dir(tmp.path())
        .status()
        .unwrap();
    assert!(ran.success());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("out")).unwrap(),
        "it's 'quoted'\nback\\slash \"\"\" %d\n\n'''\" \\\n",
        "the job gets cron's stdin and its command's own output"
    );
    // The file validates as it is.
    let file = tmp.path().join("job.toml");
    std::fs::write(&file, body).unwrap();
    let (code, _, stderr) = ax_in(tmp.path(), &["validate", file.to_str().unwrap()], "");
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn an_existing_file_is_not_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("jobs");
    let crontab = "0 1 * * * /srv/nightly.sh\n";
    let args = ["import", "cron", "--out", "jobs", "--user", "bob", "-"];
    let (code, stdout, _) = ax_in(tmp.path(), &args, crontab);
    assert_eq!((code, stdout.trim()), (0, "jobs/bob-nightly.toml"));
    std::fs::write(dir.join("bob-nightly.toml"), "# mine\n").unwrap();
    let (code, _, stderr) = ax_in(tmp.path(), &args, crontab);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with("0 entries converted, 0 with caveats, 1 could not be converted\n")
            && stderr.contains("<stdin>:1: cannot convert: cannot write jobs/bob-nightly.toml"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("bob-nightly.toml")).unwrap(),
        "# mine\n"
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["import", "cron", "--system", "--user-format", "-"][..],
        &["import", "cron", "--bogus"],
        &["import", "cron", "--user", "Not A Name", "-"],
        &["import"],
    ] {
        let (code, _, stderr) = ax_in(tmp.path(), args, "");
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(!stderr.is_empty());
    }
}

#[test]
fn control_characters_stay_exact_in_toml_and_escaped_in_comments() {
    // A command with ESC, DEL, a tab and a CR (lines end at \n only, as
    // for cron), and a sleep whose caveat quotes it.
    let command = "echo '\u{1b}[31mred\u{7f}'\t'''x''' \"\\\\\" \r";
    // The second line's caveat quotes its command, ESC and all.
    let crontab =
        format!("0 1 * * * sleep $((RANDOM \\% 5)) | {command}\n0 2 * * * echo '\u{1b}]0;x%y'\n");
    let tmp = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = ax_in(tmp.path(), &["import", "cron", "--user-format"], &crontab);
    assert_eq!(code, 0, "{stderr}");
    let first = stdout.split("# file: ").nth(1).unwrap();
    let body = first.split_once('\n').unwrap().1;
    let table: toml::Table = body.parse().unwrap();
    assert_eq!(
        table["command"].as_str(),
        Some(format!("sleep $((RANDOM % 5)) | {command}").as_str())
    );
    for line in stdout.lines().filter(|l| l.starts_with('#')) {
        assert!(
            !line.contains(['\u{1b}', '\u{7f}', '\r']),
            "a raw control character in a comment: {line:?}"
        );
    }
    assert!(stdout.contains("\\e[31mred\\x7f"), "{stdout}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.contains("<stdin>:2: caveat: an unescaped % inside quotes ends the command, as cron reads it (`echo '\\e]0;x`)"),
        "{stderr}"
    );
    assert!(stderr.contains("caveat: random sleep"), "{stderr}");
}

#[test]
fn a_users_crontab_with_a_root_column_never_becomes_a_root_job() {
    // In a user's crontab `root` is the command's first word: cron runs
    // `root /home/alice/x.sh` as alice. --user, and standard input without
    // --system, never guess a user column.
    let dir = tempfile::tempdir().unwrap();
    let tab = "* * * * * root /home/alice/x.sh\n";
    for args in [
        &["import", "cron", "--user", "alice", "-"][..],
        &["import", "cron", "-"][..],
    ] {
        let (code, out, err) = ax_in(dir.path(), args, tab);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!out.contains("user = \"root\""), "{args:?}:\n{out}");
        assert!(
            out.contains("command = \"root /home/alice/x.sh\""),
            "{args:?}:\n{out}"
        );
    }
    let (_, out, _) = ax_in(dir.path(), &["import", "cron", "--user", "alice", "-"], tab);
    assert!(out.contains("user = \"alice\""), "{out}");
    let named = dir.path().join("alice.tab");
    std::fs::write(&named, tab).unwrap();
    let (_, out, _) = ax_in(
        dir.path(),
        &["import", "cron", "--user", "alice", named.to_str().unwrap()],
        "",
    );
    assert!(!out.contains("user = \"root\""), "--user on a file:\n{out}");
}
