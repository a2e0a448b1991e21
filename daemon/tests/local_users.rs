//! Other users of the same machine (docs/operations.md, "Hostile local
//! users"): axd's files are its user's alone whatever the umask, and the
//! socket's folder cannot be someone else's. Tests that need other users
//! make throwaway ones (root only; skipped with a note otherwise).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;
use support::*;

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
