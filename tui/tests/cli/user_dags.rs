//! Users' own DAGs through the real `ax` run as throwaway users against a
//! real axd with `[users] allow` (docs/users.md, "User DAGs"): apply,
//! export, edit, remove, who may act on whose, and a restart. Throwaway
//! users need root: the tests skip with a note without it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ax_testkit::users::{Group, User, can_make_users, run_as};
use ax_testkit::{Daemon, axd_beside};

use super::support::text;

fn skip(test: &str) -> bool {
    let skip = !can_make_users();
    if skip {
        eprintln!("{test}: skipped: needs root with useradd/groupadd to make throwaway users");
    }
    skip
}

/// A daemon whose `[users] allow` lists `users`, with `extra` config
/// before it, reachable by every local user (its temp dir `0755`).
fn daemon(users: &[&User], extra: &str) -> Daemon {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let names: Vec<String> = users.iter().map(|u| format!("{:?}", u.name)).collect();
    let config = format!("{extra}[users]\nallow = [{}]\n", names.join(", "));
    let d = Daemon::start(axd, &config, &[]).unwrap();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A folder every user may read, with the given files (`0644`, or `0755`
/// for names ending in `.sh`).
fn files(list: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, body) in list {
        let path = t.path().join(name);
        std::fs::write(&path, body).unwrap();
        let mode = if name.ends_with(".sh") { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    t
}

/// `ax ARGS` against `d` as `who` (root when `None`), with `stdin` fed
/// and `env` set: exit code, stdout, stderr.
fn ax_full(
    d: &Daemon,
    who: Option<&User>,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(&d.socket).args(args);
    cmd.env_remove("VISUAL").env_remove("EDITOR");
    cmd.envs(env.iter().copied());
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(user) = who {
        run_as(&mut cmd, user);
    }
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = super::support::wait_output(child, Duration::from_secs(60));
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn ax(d: &Daemon, who: Option<&User>, args: &[&str]) -> (i32, String, String) {
    ax_full(d, who, args, &[], "")
}

fn path_of(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

fn dag_names(d: &Daemon, who: Option<&User>) -> String {
    let (code, out, err) = ax(d, who, &["dags"]);
    assert_eq!(code, 0, "{err}");
    out
}

fn users_dir(d: &Daemon, user: &User) -> PathBuf {
    d.dir.path().join("state/users").join(&user.name)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The spec of the DAG runs of `dag`, as the store keeps it (what the
/// runs execute), newest first.
fn run_specs(d: &Daemon, dag: &str) -> Vec<serde_json::Value> {
    let db = rusqlite::Connection::open_with_flags(
        d.dir.path().join("state/ax.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut q = db
        .prepare("SELECT s.spec FROM dag_runs r JOIN specs s ON s.hash = r.spec_hash WHERE r.dag = ?1 ORDER BY r.id DESC")
        .unwrap();
    q.query_map([dag], |row| row.get::<_, String>(0))
        .unwrap()
        .map(|s| serde_json::from_str(&s.unwrap()).unwrap())
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const STANDUP: &str = "# alice's standup\ncommand = \"id -u\"\n";

#[test]
fn a_user_applies_exports_and_triggers_her_dag_and_it_outlives_a_restart() {
    if skip("a_user_applies_exports_and_triggers_her_dag") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let mut d = daemon(&[&alice], "");
    let t = files(&[("standup.toml", STANDUP)]);
    let (code, out, err) = ax(&d, Some(&alice), &["apply", &path_of(&t, "standup.toml")]);
    let full = format!("@{}/standup", alice.name);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("applied {full}")), "{out}");
    assert!(dag_names(&d, Some(&alice)).contains(&full));
    let (code, exported, err) = ax(&d, Some(&alice), &["export", "standup"]);
    assert_eq!((code, exported.as_str()), (0, STANDUP), "{err}");
    let (_, by_full, _) = ax(&d, Some(&alice), &["export", &full]);
    assert_eq!(by_full, STANDUP);
    let stored = users_dir(&d, &alice).join("standup.toml");
    assert_eq!(std::fs::read_to_string(&stored).unwrap(), STANDUP);
    assert_eq!(mode(&stored), 0o600);
    assert_eq!(mode(&users_dir(&d, &alice)), 0o700);
    assert_eq!(mode(&d.dir.path().join("state/users")), 0o700);
    let (code, _, err) = ax(&d, Some(&alice), &["trigger", &full]);
    assert_eq!(code, 0, "{err}");
    let specs = run_specs(&d, &full);
    assert_eq!(specs.len(), 1);
    assert_eq!(
        specs[0]["jobs"][0]["user"],
        alice.name.as_str(),
        "{}",
        specs[0]
    );
    // The process itself runs as alice.
    let mut log = String::new();
    wait_for("the run's output", || {
        let (_, listed, _) = ax(&d, Some(&alice), &["--json", "ls", "--dag", &full]);
        let runs: serde_json::Value = serde_json::from_str(&listed).unwrap_or_default();
        let Some(run) = runs.as_array().and_then(|r| r.first()) else {
            return false;
        };
        if run["state"] != "success" {
            return false;
        }
        log = ax(&d, Some(&alice), &["logs", &run["id"].to_string()]).1;
        true
    });
    assert_eq!(log.trim(), alice.uid.to_string(), "the job's `id -u`");
    let (_, events, _) = ax(&d, None, &["events"]);
    assert!(
        events.contains(&format!(
            "DAG {full} applied by {} (uid {}) via ax",
            alice.name, alice.uid
        )),
        "{events}"
    );
    d.terminate(Duration::from_secs(30)).unwrap();
    d.spawn().unwrap();
    assert!(
        dag_names(&d, Some(&alice)).contains(&full),
        "lost at restart"
    );
    let (code, _, err) = ax(&d, Some(&alice), &["trigger", &full]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn an_apply_with_one_bad_file_stores_nothing() {
    if skip("an_apply_with_one_bad_file_stores_nothing") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&[&alice], "");
    let t = files(&[
        ("good.toml", "command = \"true\"\n"),
        ("bad.toml", "command = \"true\"\npriority = 500\n"),
    ]);
    let bad = path_of(&t, "bad.toml");
    let (code, out, err) = ax(
        &d,
        Some(&alice),
        &["apply", &path_of(&t, "good.toml"), &bad],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(&format!("{bad}:2:")), "{err}");
    let (_, _, offline_err) = super::support::ax_offline(&["validate", &bad], &[]);
    assert!(
        offline_err
            .lines()
            .filter(|l| l.starts_with(&bad))
            .all(|l| err.contains(l)),
        "the errors of `ax validate` ({offline_err}) are not those of apply ({err})"
    );
    assert!(!dag_names(&d, Some(&alice)).contains("good"));
    assert!(!users_dir(&d, &alice).join("good.toml").exists());
}

#[test]
fn a_user_dag_may_not_run_as_anyone_else() {
    if skip("a_user_dag_may_not_run_as_anyone_else") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let bob = User::new(&[]).unwrap();
    let theirs = Group::new().unwrap();
    let d = daemon(&[&alice], "");
    let t = files(&[
        ("root.toml", "command = \"true\"\nuser = \"root\"\n"),
        (
            "group.toml",
            &format!("command = \"true\"\ngroup = {:?}\n", theirs.name),
        ),
        ("secrets.env", "A=b\n"),
    ]);
    let env = path_of(&t, "secrets.env");
    std::os::unix::fs::chown(&env, Some(bob.uid), Some(bob.gid)).unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    let env_file = t.path().join("env.toml");
    std::fs::write(
        &env_file,
        format!("command = \"true\"\nenv_file = {env:?}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cases = [
        (
            "root.toml",
            2,
            format!("user = \"root\": a DAG of {0} runs as {0}", alice.name),
        ),
        (
            "group.toml",
            2,
            format!("{} is not a member of it", alice.name),
        ),
        ("env.toml", 2, format!("owned by {}", bob.name)),
    ];
    for (file, line, message) in cases {
        let path = path_of(&t, file);
        let (code, out, err) = ax(&d, Some(&alice), &["apply", &path]);
        assert_eq!(code, 1, "{file}: {out}{err}");
        assert!(err.contains(&format!("{path}:{line}:")), "{file}: {err}");
        assert!(err.contains(&message), "{file}: {message:?} not in {err}");
    }
    assert!(
        !users_dir(&d, &alice).exists()
            || std::fs::read_dir(users_dir(&d, &alice))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn edit_applies_what_the_editor_saved_and_a_refused_edit_keeps_the_stored_dag() {
    if skip("edit_applies_what_the_editor_saved") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&[&alice], "");
    let t = files(&[
        (
            "good.sh",
            "#!/bin/sh\nprintf 'command = \"echo edited\"\\n' > \"$1\"\n",
        ),
        ("bad.sh", "#!/bin/sh\nprintf 'command = 5\\n' > \"$1\"\n"),
        ("same.sh", "#!/bin/sh\nexit 0\n"),
    ]);
    let good = path_of(&t, "good.sh");
    let (code, out, err) = ax_full(
        &d,
        Some(&alice),
        &["edit", "notes"],
        &[("EDITOR", &good)],
        "",
    );
    assert_eq!(code, 0, "{out}{err}");
    let (_, stored, _) = ax(&d, Some(&alice), &["export", "notes"]);
    assert_eq!(stored, "command = \"echo edited\"\n");
    let (_, events, _) = ax(&d, None, &["events"]);
    assert!(
        events.contains(&format!("DAG @{}/notes edited by", alice.name)),
        "{events}"
    );
    // A bad save, and `n` to the question: the stored DAG stays.
    let bad = path_of(&t, "bad.sh");
    let (code, out, err) = ax_full(
        &d,
        Some(&alice),
        &["edit", "notes"],
        &[("VISUAL", &bad)],
        "n\n",
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("notes.toml:1:"), "{err}");
    assert!(err.contains("re-edit? [Y/n]"), "{err}");
    let (_, stored, _) = ax(&d, Some(&alice), &["export", "notes"]);
    assert_eq!(stored, "command = \"echo edited\"\n");
    let same = path_of(&t, "same.sh");
    let (code, _, err) = ax_full(
        &d,
        Some(&alice),
        &["edit", "notes"],
        &[("EDITOR", &same)],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no changes"), "{err}");
}

#[test]
fn remove_takes_the_dag_away_and_cancels_its_waiting_runs() {
    if skip("remove_takes_the_dag_away") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&[&alice], "");
    let t = files(&[(
        "chain.toml",
        "[[job]]\nid = \"first\"\ncommand = \"sleep 30\"\n\n[[job]]\nid = \"then\"\ncommand = \"true\"\ndeps = [\"first\"]\n",
    )]);
    let (code, _, err) = ax(&d, Some(&alice), &["apply", &path_of(&t, "chain.toml")]);
    assert_eq!(code, 0, "{err}");
    let full = format!("@{}/chain", alice.name);
    let (code, _, err) = ax(&d, Some(&alice), &["trigger", &full]);
    assert_eq!(code, 0, "{err}");
    wait_for("the first job to run", || {
        ax(&d, None, &["ls", "--dag", &full, "--state", "running"])
            .1
            .contains("first")
    });
    let (code, _, err) = ax(&d, Some(&alice), &["remove", "chain"]);
    assert_eq!(code, 0, "{err}");
    assert!(!dag_names(&d, Some(&alice)).contains(&full));
    assert!(!users_dir(&d, &alice).join("chain.toml").exists());
    let (_, out, _) = ax(&d, None, &["--json", "ls", "--dag", &full]);
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let then = runs.iter().find(|r| r["job"] == "then").unwrap();
    assert_eq!(then["state"], "cancelled", "{then}");
    assert_eq!(then["reason"], "definition removed", "{then}");
    let first = runs.iter().find(|r| r["job"] == "first").unwrap();
    assert_eq!(first["state"], "running", "a running job finishes: {first}");
    let (_, events, _) = ax(&d, None, &["events"]);
    assert!(
        events.contains(&format!("DAG {full} removed by {}", alice.name)),
        "{events}"
    );
}

#[test]
fn only_the_user_root_and_admins_act_on_a_user_dag() {
    if skip("only_the_user_root_and_admins_act_on_a_user_dag") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let bob = User::new(&[]).unwrap();
    let viewers = Group::new().unwrap();
    let viewer = User::new(&[&viewers]).unwrap();
    let extra = format!("socket_group = {:?}\n", viewers.name);
    let d = daemon(&[&alice, &bob], &extra);
    let t = files(&[("standup.toml", STANDUP)]);
    let file = path_of(&t, "standup.toml");
    let full = format!("@{}/standup", alice.name);
    // Root applies for alice.
    let (code, out, err) = ax(&d, None, &["apply", "--user", &alice.name, &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&full), "{out}");
    let (code, stored, _) = ax(&d, None, &["export", "--user", &alice.name, "standup"]);
    assert_eq!((code, stored.as_str()), (0, STANDUP));
    // Bob may not read or remove it, nor act as alice.
    for args in [
        vec!["export", full.as_str()],
        vec!["remove", full.as_str()],
        vec!["export", "--user", alice.name.as_str(), "standup"],
        vec!["apply", "--user", alice.name.as_str(), file.as_str()],
    ] {
        let (code, out, err) = ax(&d, Some(&bob), &args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.contains("only act on their own DAGs"),
            "{args:?}: {err}"
        );
    }
    let (code, out, err) = ax(&d, Some(&bob), &["trigger", &full]);
    assert_ne!(code, 0, "bob triggered alice's DAG: {out}{err}");
    assert!(
        run_specs(&d, &full).is_empty(),
        "a DAG run of alice's DAG was made"
    );
    // Bob's own names are his.
    let (code, _, err) = ax(&d, Some(&bob), &["export", "standup"]);
    assert_eq!(code, 4, "{err}");
    // A viewer keeps no DAGs.
    let (code, _, err) = ax(&d, Some(&viewer), &["apply", &file]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("socket_group") || err.contains("user DAGs"),
        "{err}"
    );
    assert!(!d.dir.path().join("state/users").join(&viewer.name).exists());
    // Alice's DAG is still there, and root removes it.
    let (code, _, err) = ax(&d, None, &["remove", "--user", &alice.name, "standup"]);
    assert_eq!(code, 0, "{err}");
    assert!(!dag_names(&d, None).contains(&full));
}

#[test]
fn a_dag_whose_user_is_gone_is_listed_with_its_error_and_does_not_run() {
    if skip("a_dag_whose_user_is_gone") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let name = alice.name.clone();
    let d = daemon(&[&alice], "");
    let t = files(&[("standup.toml", STANDUP)]);
    let (code, _, err) = ax(&d, Some(&alice), &["apply", &path_of(&t, "standup.toml")]);
    assert_eq!(code, 0, "{err}");
    drop(alice);
    // The reload goes through, and names the DAG file it could not load.
    let (code, _, err) = ax(&d, None, &["reload"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("standup.toml: no such user"), "{err}");
    let full = format!("@{name}/standup");
    let (_, out, _) = ax(&d, None, &["--json", "dags"]);
    let dags: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let dag = dags.iter().find(|d| d["name"] == full.as_str()).unwrap();
    let message = dag["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no such user"), "{dag}");
    let (code, _, err) = ax(&d, None, &["trigger", &full]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn a_user_name_cannot_leave_the_users_folder() {
    if skip("a_user_name_cannot_leave_the_users_folder") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&[&alice], "");
    std::fs::write(d.dir.path().join("state/secret.toml"), "command = \"x\"\n").unwrap();
    for args in [
        ["export", "--user", "..", "secret"],
        ["remove", "--user", "..", "secret"],
    ] {
        let (code, out, err) = ax(&d, None, &args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("is not a user name"), "{err}");
    }
    assert!(d.dir.path().join("state/secret.toml").exists());
}

#[test]
fn a_users_dag_file_is_bounded_in_size() {
    if skip("a_users_dag_file_is_bounded_in_size") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&[&alice], "");
    let mut big = String::from("command = \"true\"\n");
    while big.len() <= 64 << 10 {
        big.push_str("# padding padding padding padding padding padding padding\n");
    }
    let t = files(&[("big.toml", &big)]);
    let (code, out, err) = ax(&d, Some(&alice), &["apply", &path_of(&t, "big.toml")]);
    assert_eq!(code, 2, "invalid params: {out}{err}");
    assert!(
        err.contains("a user's DAG file is at most 65536 bytes"),
        "{err}"
    );
    assert!(!dag_names(&d, Some(&alice)).contains("big"));
}
