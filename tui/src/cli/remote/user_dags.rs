//! `ax apply`, `ax edit`, `ax export`, `ax remove`: a user's own DAGs, as
//! `crontab FILE`, `-e`, `-l`, `-r` (docs/users.md, "User DAGs").

use std::io::{BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ax_protocol::api::ApplyAnswer;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::codes;
use ax_protocol::request::{ApplyDags, DagFileText, ExportDag, RemoveDag};
use ax_shared::users::user_dag_owner;

use super::out::{Out, say, tell};
use crate::cli::args::{ApplyArgs, UserDagArgs};
use crate::cli::exit;

/// What a new DAG's `ax edit` starts from: comments only, so saving it
/// unchanged stores nothing.
const TEMPLATE: &str = "\
# A DAG of yours: every job runs as you (docs/job-files.md, docs/users.md).
# Write its jobs below and save; an unchanged file stores nothing.
#
# schedule = \"0 9 * * 1-5\"
# command = \"echo standup\"
";

pub(super) async fn apply(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &ApplyArgs,
) -> Result<i32, ClientError> {
    let mut files = Vec::new();
    for path in &args.files {
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            tell!(
                o,
                "ax apply: {}: cannot name a DAG after this file",
                path.display()
            );
            return Ok(exit::USAGE);
        };
        match std::fs::read_to_string(path) {
            Ok(text) => files.push(DagFileText {
                name: name.to_string(),
                text,
                file: path.display().to_string(),
            }),
            Err(e) => {
                tell!(o, "ax apply: {}: cannot read: {e}", path.display());
                return Ok(exit::FAILED);
            }
        }
    }
    let answer = c
        .request(ApplyDags {
            files,
            user: args.user.clone(),
            edit: false,
        })
        .await?;
    Ok(applied(o, &answer))
}

/// Prints what an apply did, or its errors (then exit 1: nothing stored).
fn applied(o: &mut Out<'_>, answer: &ApplyAnswer) -> i32 {
    if o.json {
        o.print_json(answer);
    } else {
        for e in &answer.errors {
            tell!(o, "{e}");
        }
        for name in &answer.applied {
            say!(o, "applied {name}");
        }
    }
    if answer.errors.is_empty() {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// The user and short name `ax edit|export|remove NAME` act on: a full
/// name says its user.
fn target(args: &UserDagArgs) -> (Option<String>, String) {
    match user_dag_owner(&args.name) {
        Some(owner) => (
            args.user.clone().or_else(|| Some(owner.to_string())),
            args.name[owner.len() + 2..].to_string(),
        ),
        None => (args.user.clone(), args.name.clone()),
    }
}

pub(super) async fn export(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &UserDagArgs,
) -> Result<i32, ClientError> {
    let (user, name) = target(args);
    let answer = c.request(ExportDag { name, user }).await?;
    if o.json {
        return Ok(o.print_json(&answer));
    }
    if o.stdout.terminal {
        o.say_all(answer.text.lines().map(str::to_string));
    } else {
        // To a pipe or a file: the stored file byte for byte.
        let _ = o.out.write_all(answer.text.as_bytes());
    }
    Ok(exit::OK)
}

pub(super) async fn remove(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &UserDagArgs,
) -> Result<i32, ClientError> {
    let (user, name) = target(args);
    let answer = c
        .request(RemoveDag {
            name: args.name.clone(),
            user: user.clone(),
        })
        .await?;
    if o.json {
        return Ok(o.print_json(&answer));
    }
    match user {
        Some(user) => say!(o, "removed @{user}/{name}"),
        None => say!(o, "removed {name}"),
    }
    Ok(exit::OK)
}

/// A private folder (`0700`) for the file being edited, removed when
/// dropped.
struct EditDir(PathBuf);

impl EditDir {
    fn new() -> std::io::Result<EditDir> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!("ax-edit-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(EditDir(dir))
    }
}

impl Drop for EditDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to a new `0600` file.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// Runs the user's editor on `file`, as `crontab -e` does: `$VISUAL`,
/// else `$EDITOR`, else `vi`, through `sh` so that it may carry flags.
fn run_editor(file: &Path) -> std::io::Result<std::process::ExitStatus> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".into());
    std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg("sh")
        .arg(file)
        .status()
}

pub(super) async fn edit(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &UserDagArgs,
) -> Result<i32, ClientError> {
    let (user, name) = target(args);
    let original = match c
        .request(ExportDag {
            name: name.clone(),
            user: user.clone(),
        })
        .await
    {
        Ok(stored) => stored.text,
        Err(ClientError::Rpc(e)) if e.kind() == codes::NOT_FOUND => TEMPLATE.to_string(),
        Err(e) => return Err(e),
    };
    let dir = match EditDir::new() {
        Ok(dir) => dir,
        Err(e) => {
            tell!(o, "ax edit: cannot make a private temp folder: {e}");
            return Ok(exit::FAILED);
        }
    };
    let file = dir.0.join(format!("{name}.toml"));
    if let Err(e) = write_private(&file, &original) {
        tell!(o, "ax edit: cannot write {}: {e}", file.display());
        return Ok(exit::FAILED);
    }
    let stdin = std::io::stdin();
    loop {
        match run_editor(&file) {
            Ok(status) if status.success() => {}
            Ok(status) => {
                tell!(
                    o,
                    "ax edit: the editor failed ({status}); the stored DAG is unchanged"
                );
                return Ok(exit::FAILED);
            }
            Err(e) => {
                tell!(o, "ax edit: cannot run the editor: {e}");
                return Ok(exit::FAILED);
            }
        }
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                tell!(o, "ax edit: cannot read {}: {e}", file.display());
                return Ok(exit::FAILED);
            }
        };
        if text == original {
            tell!(o, "ax: no changes");
            return Ok(exit::OK);
        }
        let answer = c
            .request(ApplyDags {
                files: vec![DagFileText {
                    name: name.clone(),
                    text,
                    file: file.display().to_string(),
                }],
                user: user.clone(),
                edit: true,
            })
            .await?;
        if answer.errors.is_empty() {
            return Ok(applied(o, &answer));
        }
        for e in &answer.errors {
            tell!(o, "{e}");
        }
        let _ = write!(o.err, "re-edit? [Y/n] ");
        let _ = o.err.flush();
        let mut reply = String::new();
        let read = stdin.lock().read_line(&mut reply).unwrap_or(0);
        if read == 0 || reply.trim().eq_ignore_ascii_case("n") {
            tell!(o, "ax: the stored DAG is unchanged");
            return Ok(exit::FAILED);
        }
    }
}
