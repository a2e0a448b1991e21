//! `ax` as another local user would run it (docs/operations.md, "Hostile
//! local users"): a refused connection names the socket, its folder, their
//! owner, group and mode and the user's groups; a per-user socket whose
//! folder another user owns is not used. Throwaway users need root: the
//! tests skip with a note without it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use ax_testkit::users::{Group, User, can_make_users, run_as};
use ax_testkit::{Daemon, axd_beside};

pub(crate) fn skip(test: &str) -> bool {
    let skip = !can_make_users();
    if skip {
        eprintln!("{test}: skipped: needs root with useradd/groupadd to make throwaway users");
    }
    skip
}

#[test]
fn a_user_outside_the_socket_group_is_told_what_is_missing() {
    if skip("a_user_outside_the_socket_group") {
        return;
    }
    let group = Group::new().unwrap();
    let stranger = User::new(&[]).unwrap();
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let config = format!("socket_group = {:?}\n", group.name);
    let d = Daemon::start(axd, &config, &[]).unwrap();
    // The temp dir is root's 0700: let the stranger reach the socket's
    // folder so that the socket's own modes decide.
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(&d.socket).arg("status");
    run_as(&mut cmd, &stranger);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let folder = d.socket.parent().unwrap();
    for part in [
        format!("permission denied on the socket {}", d.socket.display()),
        format!(
            "{}: owner root (0), group {} ({}), mode 0750",
            folder.display(),
            group.name,
            group.gid
        ),
        format!("you are {} ({})", stranger.name, stranger.uid),
        format!("in groups {} ({})", stranger.name, stranger.gid),
        "socket_group".to_string(),
    ] {
        assert!(err.contains(&part), "{part:?} not in:\n{err}");
    }
}

#[test]
fn a_user_socket_in_a_folder_another_user_owns_is_not_used() {
    if skip("a_user_socket_in_a_folder_another_user_owns") {
        return;
    }
    let evil = User::new(&[]).unwrap();
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The other user's folder where our user-mode socket would be, with a
    // socket of theirs listening in it.
    let uid = nix::unistd::getuid().as_raw();
    let socket = ax_protocol::socket_dir::user_socket(None, &tmp, uid);
    let trap = tmp.join(format!("ax-{uid}"));
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    for p in [trap.clone(), trap.join("ax")] {
        std::os::unix::fs::chown(&p, Some(evil.uid), Some(evil.gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("status")
        .env_remove("AX_SOCKET")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("unsafe socket folder {}", trap.display()))
            && err.contains(&format!("owned by uid {}", evil.uid)),
        "{err}"
    );
    assert!(
        listener.accept().is_err(),
        "ax connected to the other user's socket"
    );
}
