//! Throwaway users and groups for tests of what other local users can do
//! (`useradd`/`groupadd`, which need root): each is removed when dropped.
//! [`can_make_users`] says whether this machine lets the test make them;
//! a test skips with a note when it does not.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A unique name: `axt` + pid + a counter (well under the 32 characters
/// of a login name).
fn fresh_name(kind: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("axt{kind}{}x{n}", std::process::id())
}

/// Root with `useradd` and `groupadd` at hand.
pub fn can_make_users() -> bool {
    nix::unistd::geteuid().is_root()
        && ["useradd", "groupadd", "userdel", "groupdel"]
            .iter()
            .all(|tool| {
                Command::new(tool)
                    .arg("--help")
                    .output()
                    .is_ok_and(|o| o.status.code().is_some())
            })
}

fn run(tool: &str, args: &[&str]) -> std::io::Result<()> {
    let out = Command::new(tool).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{tool} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A group that exists until dropped.
pub struct Group {
    pub name: String,
    pub gid: u32,
}

impl Group {
    pub fn new() -> std::io::Result<Group> {
        let name = fresh_name("g");
        run("groupadd", &[&name])?;
        let gid = nix::unistd::Group::from_name(&name)
            .ok()
            .flatten()
            .ok_or_else(|| std::io::Error::other(format!("group {name} not found")))?
            .gid
            .as_raw();
        Ok(Group { name, gid })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = run("groupdel", &[&self.name]);
    }
}

/// A user without a home or a login shell, with a primary group of its
/// own and the given supplementary groups, that exists until dropped.
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl User {
    pub fn new(groups: &[&Group]) -> std::io::Result<User> {
        let name = fresh_name("u");
        let mut args = vec![
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--user-group",
        ];
        let list = groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        if !list.is_empty() {
            args.extend(["--groups", &list]);
        }
        args.push(&name);
        run("useradd", &args)?;
        let user = nix::unistd::User::from_name(&name)
            .ok()
            .flatten()
            .ok_or_else(|| std::io::Error::other(format!("user {name} not found")))?;
        Ok(User {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            name,
        })
    }

    /// The user's groups as the system lists them (primary first).
    pub fn groups(&self) -> Vec<u32> {
        let name = std::ffi::CString::new(self.name.clone()).expect("no NUL");
        nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(self.gid))
            .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|_| vec![self.gid])
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = run("userdel", &[&self.name]);
    }
}

/// Sets up `cmd` to run as `user` with the user's groups (`setgroups`,
/// `setgid`, `setuid` in the child before it executes).
pub fn run_as(cmd: &mut Command, user: &User) {
    use std::os::unix::process::CommandExt;
    let groups: Vec<nix::unistd::Gid> = user
        .groups()
        .into_iter()
        .map(nix::unistd::Gid::from_raw)
        .collect();
    let (uid, gid) = (user.uid, user.gid);
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (setgroups, setgid, setuid); `groups` was built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            nix::unistd::setgroups(&groups)?;
            nix::unistd::setgid(nix::unistd::Gid::from_raw(gid))?;
            nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            Ok(())
        });
    }
}
