//! Roles on the socket with real uids (docs/protocol.md, "Access"): with
//! both `socket_group` and `admin_group` set, members of either group can
//! connect; viewers read and cannot act, admins act, anyone else is
//! refused. Needs root (it creates throwaway users and groups); elsewhere
//! it says so and passes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support::*;

/// Throwaway users and groups, removed on drop (a failed assertion too).
struct Accounts {
    users: Vec<String>,
    groups: Vec<String>,
}

impl Accounts {
    fn group(&mut self, name: &str) {
        run_ok(Command::new("groupadd").arg(name));
        self.groups.push(name.to_string());
    }

    /// A user whose primary group is `primary`, also in `extra`.
    fn user(&mut self, name: &str, primary: &str, extra: Option<&str>) {
        let mut cmd = Command::new("useradd");
        cmd.args([
            "--no-create-home",
            "--no-user-group",
            "--shell",
            "/bin/false",
        ])
        .args(["--gid", primary]);
        if let Some(g) = extra {
            cmd.args(["--groups", g]);
        }
        run_ok(cmd.arg(name));
        self.users.push(name.to_string());
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = Command::new("userdel").arg(u).output();
        }
        for g in &self.groups {
            let _ = Command::new("groupdel").arg(g).output();
        }
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run account tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn gid(name: &str) -> u32 {
    nix::unistd::Group::from_name(name)
        .unwrap()
        .expect("group exists")
        .gid
        .as_raw()
}

/// The `ax` binary of this build: `target/<profile>/ax`, next to the
/// `deps/` folder this test runs from (`cargo test --workspace` builds it).
fn ax_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let ax = exe.parent().unwrap().parent().unwrap().join("ax");
    assert!(
        ax.exists(),
        "{} is missing: build it with `cargo build -p ax-clients --bin ax`",
        ax.display()
    );
    ax
}

/// `ax --socket SOCKET ARGS` as `user` with the user's own groups.
fn ax_as(user: &str, socket: &std::path::Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid",
            user,
            "--regid",
            user_gid(user).as_str(),
            "--init-groups",
        ])
        .arg(ax_binary())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/")
        .output()
        .expect("run setpriv")
}

fn user_gid(user: &str) -> String {
    nix::unistd::User::from_name(user)
        .unwrap()
        .expect("user exists")
        .gid
        .to_string()
}

/// `ax` exited with `code`, and its stderr contains `says`.
fn expect(out: &Output, code: i32, says: &str, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", describe(out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(says),
        "{what}: {}",
        describe(out)
    );
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_read_admins_act_and_others_are_refused_with_real_uids() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: creating users and groups needs root");
        return;
    }
    let tag = std::process::id();
    let (viewers, admins, others) = (
        format!("axt{tag}view"),
        format!("axt{tag}adm"),
        format!("axt{tag}other"),
    );
    let (viewer, admin, outsider) = (
        format!("axt{tag}v"),
        format!("axt{tag}a"),
        format!("axt{tag}o"),
    );
    let mut accounts = Accounts {
        users: vec![],
        groups: vec![],
    };
    accounts.group(&viewers);
    accounts.group(&admins);
    accounts.group(&others);
    // One role by the primary group, one by a supplementary group.
    accounts.user(&viewer, &viewers, None);
    accounts.user(&admin, &others, Some(&admins));
    accounts.user(&outsider, &others, None);

    // Top-level keys, before the tables of BASE_CONFIG.
    let config = format!("socket_group = \"{viewers}\"\nadmin_group = \"{admins}\"\n{BASE_CONFIG}");
    let d = Daemon::start_with(&config, &[]);
    // The test's temp dir is 0700; others may pass through it (not list).
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();

    // The socket is 0660 in a 0750 directory, and both groups get in.
    let dir = d.socket.parent().unwrap();
    let dir_meta = std::fs::metadata(dir).unwrap();
    let sock_meta = std::fs::symlink_metadata(&d.socket).unwrap();
    assert_eq!(dir_meta.permissions().mode() & 0o777, 0o750);
    assert_eq!(sock_meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(dir_meta.gid(), gid(&viewers));
    assert_eq!(sock_meta.gid(), gid(&viewers));

    let sock = d.socket.as_path();
    for user in [&viewer, &admin] {
        expect(&ax_as(user, sock, &["status"]), 0, "", "a member reads");
        expect(&ax_as(user, sock, &["ls"]), 0, "", "a member lists");
    }
    let out = ax_as(&viewer, sock, &["submit", "--", "true"]);
    expect(&out, 1, "may only read", "a viewer cannot act");
    let out = ax_as(&admin, sock, &["--json", "submit", "--", "true"]);
    expect(&out, 0, "", "an admin acts");
    let submitted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = submitted["runs"][0].as_u64().expect("a run id");
    let mut c = d.client().await;
    wait_state(&mut c, id, "success", 10).await;

    // Anyone else cannot even open the socket...
    let out = ax_as(&outsider, sock, &["status"]);
    expect(&out, 3, "Permission denied", "an outsider cannot connect");
    // ...and, where the modes are wider than axd made them (a directory
    // prepared by someone else), is refused at hello.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = ax_as(&outsider, sock, &["status"]);
    expect(
        &out,
        1,
        "has no role on this socket",
        "an outsider is refused at hello",
    );
    drop(accounts);
}
