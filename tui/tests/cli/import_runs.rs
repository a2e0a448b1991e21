//! The migration crontab runs under ax with no wrapper script: `ax import
//! cron` writes its entries into a real axd's jobs folder, every DAG loads
//! with no error (accounts included: the crontab's users are throwaway
//! accounts of the test's own), and a triggered entry runs as its user
//! (docs/operations.md, "Migrating from cron").

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax_testkit::users::{User, can_make_users};
use ax_testkit::{Daemon, axd_beside};
use serde_json::Value;

use super::support::parts;

fn ax(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .output()
        .unwrap();
    parts(&out)
}

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = ax(d, &all);
    assert_eq!(code, 0, "ax {args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn the_imported_crontab_loads_in_axd_and_its_jobs_run_as_their_users() {
    if !can_make_users() {
        eprintln!("skipped: needs root with useradd");
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/fixtures/cron");
    // The crontab's accounts, as throwaway users of this test.
    let www = User::new(&[]).unwrap();
    let pg = User::new(&[]).unwrap();
    let deploy = User::new(&[]).unwrap();
    let alice = User::new(&[]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let system = std::fs::read_to_string(fixtures.join("etc-crontab"))
        .unwrap()
        .replace(" www-data ", &format!(" {} ", www.name))
        .replace(" postgres ", &format!(" {} ", pg.name))
        .replace(" deploy ", &format!(" {} ", deploy.name));
    std::fs::write(work.path().join("crontab"), system).unwrap();
    std::fs::create_dir(work.path().join("cron.d")).unwrap();
    std::fs::copy(
        fixtures.join("cron.d/certbot"),
        work.path().join("cron.d/certbot"),
    )
    .unwrap();

    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let mut d = Daemon::prepare(axd, "timezone = \"UTC\"\n", &[]).unwrap();
    let jobs = d.dir.path().join("jobs.d");
    let import = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(["import", "cron", "--out"])
            .arg(&jobs)
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap();
        let (code, _, err) = parts(&out);
        assert_eq!(code, 0, "{err}");
    };
    import(&["crontab", "cron.d/certbot"]);
    let alice_tab = fixtures.join("alice.crontab");
    import(&["--user", &alice.name, alice_tab.to_str().unwrap()]);
    d.spawn().unwrap();

    let dags = json(&d, &["dags"]);
    let dags = dags.as_array().unwrap();
    assert_eq!(dags.len(), 10, "{dags:#?}");
    for dag in dags {
        assert!(dag["error"].is_null(), "{dag:#}");
    }
    let find = |prefix: &str| {
        dags.iter()
            .find(|v| v["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no DAG {prefix}*: {dags:#?}"))
    };
    assert_eq!(find("root-certbot")["jitter"], "12h");
    assert_eq!(find("root-warm-cache")["schedule"], "@reboot");
    assert!(find("root-warm-cache")["next_fire"].is_null());

    // alice's poll-feed entry, triggered: it runs as her account, and its
    // `||` fallback runs where the script is missing, as under cron.
    let name = format!("{}-poll-feed", alice.name);
    let started = json(&d, &["trigger", &name]);
    let run = started["runs"][0].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let shown = json(&d, &["show", &run.to_string()]);
        if !["waiting", "ready", "running", "delayed"].contains(&shown["state"].as_str().unwrap()) {
            break shown;
        }
        assert!(Instant::now() < deadline, "{shown:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(shown["user"], alice.name.as_str(), "{shown:#}");
    assert!(shown["attempts"][0]["exit_code"].is_i64(), "{shown:#}");
}
