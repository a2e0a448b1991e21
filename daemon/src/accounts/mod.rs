//! Who is who on this machine: users and groups read from the password
//! and group databases (NSS, so LDAP and sssd accounts count too). Every
//! lookup reads the databases again: an account changed while axd runs is
//! seen at the next connection or the next attempt.

use std::ffi::CString;
use std::path::PathBuf;

/// A user as a job runs as it (docs/users.md, "What a job gets").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    /// The primary group from the password database.
    pub gid: u32,
    pub home: PathBuf,
    pub shell: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("no such user {0:?}")]
    NoUser(String),
    #[error("no such group {0:?}")]
    NoGroup(String),
    #[error("uid {0} has no entry in the password database")]
    NoUid(u32),
    #[error("cannot read the groups of user {user:?}: {source}")]
    Groups { user: String, source: nix::Error },
}

impl Account {
    pub fn by_name(name: &str) -> Result<Account, AccountError> {
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) => Ok(Account::from(u)),
            _ => Err(AccountError::NoUser(name.to_string())),
        }
    }

    pub fn by_uid(uid: u32) -> Result<Account, AccountError> {
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => Ok(Account::from(u)),
            _ => Err(AccountError::NoUid(uid)),
        }
    }

    /// Every group the user is in as `initgroups` would set them: the
    /// primary group `gid` first, then the supplementary ones.
    pub fn groups_with(&self, gid: u32) -> Result<Vec<u32>, AccountError> {
        let groups_error = |source| AccountError::Groups {
            user: self.name.clone(),
            source,
        };
        let name =
            CString::new(self.name.as_str()).map_err(|_| groups_error(nix::Error::EINVAL))?;
        let list = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
            .map_err(groups_error)?;
        let mut gids = vec![gid];
        gids.extend(list.into_iter().map(|g| g.as_raw()).filter(|&g| g != gid));
        Ok(gids)
    }
}

impl From<nix::unistd::User> for Account {
    fn from(u: nix::unistd::User) -> Account {
        Account {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir,
            shell: u.shell,
        }
    }
}

/// The gid of group `name`.
pub fn group_gid(name: &str) -> Result<u32, AccountError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(AccountError::NoGroup(name.to_string())),
    }
}

/// How `uid` is shown: its user name, or `uid N` when it has none.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    }
}

/// The load-time check of a job file's `user` and `group` names against
/// this host (docs/users.md, "Who a job runs as"): each must exist, and a
/// daemon that does not run as root can only run jobs as its own user and
/// group.
/// One error per name, at the line it is written on.
pub fn accounts_known(
    dag: ax_shared::jobfile::DagFile,
) -> Result<ax_shared::jobfile::DagFile, Vec<ax_shared::jobfile::FileError>> {
    let errors = account_errors(&dag);
    if errors.is_empty() {
        Ok(dag)
    } else {
        Err(errors)
    }
}

fn account_errors(dag: &ax_shared::jobfile::DagFile) -> Vec<ax_shared::jobfile::FileError> {
    use ax_shared::jobfile::{AccountKey, FileError};
    let me = nix::unistd::geteuid().as_raw();
    let mut errors = Vec::new();
    for at in &dag.accounts_at {
        let problem = match at.key {
            AccountKey::User => match Account::by_name(&at.name) {
                Err(_) => Some(format!("`user`: no such user {:?} on this host", at.name)),
                Ok(a) if me != 0 && a.uid != me => {
                    let axd = user_name(me);
                    Some(format!(
                        "`user`: axd runs as {axd}, not root, and can only run jobs as {axd}, not as {:?}",
                        at.name
                    ))
                }
                Ok(_) => None,
            },
            // Without root, the gid can only be set to axd's own.
            AccountKey::Group => match group_gid(&at.name) {
                Err(_) => Some(format!("`group`: no such group {:?} on this host", at.name)),
                Ok(gid) if me != 0 && gid != nix::unistd::getegid().as_raw() => Some(format!(
                    "`group`: axd runs as {}, not root, and can only run jobs with its own group, not {:?}",
                    user_name(me),
                    at.name
                )),
                Ok(_) => None,
            },
        };
        if let Some(message) = problem {
            errors.push(FileError {
                file: dag.spec.file.clone(),
                line: Some(at.line),
                column: Some(at.column),
                message,
            });
        }
    }
    errors
}
