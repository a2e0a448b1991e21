//! The generated user reference: docs/cli.md is what the binary's own
//! definition produces, `ax completions` prints a script a shell sources,
//! and `ax man` writes man pages that groff reads without a warning.

use std::path::{Path, PathBuf};
use std::process::Command;

use ax_clients::cli::reference::{REGENERATE, markdown};

use crate::support::ax_offline;

fn ax(args: &[&str]) -> (i32, String, String) {
    // COLUMNS fixes the width in case clap wraps help to the terminal.
    ax_offline(args, &[("COLUMNS", "100")])
}

/// docs/cli.md as the binary's `--help` answers make it.
fn generated_reference() -> String {
    markdown("ax", |path| {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, text, err) = ax(&args);
        if code == 0 {
            Ok(text)
        } else {
            Err(format!("`ax {}` exited {code}: {err}", args.join(" ")))
        }
    })
    .unwrap()
}

fn cli_md() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md")
}

#[test]
fn docs_cli_md_is_what_the_binary_generates() {
    let generated = generated_reference();
    let path = cli_md();
    if std::env::var_os("AX_UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk != generated {
        let first_difference = on_disk
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| on_disk.lines().count().min(generated.lines().count()));
        panic!(
            "docs/cli.md differs from the CLI's definition (first at line {}).\n\
             Regenerate it with:\n\n    {REGENERATE}\n",
            first_difference + 1
        );
    }
}

fn top_level_commands() -> Vec<String> {
    let (_, help, _) = ax(&["--help"]);
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_subcommand_has_a_section_in_the_reference() {
    let generated = generated_reference();
    let commands = top_level_commands();
    assert!(commands.len() > 10, "too few commands parsed: {commands:?}");
    assert!(commands.iter().any(|c| c == "completions") && commands.iter().any(|c| c == "man"));
    for command in commands {
        assert!(
            generated.contains(&format!("\n## `ax {command}`\n")),
            "no section for `ax {command}`"
        );
    }
    for nested in [["cron", "next"], ["import", "cron"]] {
        let (_, help, _) = ax(&[nested[0], nested[1], "--help"]);
        assert!(
            generated.contains(&format!(
                "## `ax {} {}`\n\n```text\n{help}",
                nested[0], nested[1]
            )),
            "nested commands are documented with their own help"
        );
    }
}

#[test]
fn bash_completions_name_the_subcommands() {
    let (code, script, err) = ax(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        script.contains("complete -F"),
        "not a bash completion script"
    );
    for word in ["validate", "submit", "--jobs-dir"] {
        assert!(script.contains(word), "bash completions lack {word}");
    }
    let (code, _, err) = ax(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error");
    assert!(err.contains("bash"), "the error lists the shells: {err}");
}

#[test]
fn man_writes_one_roff_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    let (code, _, err) = ax(&["man", out_dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for (page, title) in [
        ("ax.1", "ax"),
        ("ax-validate.1", "ax-validate"),
        ("ax-cron-next.1", "ax-cron-next"),
        ("ax-import-cron.1", "ax-import-cron"),
        ("ax-completions.1", "ax-completions"),
    ] {
        let text = std::fs::read_to_string(out_dir.join(page))
            .unwrap_or_else(|e| panic!("{page} not written: {e}"));
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!(".TH {title} 1"))),
            "{page} has no title line"
        );
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS"] {
            assert!(text.contains(section), "{page} lacks {section}");
        }
    }
    let pages = std::fs::read_dir(&out_dir).unwrap().count();
    // ax.1, one per top-level command, ax-cron-next.1 and ax-import-cron.1.
    assert_eq!(pages, 1 + top_level_commands().len() + 2);
    check_with_groff(&out_dir);
}

/// groff's own warnings (-ww) on every page, where groff is installed; -k
/// runs preconv first, as `man` does, since the pages are UTF-8.
fn check_with_groff(dir: &Path) {
    if Command::new("groff").arg("--version").output().is_err() {
        eprintln!("note: groff not installed; the man pages were checked for structure only");
        return;
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let page = entry.unwrap().path();
        let out = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .output()
            .unwrap();
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.trim().is_empty(),
            "groff rejects {}: {warnings}",
            page.display()
        );
    }
}
