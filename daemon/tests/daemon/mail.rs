//! Mail about DAG runs against the real axd (docs/job-files.md, "Mail";
//! docs/config.md, "Mail"): `mail_command` is a fake sendmail of the
//! test's own that records its argv and stdin, one pair of files per mail.
//! One mail per DAG run, to the DAG's `notify` or else the daemon's
//! `[notify]`, for failure, success or output; a failed send is an event
//! of the DAG run and a metric, and changes no run; a reload puts new
//! `[notify]` and `mail_command` in force.
//!
//! "No mail" is checked against a later DAG run that does mail: the
//! notifier judges DAG runs in the order they finished and starts their
//! sends in that order, so once the later mail is recorded an earlier one
//! would have been too.

use std::path::{Path, PathBuf};

use crate::metrics_e2e::sum;
use crate::parse_prometheus;
use crate::support::*;
use ax_protocol::api::{EventView, RunView};
use ax_protocol::client::Client;
use ax_protocol::request::{Metrics, Reload};
use serde_json::json;

/// Records each call as `N.argv` (one argument a line) and `N.msg` (its
/// stdin), `N.msg` renamed into place once whole.
const FAKE_SENDMAIL: &str = r#"#!/bin/sh
out="$(dirname "$0")/mail"
mkdir -p "$out"
n="$(date +%s%N).$$"
printf '%s\n' "$@" > "$out/$n.argv"
cat > "$out/.$n.msg" && mv "$out/.$n.msg" "$out/$n.msg"
"#;

/// A mail command that refuses every message.
const REFUSING_SENDMAIL: &str =
    "#!/bin/sh\ncat >/dev/null\necho 'relay access denied' >&2\nexit 1\n";

/// `BASE_CONFIG` with `mail_command` set to `@DIR@/sendmail -t -oi` and
/// `extra` (tables) after it.
fn config(extra: &str) -> String {
    format!("mail_command = \"@DIR@/sendmail -t -oi\"\n{BASE_CONFIG}{extra}")
}

/// axd with the fake sendmail (or `script`) in its temp dir.
fn start(config: &str, script: &str, jobs: &[(&str, &str)]) -> Daemon {
    let mut d = Daemon::prepare(config, jobs);
    write_script(&d.path("sendmail"), script);
    let dir = d.path("");
    let text = std::fs::read_to_string(&d.config).unwrap();
    let dir = dir.to_str().unwrap().trim_end_matches('/');
    std::fs::write(&d.config, text.replace("@DIR@", dir)).unwrap();
    d.spawn();
    d
}

fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The mails the fake sendmail got, oldest first: (argv, message).
fn mails(d: &Daemon) -> Vec<(String, String)> {
    let dir = d.path("mail");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    names.retain(|p| p.extension().is_some_and(|e| e == "msg"));
    names.sort();
    names
        .iter()
        .map(|p| {
            let argv = std::fs::read_to_string(p.with_extension("argv")).unwrap();
            (argv, std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

async fn events(c: &mut Client) -> Vec<EventView> {
    serde_json::from_value(
        c.call("events", json!({"after": 0, "limit": 10000}))
            .await
            .unwrap(),
    )
    .unwrap()
}

/// Waits until DAG run `dag_run` has an event of `axd mail`; returns its
/// reason.
async fn mail_event(c: &mut Client, dag_run: u64) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = events(c)
            .await
            .into_iter()
            .find(|e| e.dag_run == dag_run && e.actor == "axd mail");
        if let Some(e) = found {
            return e.reason;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DAG run {dag_run} never got a mail event"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Triggers `dag` and waits until all its runs ended; returns them.
async fn run_dag(c: &mut Client, dag: &str) -> Vec<RunView> {
    let mut runs = Vec::new();
    for id in trigger(c, dag).await {
        runs.push(wait_run(c, id, 20, |r| r.state.is_terminal()).await);
    }
    runs
}

async fn scrape(c: &mut Client, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let text = c.request(Metrics).await.unwrap().text;
    sum(&parse_prometheus(&text), metric, labels)
}

const FAILING_PAIR: &str = r#"
notify = { mail = ["ops@example.com", "root"], on = ["failure"] }
[[job]]
id = "long"
command = "i=0; while [ $i -lt 300 ]; do echo \"line $i of a long log, padded to be wide enough\"; i=$((i+1)); done; exit 3"
[[job]]
id = "killed"
command = "echo about to die >&2; kill -TERM $$"
"#;

const SUCCEEDS: &str = r#"
notify = { mail = ["ops@example.com"], on = ["failure"] }
command = "echo fine"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dag_run_mails_once_with_each_failed_job_and_a_success_does_not() {
    let d = start(
        &config(""),
        FAKE_SENDMAIL,
        &[("nightly.toml", FAILING_PAIR), ("fine.toml", SUCCEEDS)],
    );
    let mut c = d.client().await;
    let fine = run_dag(&mut c, "fine").await;
    assert_eq!(fine[0].state.as_str(), "success");
    let runs = run_dag(&mut c, "nightly").await;
    let dag_run = runs[0].dag_run;
    let (long, killed) = (runs[0].id, runs[1].id);
    assert_eq!(
        mail_event(&mut c, dag_run).await,
        "mail sent to ops@example.com, root"
    );
    let got = mails(&d);
    assert_eq!(
        got.len(),
        1,
        "one mail for the DAG run, none for the success: {got:#?}"
    );
    let (argv, msg) = &got[0];
    assert_eq!(argv, "-t\n-oi\n");
    let (head, body) = msg.split_once("\n\n").expect("headers, then the body");
    assert!(head.starts_with("To: ops@example.com, root\n"), "{head}");
    assert!(
        head.contains(&format!(
            "\nSubject: ax: nightly DAG run {dag_run} failed\n"
        )),
        "{head}"
    );
    assert!(
        head.contains("Content-Type: text/plain; charset=utf-8"),
        "{head}"
    );
    assert!(head.contains("Auto-Submitted: auto-generated"), "{head}");
    assert!(!head.contains("From:"), "sendmail sets the sender: {head}");
    assert!(body.contains(&format!("DAG run: {dag_run}\n")), "{body}");
    assert!(
        body.contains(&format!("run {long} job long: failed, exit code 3, ran ")),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "run {killed} job killed: failed, killed by SIGTERM"
        )),
        "{body}"
    );
    // The long log: its last 50 lines, and how much was cut before them.
    assert!(body.contains("line 299 of a long log"), "{body}");
    assert!(body.contains("line 250 of a long log"), "{body}");
    assert!(!body.contains("line 249 of a long log"), "{body}");
    let log_len = std::fs::metadata(d.path(&format!("state/logs/{long}.1.log")))
        .unwrap()
        .len();
    let kept: usize = (250..300)
        .map(|i| format!("line {i} of a long log, padded to be wide enough\n").len())
        .sum();
    assert!(
        body.contains(&format!("(… {} bytes cut)", log_len as usize - kept)),
        "{body}"
    );
    assert!(body.contains("about to die"), "{body}");
    assert_eq!(scrape(&mut c, "ax_mails_sent_total", &[]).await, 1.0);
}

const CHATTY: &str = r#"
notify = { mail = ["dev@example.com"], on = ["output"] }
command = "echo hello from cron"
"#;

const QUIET: &str = r#"
notify = { mail = ["dev@example.com"], on = ["output"] }
command = "true"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_output_mails_only_a_dag_run_whose_job_printed() {
    let d = start(
        &config(""),
        FAKE_SENDMAIL,
        &[("chatty.toml", CHATTY), ("quiet.toml", QUIET)],
    );
    let mut c = d.client().await;
    run_dag(&mut c, "quiet").await;
    let chatty = run_dag(&mut c, "chatty").await;
    assert_eq!(chatty[0].state.as_str(), "success");
    mail_event(&mut c, chatty[0].dag_run).await;
    let got = mails(&d);
    assert_eq!(got.len(), 1, "{got:#?}");
    let msg = &got[0].1;
    assert!(
        msg.contains(&format!(
            "Subject: ax: chatty DAG run {} succeeded",
            chatty[0].dag_run
        )),
        "{msg}"
    );
    assert!(
        msg.contains("hello from cron"),
        "the output is shown: {msg}"
    );
}

const PLAIN_FAILS: &str = "command = \"exit 1\"\n";

const MUTED_FAILS: &str = r#"
notify = { mail = [] }
command = "exit 1"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_notify_applies_to_dags_without_one_and_mail_empty_turns_it_off() {
    let d = start(
        &config("[notify]\nmail = [\"team@example.com\"]\n"),
        FAKE_SENDMAIL,
        &[("plain.toml", PLAIN_FAILS), ("muted.toml", MUTED_FAILS)],
    );
    let mut c = d.client().await;
    let muted = run_dag(&mut c, "muted").await;
    assert_eq!(muted[0].state.as_str(), "failed");
    let plain = run_dag(&mut c, "plain").await;
    assert_eq!(
        mail_event(&mut c, plain[0].dag_run).await,
        "mail sent to team@example.com"
    );
    let got = mails(&d);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(
        got[0].1.starts_with("To: team@example.com\n"),
        "{}",
        got[0].1
    );
    assert!(
        !events(&mut c)
            .await
            .iter()
            .any(|e| e.dag_run == muted[0].dag_run && e.actor == "axd mail"),
        "no mail, so no mail event, for the muted DAG"
    );

    // A reload puts a new [notify] in force for the DAG runs that end
    // afterwards.
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace("team@example.com", "night-shift@example.com"),
    )
    .unwrap();
    c.request(Reload).await.unwrap();
    let again = run_dag(&mut c, "plain").await;
    assert_eq!(
        mail_event(&mut c, again[0].dag_run).await,
        "mail sent to night-shift@example.com"
    );
}

const FAILS: &str = r#"
notify = { mail = ["ops@example.com"] }
command = "echo oops; exit 2"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_an_event_and_a_metric_and_the_run_stays_as_it_ended() {
    let mut d = Daemon::prepare(
        &format!("mail_command = \"/nonexistent/sendmail -t\"\n{BASE_CONFIG}"),
        &[("broken.toml", FAILS)],
    );
    write_script(&d.path("refusing"), REFUSING_SENDMAIL);
    d.spawn();
    let mut c = d.client().await;
    let first = run_dag(&mut c, "broken").await;
    let reason = mail_event(&mut c, first[0].dag_run).await;
    assert!(
        reason
            .starts_with("mail to ops@example.com not sent: cannot start /nonexistent/sendmail: "),
        "{reason}"
    );
    assert_eq!(
        scrape(&mut c, "ax_mail_failures_total", &[("reason", "start")]).await,
        1.0
    );
    let after = get_run(&mut c, first[0].id).await;
    assert_eq!(after.state.as_str(), "failed");
    assert_eq!(after.attempts.len(), 1);
    assert_eq!(after.attempts[0].exit_code, Some(2));

    // A reload puts a new mail_command in force: one that refuses.
    let text = std::fs::read_to_string(&d.config).unwrap();
    let refusing = d.path("refusing");
    std::fs::write(
        &d.config,
        text.replace("/nonexistent/sendmail -t", refusing.to_str().unwrap()),
    )
    .unwrap();
    c.request(Reload).await.unwrap();
    let second = run_dag(&mut c, "broken").await;
    let reason = mail_event(&mut c, second[0].dag_run).await;
    assert_eq!(
        reason,
        format!(
            "mail to ops@example.com not sent: {} exited with code 1: relay access denied",
            refusing.display()
        )
    );
    assert_eq!(
        scrape(&mut c, "ax_mail_failures_total", &[("reason", "exit")]).await,
        1.0
    );
    assert_eq!(scrape(&mut c, "ax_mails_sent_total", &[]).await, 0.0);
    let dag_run: serde_json::Value = c
        .call("get_dag_run", json!({"id": second[0].dag_run}))
        .await
        .unwrap();
    assert_eq!(dag_run["state"], "failed", "{dag_run}");
}
