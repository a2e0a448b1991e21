//! Who a job runs as and what it gets (docs/users.md, "Who a job runs as"
//! and "What a job gets"): real throwaway users and groups (root only;
//! skipped with a note otherwise), a real axd, a real notify socket.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;
use ax_testkit::users::{Group, User, can_make_users};
use serde_json::json;

/// Root with useradd at hand, else a note and `false`.
fn users_at_hand(test: &str) -> bool {
    let ok = can_make_users();
    if !ok {
        eprintln!("{test}: skipped (needs root with useradd/groupadd)");
    }
    ok
}

/// A folder every user may write to (sticky, as /tmp), for the jobs'
/// answers.
fn shared_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

/// A home folder for `user`, set in the password database.
fn give_home(user: &User) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(home.path(), Some(user.uid), Some(user.gid)).unwrap();
    let home_str = home.path().to_str().unwrap();
    let out = std::process::Command::new("usermod")
        .args(["-d", home_str, &user.name])
        .output()
        .unwrap();
    assert!(out.status.success(), "usermod: {out:?}");
    home
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Triggers `dag` and waits until each of its runs succeeded.
async fn run_dag(c: &mut ax_protocol::client::Client, dag: &str) {
    for id in trigger(c, dag).await {
        wait_state(c, id, "success", 30).await;
    }
}

