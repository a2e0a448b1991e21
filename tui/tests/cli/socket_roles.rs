//! Who may do what on the socket (docs/users.md, "Who may do what on the
//! socket"), with real throwaway users running the real `ax` against a
//! real axd: a user allowed by `[users]` sees and acts on their own runs
//! only, a submit runs as its caller, a job's connection has its user's
//! rights (plus the heartbeat of its run), `events --actor` names who
//! asked, and an ad-hoc secret never reaches the store. Throwaway users
//! need root: each test skips with a note without it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ax_testkit::users::{Group, User, run_as};
use ax_testkit::{Conn, Daemon, axd_beside};
use serde_json::{Value, json};

use crate::local_users::skip;
use crate::support::text;

/// axd with `config`, its temp dir open to other users (the socket's
/// own modes decide).
fn daemon(config: &str) -> Daemon {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let d = Daemon::start(axd, config, &[]).unwrap();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn ax_cmd(d: &Daemon, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(&d.socket).args(args);
    cmd
}

/// `ax ARGS` as `user` (`None`: as this test, root).
fn ax(d: &Daemon, user: Option<&User>, args: &[&str]) -> Output {
    let mut cmd = ax_cmd(d, args);
    if let Some(u) = user {
        run_as(&mut cmd, u);
    }
    cmd.output().unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// The documents of NDJSON output (`ax --json events`).
fn json_lines(out: &Output) -> Vec<Value> {
    assert_eq!(out.status.code(), Some(0), "{}", describe(out));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn json_of(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", describe(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

/// `ax --json submit ARGS` as `user`: the new run's id.
fn submit(d: &Daemon, user: Option<&User>, args: &[&str]) -> u64 {
    let argv: Vec<&str> = ["--json", "submit"].iter().chain(args).copied().collect();
    json_of(&ax(d, user, &argv))["runs"][0]
        .as_u64()
        .expect("a run id")
}

fn conn(d: &Daemon) -> Conn {
    Conn::open(&d.socket, "socket-roles-test").unwrap()
}

fn run_view(d: &Daemon, id: u64) -> Value {
    conn(d).call("get_run", json!({"id": id})).unwrap()
}

fn wait_state(d: &Daemon, id: u64, states: &[&str], limit: Duration) -> Value {
    let since = Instant::now();
    loop {
        let v = run_view(d, id);
        if states.contains(&v["state"].as_str().unwrap_or_default()) {
            return v;
        }
        assert!(
            since.elapsed() < limit,
            "run {id} never got to {states:?}: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What run `id` printed, once it succeeded (read by root).
fn output_of(d: &Daemon, id: u64) -> String {
    wait_state(d, id, &["success"], Duration::from_secs(20));
    let out = ax(d, None, &["logs", &id.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Exit `code` and stderr containing each of `says`.
fn expect(out: &Output, code: i32, says: &[&str], what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", describe(out));
    let err = text(&out.stderr);
    for s in says {
        assert!(err.contains(s), "{what}: {s:?} not in {}", describe(out));
    }
}

#[test]
fn a_user_sees_and_acts_on_their_own_runs_only() {
    if skip("a_user_sees_and_acts_on_their_own_runs_only") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let d = daemon(&format!("[users]\nallow = [{:?}]\n", alice.name));
    let mode = std::fs::symlink_metadata(&d.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o666);
    // Her notifications, from before anything happens.
    let stream = subscribe_as(&d, &alice, Duration::from_secs(6));

    let root_run = submit(&d, None, &["--", "sleep", "30"]);
    let hers = submit(&d, Some(&alice), &["--name", "mine", "--", "sleep", "30"]);
    let view = json_of(&ax(
        &d,
        Some(&alice),
        &["--json", "show", &hers.to_string()],
    ));
    assert_eq!(view["dag"], format!("@{}/mine", alice.name), "{view:#}");
    assert_eq!(view["user"], alice.name.as_str(), "{view:#}");
    let shown = ax(&d, Some(&alice), &["show", &hers.to_string()]);
    assert!(
        text(&shown.stdout).contains(&format!("user        {}", alice.name)),
        "{}",
        describe(&shown)
    );

    let listed = json_of(&ax(&d, Some(&alice), &["--json", "ls"]));
    let ids: Vec<u64> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_u64())
        .collect();
    assert_eq!(ids, vec![hers], "her list: {listed:#}");

    let root_id = root_run.to_string();
    for args in [
        vec!["show", root_id.as_str()],
        vec!["logs", root_id.as_str()],
        vec!["cancel", root_id.as_str()],
        vec!["retry", root_id.as_str()],
        vec!["submit", "--after", root_id.as_str(), "--", "true"],
    ] {
        let out = ax(&d, Some(&alice), &args);
        expect(&out, 4, &["not found"], &format!("alice: ax {args:?}"));
    }
    assert_eq!(
        run_view(&d, root_run)["state"],
        "running",
        "root's run goes on"
    );
    for (args, method) in [
        (vec!["pause", "--all"], "pause --all"),
        (vec!["reload"], "reload"),
    ] {
        let out = ax(&d, Some(&alice), &args);
        expect(
            &out,
            1,
            &[
                &format!("{method}: needs the admin or owner role"),
                &format!("{} has the user role", alice.name),
            ],
            &format!("alice: ax {args:?}"),
        );
    }
    // What she may do to her own, she does.
    let out = ax(&d, Some(&alice), &["cancel", &hers.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = ax(&d, None, &["cancel", &root_id]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    let lines = stream.wait_with_output().unwrap();
    let notes = text(&lines.stdout);
    assert!(
        notes.contains(&format!("\"run\":{hers}")),
        "her own run's changes reach her: {notes}"
    );
    for line in notes.lines().filter(|l| l.contains("\"changed\"")) {
        let v: Value = serde_json::from_str(line).unwrap();
        for e in v["params"]["events"].as_array().unwrap() {
            assert_ne!(
                e["run"].as_u64(),
                Some(root_run),
                "root's run reached her: {line}"
            );
        }
        assert!(
            v["params"]["status"]["runs"]
                .as_object()
                .is_none_or(|m| m.is_empty())
        );
    }

    // Her actions are in the log with her name; `--actor` finds them.
    let events = json_lines(&ax(&d, None, &["--json", "events", "--actor", &alice.name]));
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|e| e["actor"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{} (uid {}) via ax", alice.name, alice.uid))),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["run"] == hers && e["reason"].as_str().unwrap().contains("cancel"))
    );
    let by_uid = json_lines(&ax(
        &d,
        None,
        &["--json", "events", "--actor", &alice.uid.to_string()],
    ));
    assert_eq!(by_uid.len(), events.len());
}

/// A process of `user` that subscribes and prints every line it reads for
/// `secs` (python3, the socket's own NDJSON).
fn subscribe_as(d: &Daemon, user: &User, secs: Duration) -> std::process::Child {
    let script = format!(
        r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect({sock:?})
s.sendall(b'{{"jsonrpc":"2.0","id":1,"method":"hello","params":{{"protocol":1,"client":"py"}}}}\n')
s.sendall(b'{{"jsonrpc":"2.0","id":2,"method":"subscribe"}}\n')
s.settimeout(0.2)
end = time.time() + {secs}
buf = b""
while time.time() < end:
    try:
        got = s.recv(65536)
    except socket.timeout:
        continue
    if not got:
        break
    buf += got
sys.stdout.write(buf.decode())
"#,
        sock = d.socket.display().to_string(),
        secs = secs.as_secs_f64()
    );
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(script)
        .stdout(std::process::Stdio::piped());
    run_as(&mut cmd, user);
    let child = cmd.spawn().expect("python3");
    std::thread::sleep(Duration::from_millis(700));
    child
}

#[test]
fn a_group_allows_its_members_and_others_are_refused_at_hello() {
    if skip("a_group_allows_its_members") {
        return;
    }
    let staff = Group::new().unwrap();
    let carol = User::new(&[&staff]).unwrap();
    let bob = User::new(&[]).unwrap();
    let d = daemon(&format!("[users]\nallow = [\"@{}\"]\n", staff.name));
    let id = submit(&d, Some(&carol), &["--", "true"]);
    let v = wait_state(&d, id, &["success"], Duration::from_secs(20));
    assert_eq!(v["dag"], format!("@{}/adhoc", carol.name));
    assert_eq!(v["user"], carol.name.as_str());

    let out = ax(&d, Some(&bob), &["status"]);
    expect(
        &out,
        1,
        &[&format!(
            "uid {} ({}) has no role on this socket: not root or axd's user, not in admin_group (not set) or socket_group (not set), not allowed by [users] allow",
            bob.uid, bob.name
        )],
        "a user outside every role",
    );
}

#[test]
fn a_submit_runs_as_its_caller_and_only_root_names_another_user() {
    if skip("a_submit_runs_as_its_caller") {
        return;
    }
    let admins = Group::new().unwrap();
    let admin = User::new(&[&admins]).unwrap();
    let alice = User::new(&[]).unwrap();
    let bob = User::new(&[]).unwrap();
    let d = daemon(&format!(
        "admin_group = {:?}\n[users]\nallow = [{:?}]\n",
        admins.name, alice.name
    ));
    let id = submit(&d, Some(&admin), &["--", "id", "-u"]);
    assert_eq!(
        run_view(&d, id)["user"],
        admin.name.as_str(),
        "an admin's job is the admin's"
    );
    assert_eq!(
        output_of(&d, id),
        admin.uid.to_string(),
        "the admin's process"
    );
    let id = submit(&d, None, &["--user", &bob.name, "--", "id", "-u"]);
    assert_eq!(run_view(&d, id)["user"], bob.name.as_str(), "root's --user");
    assert_eq!(output_of(&d, id), bob.uid.to_string(), "bob's process");

    let out = ax(
        &d,
        Some(&alice),
        &["submit", "--user", "root", "--", "true"],
    );
    expect(
        &out,
        1,
        &["only root may run jobs as another user"],
        "alice --user root",
    );
    let out = ax(
        &d,
        None,
        &["submit", "--user", "no-such-user-x", "--", "true"],
    );
    expect(&out, 2, &["no such user"], "an unknown --user");
    let file = d.dir.path().join("as-root.toml");
    std::fs::write(
        &file,
        "[[job]]\nid = \"x\"\ncommand = \"true\"\nuser = \"root\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = ax(&d, Some(&alice), &["submit", "-f", file.to_str().unwrap()]);
    expect(
        &out,
        1,
        &[&format!(
            "user = \"root\": {} may only run jobs as {}",
            alice.name, alice.name
        )],
        "alice's file naming root",
    );
    let out = ax(
        &d,
        Some(&alice),
        &["submit", "--name", "@root/x", "--", "true"],
    );
    expect(
        &out,
        1,
        &["may only name DAGs"],
        "alice naming another's namespace",
    );
}

#[test]
fn a_jobs_connection_has_its_users_rights_plus_its_heartbeat() {
    if skip("a_jobs_connection_has_its_users_rights") {
        return;
    }
    let alice = User::new(&[]).unwrap();
    let bob = User::new(&[]).unwrap();
    let d = daemon(&format!("[users]\nallow = [{:?}]\n", alice.name));
    let ax_bin = env!("CARGO_BIN_EXE_ax");
    let as_bob = format!(
        "setpriv --reuid {} --regid {} --clear-groups {ax_bin} --socket {}",
        bob.uid,
        bob.gid,
        d.socket.display()
    );
    let script =
        format!("{as_bob} heartbeat from-bob; echo beat=$?; {as_bob} pause --all; echo pause=$?");
    let mut c = conn(&d);
    let answer = c
        .call(
            "submit",
            json!({"argv": ["sh", "-c", script], "heartbeat": "1h"}),
        )
        .unwrap();
    let id = answer["runs"][0].as_u64().unwrap();
    let v = wait_state(&d, id, &["success", "failed"], Duration::from_secs(30));
    let out = ax(&d, None, &["logs", &id.to_string()]);
    let log = text(&out.stdout);
    assert!(
        log.contains("beat=0"),
        "the job's heartbeat as bob: {log}\n{v:#}"
    );
    assert!(log.contains("pause=1"), "bob's pause from the job: {log}");
    assert!(log.contains("needs"), "{log}");
    assert!(log.contains("has the job role"), "{log}");
    // Bob outside any job: no role.
    let out = ax(&d, Some(&bob), &["status"]);
    expect(
        &out,
        1,
        &["has no role on this socket"],
        "bob outside a job",
    );
}

#[test]
fn an_adhoc_secret_stays_in_memory_and_is_not_kept_across_a_restart() {
    if skip("an_adhoc_secret_stays_in_memory") {
        return;
    }
    let mut d = daemon("");
    let secret = "s3cr3t-Zq81vx";
    let env = format!("TOKEN={secret}");
    let id = submit(
        &d,
        None,
        &[
            "--env",
            &env,
            "--secret-env",
            "TOKEN",
            "--",
            "sh",
            "-c",
            "echo len=${#TOKEN}; echo \"$TOKEN\" | rev",
        ],
    );
    wait_state(&d, id, &["success"], Duration::from_secs(20));
    let log = text(&ax(&d, None, &["logs", &id.to_string()]).stdout);
    assert!(
        log.contains("len=13") && log.contains("xv18qZ-t3rc3s"),
        "the job sees it: {log}"
    );

    // Waiting behind a run while axd restarts: the value is gone.
    let first = submit(&d, None, &["--", "sleep", "2"]);
    let waits = submit(
        &d,
        None,
        &[
            "--after",
            &first.to_string(),
            "--env",
            &env,
            "--secret-env",
            "TOKEN",
            "--",
            "sh",
            "-c",
            "echo ran=$TOKEN",
        ],
    );
    not_stored(&d, secret, "while waiting");
    d.terminate(Duration::from_secs(60)).unwrap();
    not_stored(&d, secret, "after the stop");
    d.spawn().unwrap();
    let v = wait_state(
        &d,
        waits,
        &["success", "failed", "cancelled"],
        Duration::from_secs(60),
    );
    assert_eq!(v["state"], "failed", "{v:#}");
    let log = text(&ax(&d, None, &["logs", &waits.to_string()]).stdout);
    assert!(
        !log.contains("ran="),
        "it did not run without its secret: {log}"
    );
    assert!(
        v.to_string().contains("was not kept across axd's restart")
            || log.contains("was not kept across axd's restart"),
        "{v:#}\n{log}"
    );
}

/// Neither the database nor its WAL holds `secret`'s bytes (the text
/// around the first, if one does).
fn not_stored(d: &Daemon, secret: &str, when: &str) {
    for f in ["state/ax.db", "state/ax.db-wal"] {
        let bytes = std::fs::read(d.path(f)).unwrap_or_default();
        let at = bytes
            .windows(secret.len())
            .position(|w| w == secret.as_bytes());
        assert!(
            at.is_none(),
            "{when}: {f} holds the secret: {}",
            at.map(|i| String::from_utf8_lossy(&bytes[i.saturating_sub(300)..]).into_owned())
                .unwrap_or_default()
        );
    }
}

#[test]
fn with_users_and_both_groups_the_socket_folder_stays_open_to_users() {
    if skip("with_users_and_both_groups_the_socket_folder_stays_open") {
        return;
    }
    let (viewers, admins) = (Group::new().unwrap(), Group::new().unwrap());
    let alice = User::new(&[]).unwrap();
    let d = daemon(&format!(
        "socket_group = {:?}\nadmin_group = {:?}\n[users]\nallow = [{:?}]\n",
        viewers.name, admins.name, alice.name
    ));
    let folder = d.socket.parent().unwrap();
    let mode = std::fs::metadata(folder).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "the socket's folder, ACL and all");
    let out = ax(&d, Some(&alice), &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

#[test]
fn a_submit_by_anyone_but_root_reads_only_the_callers_own_env_file() {
    if skip("a_submit_by_anyone_but_root_reads_only_the_callers_own_env_file") {
        return;
    }
    let admins = Group::new().unwrap();
    let admin = User::new(&[&admins]).unwrap();
    let d = daemon(&format!("admin_group = {:?}\n", admins.name));
    let secret = d.dir.path().join("root.env");
    std::fs::write(&secret, "ROOTSECRET=only-root-1234\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = d.dir.path().join("adm.toml");
    std::fs::write(
        &file,
        format!(
            "command = \"echo $ROOTSECRET\"\nenv_file = {:?}\n",
            secret.display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = ax(
        &d,
        Some(&admin),
        &["submit", "-f", &file.display().to_string()],
    );
    expect(
        &out,
        1,
        &["owned by root", "may only read", "own env_file"],
        "an admin's submit naming root's env_file",
    );
    // Root's own submission may.
    let out = ax(&d, None, &["submit", "-f", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}
