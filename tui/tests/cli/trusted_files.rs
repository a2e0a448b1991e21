//! `ax dags` lists the job files axd does not trust, with their reason
//! (docs/users.md, "Trusted job files"): a DAG whose file is writable by
//! group shows the mode, and an `@` name, which names no DAG, is listed
//! below the table.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use ax_testkit::{Daemon, axd_beside};

#[test]
fn ax_dags_shows_why_a_file_is_not_loaded() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("ax_dags_shows_why_a_file_is_not_loaded: skipped: job files must be root's");
        return;
    }
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let good = "command = \"true\"\n";
    let mut d = Daemon::prepare(
        axd,
        "timezone = \"UTC\"\n",
        &[("shared.toml", good), ("@x/mine.toml", good)],
    )
    .unwrap();
    let shared = d.path("jobs.d/shared.toml");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o664)).unwrap();
    d.spawn().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("dags")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("shared "))
        .unwrap_or_else(|| panic!("no row for shared: {stdout}"));
    assert!(row.contains("mode 0664: writable by group"), "{row}");
    let at = format!(
        "error: {}: names starting with @ are kept for users' own DAGs",
        d.path("jobs.d/@x").display()
    );
    assert!(stdout.lines().any(|l| l == at), "{at:?} not in:\n{stdout}");
}
