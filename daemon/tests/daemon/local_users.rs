//! Other users of the same machine (docs/operations.md, "Hostile local
//! users"): axd's files are its user's alone whatever the umask, and the
//! socket's folder cannot be someone else's. Tests that need other users
//! make throwaway ones (root only; skipped with a note otherwise).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;
use ax_testkit::Conn;
use serde_json::json;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_files_are_private_whatever_the_umask() {
    let mut d = Daemon::prepare(BASE_CONFIG, &[]);
    d.set_umask(0o022);
    d.spawn();
    let mut c = d.client().await;
    let id = submit(&mut c, json!({"command": "echo secret output"})).await[0];
    wait_state(&mut c, id, "success", 30).await;
    let state = d.path("state");
    let logs = state.join("logs");
    let log = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .expect("the job's log");
    let expected = [
        (state.clone(), 0o700),
        (logs.clone(), 0o700),
        (state.join("ax.db"), 0o600),
        (state.join("ax.db-wal"), 0o600),
        (state.join("ax.db-shm"), 0o600),
        (state.join("axd.lock"), 0o600),
        (log, 0o600),
    ];
    for (path, want) in &expected {
        assert_eq!(mode(path), *want, "{}", path.display());
    }
    // Files and folders left wider (by hand, or an earlier axd) are
    // narrowed at the next start (a clean stop removed -wal and -shm).
    d.term();
    let left: Vec<_> = expected.iter().filter(|(p, _)| p.exists()).collect();
    for (path, _) in &left {
        let wider = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wider)).unwrap();
    }
    d.spawn();
    for (path, want) in left
        .iter()
        .filter(|(p, _)| !p.starts_with(&logs) || p == &logs)
    {
        assert_eq!(mode(path), *want, "after a restart: {}", path.display());
    }
    assert!(d.log().contains("narrowed to 0700"), "{}", d.log());
}

/// Throwaway users and groups need root; without, the test says so and
/// passes.
fn users_or_skip(test: &str) -> bool {
    let ok = ax_testkit::users::can_make_users();
    if !ok {
        eprintln!("{test}: skipped: needs root with useradd/groupadd to make throwaway users");
    }
    ok
}

#[test]
fn axd_not_in_socket_group_refuses_to_start_and_says_what_to_do() {
    if !users_or_skip("axd_not_in_socket_group") {
        return;
    }
    use ax_testkit::users::{Group, User};
    let group = Group::new().unwrap();
    let user = User::new(&[]).unwrap();
    let config = format!("socket_group = {:?}\n{BASE_CONFIG}", group.name);
    let mut d = Daemon::prepare(&config, &[]);
    d.run_as(&user).unwrap();
    let harness: &mut ax_testkit::Daemon = &mut d;
    let err = harness.spawn().expect_err("axd must not serve").to_string();
    for part in [
        "cannot give",
        "/run to group",
        &group.name,
        &user.name,
        &format!("usermod -aG {} {}", group.name, user.name),
    ] {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
    assert!(!d.socket.exists(), "no socket is left that no one can use");
}

/// Runs the real axd as the user-mode daemon it is without `--config`:
/// its places from `HOME` and `TMPDIR` alone (no XDG variables).
fn user_mode_axd(home: &Path, tmp: &Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_axd"))
        .env_clear()
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("PATH", "/usr/bin:/bin")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to 60 s for a user-mode axd that must refuse to start; one
/// still running then is killed and fails the test.
fn refused(axd: std::process::Child) -> String {
    let mut axd = axd;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while axd.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = axd.kill();
            let out = axd.wait_with_output().unwrap();
            panic!("axd served: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = axd.wait_with_output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_socket_folder_another_user_made_is_refused() {
    if !users_or_skip("a_socket_folder_another_user_made") {
        return;
    }
    let evil = ax_testkit::users::User::new(&[]).unwrap();
    let t = tempfile::tempdir().unwrap();
    let (home, tmp) = (t.path().join("home"), t.path().join("tmp"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The other user gets there first: $TMPDIR/ax-<uid>, open to all.
    let uid = nix::unistd::getuid().as_raw();
    let trap = tmp.join(format!("ax-{uid}"));
    std::fs::create_dir(&trap).unwrap();
    std::os::unix::fs::chown(&trap, Some(evil.uid), Some(evil.gid)).unwrap();
    std::fs::set_permissions(&trap, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = refused(user_mode_axd(&home, &tmp));
    assert!(
        err.contains(&format!("unsafe socket folder {}", trap.display()))
            && err.contains(&format!("owned by uid {}", evil.uid)),
        "{err}"
    );
    assert!(!trap.join("ax/axd.sock").exists());
    // Owned by the user but open to all: refused as well.
    std::os::unix::fs::chown(&trap, Some(uid), None).unwrap();
    let err = refused(user_mode_axd(&home, &tmp));
    assert!(err.contains("mode 0777"), "{err}");
    // A folder of its own: axd serves there, where `ax` looks.
    std::fs::set_permissions(&trap, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut axd = user_mode_axd(&home, &tmp);
    let socket = ax_protocol::socket_dir::user_socket(None, &tmp, uid);
    wait_until(60, "axd serves on the user socket", || {
        Conn::open(&socket, "test").is_ok()
    });
    let _ = axd.kill();
    let _ = axd.wait();
}
