//! Trusted job files (docs/users.md, "Trusted job files"): nothing runs
//! from the jobs folder that its owner did not write. A file loads only if
//! it and every folder from the jobs folder down to it belong to root (in
//! user mode: to axd's user) and may not be written by group or others;
//! anything else is listed with its reason, as a file error, and has no
//! DAG. Tests with other owners make throwaway users (root only; skipped
//! with a note otherwise).

use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::Path;

use crate::support::*;
use ax_testkit::Conn;
use ax_testkit::users::{User, can_make_users};
use serde_json::{Value, json};

const GOOD: &str = "command = \"true\"\n";

fn conn(d: &Daemon) -> Conn {
    Conn::open(&d.socket, "test").unwrap()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `list_dags`: each DAG's name and its error's message (empty when it
/// has none).
fn dags(c: &mut Conn) -> Vec<(String, String)> {
    let list = c.call("list_dags", json!({})).unwrap();
    list.as_array()
        .expect("a list")
        .iter()
        .map(|d| {
            let error = d["error"]["message"].as_str().unwrap_or_default();
            (d["name"].as_str().unwrap().to_string(), error.to_string())
        })
        .collect()
}

/// `status`'s errors: (file, message).
fn status_errors(c: &mut Conn) -> Vec<(String, String)> {
    let s = c.call("status", json!({})).unwrap();
    s["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (text("file"), text("message"))
        })
        .collect()
}

/// Whether `dag` is listed with a version (jobs), not only an error.
fn loaded(c: &mut Conn, dag: &str) -> bool {
    let list = c.call("list_dags", json!({})).unwrap();
    list.as_array().unwrap().iter().any(|d| {
        d["name"] == dag
            && d["error"].is_null()
            && d["jobs"].as_array().is_some_and(|j| !j.is_empty())
    })
}

/// Asserts that `dag` (the file `dag.toml` of `jobs`) is listed by `ax
/// dags` with exactly `message`, has no version, and that `status` lists
/// the same error for its file.
fn assert_refused(c: &mut Conn, jobs: &Path, dag: &str, message: &str) {
    let file = jobs.join(format!("{dag}.toml"));
    let list = c.call("list_dags", json!({})).unwrap();
    let view = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dag)
        .unwrap_or_else(|| panic!("{dag} not listed: {list:#}"));
    assert_eq!(view["error"]["message"], message, "{view:#}");
    assert_eq!(
        view["jobs"],
        json!([]),
        "a refused file has no version: {view:#}"
    );
    let errors = status_errors(c);
    let want = (file.display().to_string(), message.to_string());
    assert!(errors.contains(&want), "{want:?} not in {errors:?}");
}

/// Polls until `check` holds (through the watcher: a change is in force
/// within about a second).
fn eventually(c: &mut Conn, what: &str, mut check: impl FnMut(&mut Conn) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while !check(c) {
        assert!(
            std::time::Instant::now() < deadline,
            "never: {what}: dags {:?}, errors {:?}",
            dags(c),
            status_errors(c)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn users_or_skip(test: &str) -> bool {
    let ok = can_make_users();
    if !ok {
        eprintln!("{test}: skipped: needs root with useradd/groupadd to make throwaway users");
    }
    ok
}

/// A file or folder writable by group or others is refused, naming the
/// mode (and the folder); the good file beside it loads.
#[test]
fn group_or_other_writable_files_and_folders_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "group_or_other_writable: skipped: files must be root's, so the test runs as root"
        );
        return;
    }
    let d = Daemon::prepare(
        BASE_CONFIG,
        &[
            ("good.toml", GOOD),
            ("shared.toml", GOOD),
            ("open.toml", GOOD),
            ("team-a/etl.toml", GOOD),
        ],
    );
    let jobs = d.path("jobs.d");
    chmod(&jobs.join("shared.toml"), 0o664);
    chmod(&jobs.join("open.toml"), 0o646);
    chmod(&jobs.join("team-a"), 0o775);
    let mut d = d;
    d.spawn();
    let mut c = conn(&d);
    assert!(loaded(&mut c, "good"), "{:?}", dags(&mut c));
    assert_refused(&mut c, &jobs, "shared", "mode 0664: writable by group");
    assert_refused(&mut c, &jobs, "open", "mode 0646: writable by others");
    assert_refused(
        &mut c,
        &jobs,
        "team-a/etl",
        "folder team-a: mode 0775: writable by group",
    );
    assert!(
        d.log().contains("mode 0664: writable by group"),
        "{}",
        d.log()
    );
    // A chmod is a change: the fixed file and folder load.
    chmod(&jobs.join("shared.toml"), 0o644);
    chmod(&jobs.join("team-a"), 0o755);
    eventually(&mut c, "shared and team-a/etl load after chmod", |c| {
        loaded(c, "shared") && loaded(c, "team-a/etl")
    });
    assert_eq!(status_errors(&mut c).len(), 1, "open.toml is still refused");
}

