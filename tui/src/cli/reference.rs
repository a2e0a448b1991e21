//! The user's reference generated from the CLI's own definition: the
//! markdown of `docs/cli.md`, the man pages of `ax man` and the shell
//! completions of `ax completions`. Everything here takes the `clap::Command`
//! of the binary, so the reference cannot describe flags the binary lacks.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// Help is rendered at this width in docs/cli.md, whatever the terminal of
/// the person regenerating it, so the file is the same on every machine.
const MARKDOWN_HELP_WIDTH: usize = 100;

/// The command that rewrites docs/cli.md from the binary (the test
/// `cli_reference` compares the file with [`markdown`] otherwise).
pub const REGENERATE: &str = "AX_UPDATE_DOCS=1 cargo test -p ax-tui --test cli_reference";

/// docs/cli.md: what `--help` prints for the command and for every visible
/// subcommand, depth first in declaration order, each in a text block.
pub fn markdown(cmd: &Command) -> String {
    let cmd = cmd.clone().term_width(MARKDOWN_HELP_WIDTH);
    let name = cmd.get_name().to_owned();
    let mut out = String::new();
    out.push_str(&format!("# `{name}` command-line reference\n\n"));
    out.push_str(&format!(
        "This file is generated from the definition of the `{name}` binary; do not edit it by\n\
         hand. After changing a command or a flag, regenerate it with\n\n\
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
    let mut paths = Vec::new();
    collect_visible_paths(&cmd, &mut vec![name], &mut paths);
    for path in paths {
        out.push_str(&format!("\n## `{}`\n\n```text\n", path.join(" ")));
        // Trailing spaces are an accident of clap's layout; git and editors
        // strip them, which would make the file differ from the generator.
        for line in help_text(&cmd, &path).trim_end().lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str("```\n");
    }
    out
}

/// Every command line that names a visible (sub)command, parents first.
fn collect_visible_paths(cmd: &Command, path: &mut Vec<String>, paths: &mut Vec<Vec<String>>) {
    paths.push(path.clone());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name().to_owned());
        collect_visible_paths(sub, path, paths);
        path.pop();
    }
}

/// Exactly what `<path> --help` prints: clap chooses the long or the short
/// layout depending on whether any argument has a long description, so the
/// text is taken from clap's own answer to the flag.
fn help_text(cmd: &Command, path: &[String]) -> String {
    let argv = path.iter().map(String::as_str).chain(["--help"]);
    match cmd.clone().try_get_matches_from(argv) {
        Err(answer) if answer.kind() == clap::error::ErrorKind::DisplayHelp => {
            answer.render().to_string()
        }
        other => panic!("`{} --help` did not print help: {other:?}", path.join(" ")),
    }
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
