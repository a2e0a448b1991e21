//! The user's reference generated from the CLI itself: the markdown of
//! `docs/cli.md` (from the binary's `--help` answers), the man pages of
//! `ax man` and the shell completions of `ax completions` (from its
//! `clap::Command`), so the reference cannot describe flags the binary lacks.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// The command that rewrites docs/cli.md from the binary (the `reference`
/// module of the `cli` test binary compares the file with [`markdown`]
/// otherwise).
pub const REGENERATE: &str = "AX_UPDATE_DOCS=1 cargo test -p ax-clients --test cli reference::";

/// docs/cli.md: what `--help` prints for the program `name` and for every
/// subcommand its help lists, depth first in the listed order. `help(path)`
/// returns what `name path… --help` prints; the text is taken from the
/// program's own answer, so the file shows exactly what a user sees.
pub fn markdown<E>(
    name: &str,
    mut help: impl FnMut(&[String]) -> Result<String, E>,
) -> Result<String, E> {
    let mut out = String::new();
    out.push_str(&format!("# `{name}` command-line reference\n\n"));
    out.push_str(&format!(
        "This file is generated from the `{name}` binary; do not edit it by hand.\n\
         After changing a command or a flag, regenerate it with\n\n\
         ```sh\n{REGENERATE}\n```\n\n\
         (the same test fails while this file differs from the binary).\n\n"
    ));
    out.push_str(&format!(
        "The same text is printed by `{name} --help` and `{name} <command> --help`.\n\
         Man pages and shell completions come from the same definition:\n\n\
         ```sh\n\
         {name} man /usr/local/share/man/man1   # writes {name}.1 and {name}-<command>.1\n\
         {name} completions bash > /etc/bash_completion.d/{name}\n\
         {name} completions zsh > \"${{fpath[1]}}/_{name}\"\n\
         {name} completions fish > ~/.config/fish/completions/{name}.fish\n\
         ```\n\n\
         `{name} completions` knows bash, zsh, fish, elvish and powershell.\n"
    ));
    let mut pending = vec![Vec::<String>::new()];
    while let Some(path) = pending.pop() {
        let text = help(&path)?;
        let title: Vec<&str> = std::iter::once(name)
            .chain(path.iter().map(String::as_str))
            .collect();
        out.push_str(&format!("\n## `{}`\n\n```text\n", title.join(" ")));
        // Trailing spaces are an accident of clap's layout; git and editors
        // strip them, which would make the file differ from the generator.
        for line in text.trim_end().lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str("```\n");
        // Reversed onto the stack, so they come out in the listed order.
        for sub in listed_subcommands(&text).into_iter().rev() {
            let mut child = path.clone();
            child.push(sub);
            pending.push(child);
        }
    }
    Ok(out)
}

/// The names in the `Commands:` section of a clap help text: the lines
/// indented by exactly two spaces up to the next blank line.
fn listed_subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim_end() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Writes `<name>.1` for the command and `<name>-<sub>[-<subsub>].1` for
/// every visible subcommand into `dir` (created if missing); returns the
/// paths written, the command's own page first.
pub fn write_man_pages(cmd: &Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.clone();
    cmd.build();
    // Every page names the program and its version in the footer, as the
    // top page does (a subcommand has no version of its own).
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    let mut written = Vec::new();
    write_man_page_tree(cmd, dir, &source, &mut written)?;
    Ok(written)
}

fn write_man_page_tree(
    cmd: Command,
    dir: &Path,
    source: &str,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let subcommands: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    written.push(clap_mangen::Man::new(cmd).source(source).generate_to(dir)?);
    for sub in subcommands {
        write_man_page_tree(sub, dir, source, written)?;
    }
    Ok(())
}

/// The completion script of `shell` for the command, as the shell sources it.
pub fn write_completions(cmd: &Command, shell: Shell, out: &mut dyn Write) -> io::Result<()> {
    let mut cmd = cmd.clone();
    let name = cmd.get_name().to_owned();
    // clap_complete writes through a `&mut dyn Write` and panics on an I/O
    // error; render into memory so a closed pipe is an error, not a panic.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)?;
    out.flush()
}