/// The datagrams received until one is `want`, or the deadline passes.
fn wait_for_datagram_line(sock: &UnixDatagram, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            if text.lines().any(|l| l == want) {
                return;
            }
            seen.push(text);
        }
    }
    panic!("no {want:?} from axd; got {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_dag_runs_as_its_user_with_groups_home_umask_and_a_clean_env() {
    if !users_at_hand("run_as") {
        return;
    }
    let member_of = Group::new().unwrap();
    let other = Group::new().unwrap();
    let user = User::new(&[&member_of]).unwrap();
    let home = give_home(&user);
    let out = shared_dir();
    let o = out.path().display();
    let name = &user.name;
    let dag = format!(
        r#"[[job]]
id = "who"
user = "{name}"
env = {{ B = "from-job" }}
command = "{{ id -u; id -g; id -G; pwd; env; }} > {o}/who.txt"
[[job]]
id = "grp"
user = "{name}"
group = "{other}"
command = "id -g > {o}/grp.txt"
[[job]]
id = "masked"
user = "{name}"
umask = "027"
command = "touch {o}/m027"
[[job]]
id = "plain"
user = "{name}"
command = "touch {o}/m022"
"#,
        other = other.name
    );
    let config = format!(
        "pass_env = [\"KEEP_ME\"]\n{BASE_CONFIG}\n[job_env]\nA = \"from-config\"\nB = \"from-config\"\n"
    );
    let mut d = Daemon::prepare(&config, &[("sys.toml", &dag)]);
    let notify = d.path("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    d.set_env("NOTIFY_SOCKET", &notify);
    d.set_env("WATCHDOG_USEC", "60000000");
    d.set_env("FOO_SECRET", "x");
    d.set_env("KEEP_ME", "kept");
    // Not the default: a job's own umask is 022 whatever axd's.
    d.set_umask(0o077);
    d.spawn();
    wait_for_datagram_line(&sock, "READY=1");
    let mut c = d.client().await;
    run_dag(&mut c, "sys").await;

    let who = read(&out.path().join("who.txt"));
    let lines: Vec<&str> = who.lines().collect();
    assert_eq!(lines[0], user.uid.to_string(), "{who}");
    assert_eq!(lines[1], user.gid.to_string(), "{who}");
    let mut groups: Vec<u32> = lines[2]
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    groups.sort();
    let mut want = vec![user.gid, member_of.gid];
    want.sort();
    assert_eq!(groups, want, "{who}");
    let home_path = home.path().to_str().unwrap();
    assert_eq!(lines[3], home_path, "cwd is HOME: {who}");
    let env: Vec<&str> = lines[4..].to_vec();
    for var in [
        format!("HOME={home_path}"),
        format!("USER={name}"),
        format!("LOGNAME={name}"),
        "SHELL=/usr/sbin/nologin".to_string(),
        "KEEP_ME=kept".to_string(),
        "A=from-config".to_string(),
        "B=from-job".to_string(),
    ] {
        assert!(env.contains(&var.as_str()), "{var} missing: {who}");
    }
    for name in ["FOO_SECRET", "NOTIFY_SOCKET", "WATCHDOG_USEC", "RUST_LOG"] {
        assert!(
            !env.iter().any(|l| l.starts_with(&format!("{name}="))),
            "{name} reached the job: {who}"
        );
    }
    let path = env.iter().find(|l| l.starts_with("PATH=")).unwrap();
    assert!(
        path.starts_with("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:"),
        "{path}"
    );

    assert_eq!(
        read(&out.path().join("grp.txt")).trim(),
        other.gid.to_string(),
        "group sets the primary gid"
    );
    let mode = |f: &str| std::fs::metadata(out.path().join(f)).unwrap().mode() & 0o777;
    assert_eq!(mode("m027"), 0o640);
    assert_eq!(mode("m022"), 0o644);
    let owner = std::fs::metadata(out.path().join("m022")).unwrap().uid();
    assert_eq!(owner, user.uid);
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_user_or_group_is_a_load_error_with_its_line() {
    let mut d = Daemon::start(&[
        (
            "nouser.toml",
            "command = \"true\"\nuser = \"axtnosuchuser\"\n",
        ),
        (
            "nogroup.toml",
            "[defaults]\ngroup = \"axtnosuchgroup\"\n[[job]]\nid = \"a\"\ncommand = \"true\"\n",
        ),
    ]);
    let mut c = d.client().await;
    let dags = c.call("list_dags", json!({})).await.unwrap();
    for (dag, name, line) in [
        ("nouser", "axtnosuchuser", 2),
        ("nogroup", "axtnosuchgroup", 2),
    ] {
        let entry = dags
            .as_array()
            .or_else(|| dags["dags"].as_array())
            .unwrap()
            .iter()
            .find(|e| e["name"] == dag)
            .unwrap_or_else(|| panic!("{dag} listed: {dags}"));
        let error = &entry["error"];
        assert!(
            error["message"].as_str().unwrap_or("").contains(name),
            "{dag}: {error}"
        );
        assert_eq!(error["line"], line, "{dag}: {error}");
        assert!(
            error["file"]
                .as_str()
                .unwrap_or("")
                .ends_with(&format!("{dag}.toml")),
            "{error}"
        );
    }
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axd_that_is_not_root_runs_jobs_as_itself_only_and_is_not_dumpable() {
    if !users_at_hand("run_as") {
        return;
    }
    let user = User::new(&[]).unwrap();
    // The job finds its folder through a variable axd passes on.
    let config = format!("pass_env = [\"OUT_DIR\"]\n{BASE_CONFIG}");
    let mut d = Daemon::prepare(
        &config,
        &[
            ("asroot.toml", "command = \"true\"\nuser = \"root\"\n"),
            ("rootgroup.toml", "command = \"true\"\ngroup = \"root\"\n"),
            (
                "mine.toml",
                "command = \"{ id -u; if cat /proc/$PPID/environ >/dev/null 2>&1; then echo readable; else echo refused; fi; } > \\\"$OUT_DIR/mine.txt\\\"\"\n",
            ),
        ],
    );
    let out = d.path("out");
    std::fs::create_dir(&out).unwrap();
    d.set_env("OUT_DIR", &out);
    d.run_as(&user).unwrap();
    d.spawn();
    let mut c = d.client().await;
    let dags = c.call("list_dags", json!({})).await.unwrap().to_string();
    assert!(
        dags.contains(&format!(
            "can only run jobs as {}, not as \\\"root\\\"",
            user.name
        )),
        "{dags}"
    );
    assert!(
        dags.contains("can only run jobs with its own group, not \\\"root\\\""),
        "{dags}"
    );
    run_dag(&mut c, "mine").await;
    let mine = read(&out.join("mine.txt"));
    assert_eq!(mine, format!("{}\nrefused\n", user.uid), "parent is axd");
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_under_the_jobs_shell_else_axds() {
    let out = shared_dir();
    let o = out.path().display();
    // `$0` of `SHELL -c command` is the shell.
    let bash_only = |file: &str| format!("[[ -n $BASH_VERSION ]] && echo $0 > {o}/{file}");
    let mut d = Daemon::start(&[(
        "bashy.toml",
        &format!(
            "shell = \"/bin/bash\"\ncommand = \"{}\"\n",
            bash_only("job.txt")
        ),
    )]);
    let mut c = d.client().await;
    run_dag(&mut c, "bashy").await;
    assert_eq!(read(&out.path().join("job.txt")), "/bin/bash\n");
    assert_eq!(d.term(), Some(0));
    let config = format!("shell = \"/bin/bash\"\n{BASE_CONFIG}");
    let mut d = Daemon::start_with(
        &config,
        &[
            (
                "daemons.toml",
                &format!("command = \"{}\"\n", bash_only("axd.txt")),
            ),
            (
                "own.toml",
                &format!("shell = \"/bin/sh\"\ncommand = \"echo $0 > {o}/own.txt\"\n"),
            ),
        ],
    );
    let mut c = d.client().await;
    run_dag(&mut c, "daemons").await;
    run_dag(&mut c, "own").await;
    assert_eq!(read(&out.path().join("axd.txt")), "/bin/bash\n");
    assert_eq!(read(&out.path().join("own.txt")), "/bin/sh\n");
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_file_must_belong_to_root_or_the_jobs_user() {
    if !users_at_hand("run_as") {
        return;
    }
    let user = User::new(&[]).unwrap();
    let stranger = User::new(&[]).unwrap();
    let out = shared_dir();
    let o = out.path().display();
    let files = tempfile::tempdir().unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let env_file = |owner: &User, name: &str| -> PathBuf {
        let path = files.path().join(name);
        std::fs::write(&path, "TOKEN=from-the-env-file\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&path, Some(owner.uid), Some(owner.gid)).unwrap();
        path
    };
    let own = env_file(&user, "own.env");
    let foreign = env_file(&stranger, "foreign.env");
    let job = |path: &Path, answer: &str| {
        format!(
            "user = \"{}\"\nenv_file = \"{}\"\ncommand = \"echo $TOKEN > {o}/{answer}\"\n",
            user.name,
            path.display()
        )
    };
    let mut d = Daemon::start(&[
        ("own.toml", &job(&own, "own.txt")),
        ("foreign.toml", &job(&foreign, "foreign.txt")),
    ]);
    let mut c = d.client().await;
    run_dag(&mut c, "own").await;
    assert_eq!(read(&out.path().join("own.txt")), "from-the-env-file\n");
    let id = trigger(&mut c, "foreign").await[0];
    let reason = crate::wait_spawn_error(&mut c, id, 30).await;
    assert!(
        reason.contains(&format!(
            "owned by {}, not by root or the job's user {}",
            stranger.name, user.name
        )),
        "{reason}"
    );
    assert!(!out.path().join("foreign.txt").exists());
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_removed_after_loading_fails_the_attempt_and_nothing_runs() {
    if !users_at_hand("run_as") {
        return;
    }
    let user = User::new(&[]).unwrap();
    let out = shared_dir();
    let o = out.path().display();
    let mut d = Daemon::start(&[(
        "gone.toml",
        &format!(
            "user = \"{}\"\ncommand = \"id -u > {o}/gone.txt\"\n",
            user.name
        ),
    )]);
    let mut c = d.client().await;
    let name = user.name.clone();
    drop(user);
    let id = trigger(&mut c, "gone").await[0];
    let reason = crate::wait_spawn_error(&mut c, id, 30).await;
    assert!(
        reason.contains(&format!("cannot run as user \"{name}\"")),
        "{reason}"
    );
    assert!(!out.path().join("gone.txt").exists(), "nothing ran");
    assert_eq!(d.term(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_job_env_and_shell_for_later_attempts() {
    let out = shared_dir();
    let o = out.path().display();
    let config = format!("{BASE_CONFIG}\n[job_env]\nWHICH = \"first\"\n");
    let mut d = Daemon::start_with(
        &config,
        &[(
            "env.toml",
            &format!("command = \"echo $WHICH ${{BASH_VERSION:+bash}} >> {o}/env.txt\"\n"),
        )],
    );
    let mut c = d.client().await;
    run_dag(&mut c, "env").await;
    let text = read(&d.config).replace("WHICH = \"first\"", "WHICH = \"second\"");
    std::fs::write(&d.config, format!("shell = \"/bin/bash\"\n{text}")).unwrap();
    c.call("reload", json!({})).await.unwrap();
    run_dag(&mut c, "env").await;
    assert_eq!(read(&out.path().join("env.txt")), "first\nsecond bash\n");
    assert_eq!(d.term(), Some(0));
}