/// A file owned by another user is refused with that user's name; a
/// FIFO named like a job file is not a regular file.
#[test]
fn a_file_of_another_user_is_refused() {
    if !users_or_skip("a_file_of_another_user_is_refused") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let mut d = Daemon::prepare(BASE_CONFIG, &[("hers.toml", GOOD)]);
    let jobs = d.path("jobs.d");
    chown(jobs.join("hers.toml"), Some(alice.uid), None).unwrap();
    nix::unistd::mkfifo(
        &jobs.join("pipe.toml"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    d.spawn();
    let mut c = conn(&d);
    assert_refused(
        &mut c,
        &jobs,
        "hers",
        &format!("owned by {}, must be root", alice.name),
    );
    assert_refused(&mut c, &jobs, "pipe", "not a regular file");
}

/// A link is followed only to a trusted target: a root-owned file in
/// root-owned folders loads, another user's file (or a file in a folder
/// another user owns) is refused.
#[test]
fn links_are_followed_only_to_trusted_targets() {
    if !users_or_skip("links_are_followed_only_to_trusted_targets") {
        return;
    }
    let bob = User::new(&[]).unwrap();
    let mut d = Daemon::prepare(BASE_CONFIG, &[]);
    let (jobs, outside) = (d.path("jobs.d"), d.path("outside"));
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(outside.join("bobs")).unwrap();
    for name in ["good.toml", "his.toml", "bobs/inside.toml"] {
        std::fs::write(outside.join(name), GOOD).unwrap();
    }
    chown(outside.join("his.toml"), Some(bob.uid), None).unwrap();
    chown(outside.join("bobs"), Some(bob.uid), None).unwrap();
    symlink(outside.join("good.toml"), jobs.join("good.toml")).unwrap();
    symlink(outside.join("his.toml"), jobs.join("his.toml")).unwrap();
    symlink("../outside/bobs/inside.toml", jobs.join("inside.toml")).unwrap();
    d.spawn();
    let mut c = conn(&d);
    assert!(loaded(&mut c, "good"), "{:?}", dags(&mut c));
    assert_refused(
        &mut c,
        &jobs,
        "his",
        &format!("owned by {}, must be root", bob.name),
    );
    let folder = outside.join("bobs");
    assert_refused(
        &mut c,
        &jobs,
        "inside",
        &format!(
            "folder {}: owned by {}, must be root",
            folder.display(),
            bob.name
        ),
    );
}

/// A loaded DAG whose file is given to another user goes away as for a
/// deleted file (its waiting run cancelled, its running one finishing),
/// the error stays listed, and giving the file back loads it again.
#[test]
fn a_dag_chowned_away_is_removed_and_comes_back_when_chowned_back() {
    if !users_or_skip("a_dag_chowned_away_is_removed") {
        return;
    }
    let mallory = User::new(&[]).unwrap();
    let dag = "[[job]]\nid = \"a\"\ncommand = \"sleep 2\"\n\
               [[job]]\nid = \"b\"\ncommand = \"true\"\ndeps = [\"a\"]\n";
    let d = Daemon::start(&[("nightly.toml", dag)]);
    let file = d.path("jobs.d/nightly.toml");
    let mut c = conn(&d);
    assert!(loaded(&mut c, "nightly"));
    let ids = run_ids(&c.call("trigger", json!({"dag": "nightly"})).unwrap());
    let run = |c: &mut Conn, job: &str| -> Value {
        ids.iter()
            .map(|id| c.call("get_run", json!({"id": id})).unwrap())
            .find(|r| r["job"] == job)
            .unwrap()
    };
    eventually(&mut c, "a runs", |c| run(c, "a")["state"] == "running");

    chown(&file, Some(mallory.uid), None).unwrap();
    let message = format!("owned by {}, must be root", mallory.name);
    eventually(&mut c, "nightly refused", |c| {
        dags(c).contains(&("nightly".into(), message.clone()))
    });
    assert_refused(&mut c, &d.path("jobs.d"), "nightly", &message);
    let b = run(&mut c, "b");
    assert_eq!(b["state"], "cancelled", "{b:#}");
    assert!(
        b["reason"].as_str().unwrap().contains("definition removed"),
        "{b:#}"
    );
    eventually(&mut c, "a finishes", |c| run(c, "a")["state"] == "success");
    let refused = c.call("trigger", json!({"dag": "nightly"}));
    assert!(refused.is_err(), "a refused DAG cannot be triggered");

    chown(&file, Some(0), None).unwrap();
    eventually(&mut c, "nightly loads again", |c| loaded(c, "nightly"));
    assert!(status_errors(&mut c).is_empty());
}

/// Names starting with `@` are users' own DAGs': a folder (or a file) of
/// the jobs folder with such a name is refused and nothing below it loads.
#[test]
fn at_names_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("at_names_are_refused: skipped: files must be root's, so the test runs as root");
        return;
    }
    let d = Daemon::start(&[
        ("@x/standup.toml", GOOD),
        ("@y.toml", GOOD),
        ("ok.toml", GOOD),
    ]);
    let mut c = conn(&d);
    assert_eq!(dags(&mut c), [("ok".to_string(), String::new())]);
    let why = "names starting with @ are kept for users' own DAGs";
    let errors = status_errors(&mut c);
    for path in ["jobs.d/@x", "jobs.d/@y.toml"] {
        let want = (d.path(path).display().to_string(), why.to_string());
        assert!(errors.contains(&want), "{want:?} not in {errors:?}");
    }
}

/// User mode: axd run as a user trusts that user's files, and refuses
/// root's.
#[test]
fn in_user_mode_files_must_be_axds_users() {
    if !users_or_skip("in_user_mode_files_must_be_axds_users") {
        return;
    }
    let carol = User::new(&[]).unwrap();
    let mut d = Daemon::prepare(BASE_CONFIG, &[("mine.toml", GOOD)]);
    d.run_as(&carol).unwrap();
    let roots = d.path("jobs.d/roots.toml");
    std::fs::write(&roots, GOOD).unwrap();
    d.spawn();
    let mut c = conn(&d);
    assert!(loaded(&mut c, "mine"), "{:?}", dags(&mut c));
    assert_refused(
        &mut c,
        &d.path("jobs.d"),
        "roots",
        &format!("owned by root, must be {}", carol.name),
    );
}
