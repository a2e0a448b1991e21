//! `ax validate` and `ax cron next` as a user runs them: output and exit codes.

use crate::support::ax_offline;

fn ax(args: &[&str]) -> (i32, String, String) {
    ax_offline(args, &[("TZ", "UTC")])
}

#[test]
fn cron_next_prints_instants_one_per_line() {
    let (code, out, _) = ax(&[
        "cron",
        "next",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2025-03-08T12:00:00Z",
        "-n",
        "2",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "2025-03-09T03:00:00-04:00\n2025-03-10T02:30:00-04:00\n"
    );
    let (code, out, _) = ax(&[
        "cron",
        "next",
        "*/20 * * * * *",
        "--tz",
        "UTC",
        "--from",
        "2025-01-01T00:00:00Z",
        "-n",
        "3",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "2025-01-01T00:00:20Z\n2025-01-01T00:00:40Z\n2025-01-01T00:01:00Z\n"
    );
    let (code, out, _) = ax(&[
        "--json",
        "cron",
        "next",
        "@daily",
        "--tz",
        "UTC",
        "--from",
        "2025-01-01T00:00:00Z",
        "-n",
        "1",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["next"][0], "2025-01-02T00:00:00.000Z");
}

#[test]
fn cron_next_rejects_bad_input_with_exit_2() {
    for (args, needle) in [
        (vec!["cron", "next", "0 0 31 2 *"], "never fires"),
        (vec!["cron", "next", "*/0 * * * *"], "bad cron"),
        (
            vec!["cron", "next", "@daily", "--tz", "Mars/Base"],
            "unknown time zone",
        ),
        (
            vec!["cron", "next", "@daily", "--from", "yesterday"],
            "RFC 3339",
        ),
        (vec!["cron", "next", "@daily", "-n", "0"], "-n"),
    ] {
        let (code, _, err) = ax(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn validate_lists_every_error_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "schedule = \"61 * * * *\"\n[[job]]\nid = \"a\"\ncommand = \"x\"\npriority = 0\ndeps = [\"ghost\"]\n").unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "schedule = \"@daily\"\ntimezone = \"UTC\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let (code, out, err) = ax(&["validate", bad.to_str().unwrap(), good.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.toml:1:12: schedule:"), "{err}");
    assert!(
        err.contains("bad.toml:5:12: priority 0 out of range 1-100"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:6:9: job \"a\": unknown dep \"ghost\""),
        "{err}"
    );
    assert!(out.contains("DAG \"good\", 1 job"), "{out}");
    assert_eq!(
        out.matches("T00:00:00Z").count(),
        5,
        "next 5 fire times: {out}"
    );
}

#[test]
fn validate_the_shipped_examples() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/jobs.d");
    let files = [
        format!("{dir}/weekly-report.toml"),
        format!("{dir}/etl-nightly.toml"),
        format!("{dir}/disk-usage.toml"),
        format!("{dir}/team-a/cleanup.toml"),
    ];
    let mut args = vec!["--json", "validate", "--jobs-dir", dir];
    args.extend(files.iter().map(String::as_str));
    let (code, out, err) = ax(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 4);
    assert!(v.as_array().unwrap().iter().all(|d| d["ok"] == true));
}

#[test]
fn unreadable_and_binary_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin.toml");
    std::fs::write(&bin, [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let (code, _, err) = ax(&["validate", bin.to_str().unwrap(), "/nonexistent/x.toml"]);
    assert_eq!(code, 1);
    assert!(err.contains("not UTF-8"), "{err}");
    assert!(err.contains("/nonexistent/x.toml: cannot read"), "{err}");
}
