//! Environment files (docs/job-files.md, "Secrets"): the `KEY=VALUE` lines a
//! job's `env_file` holds.
//!
//! The format is the common subset of systemd's `EnvironmentFile=`, docker's
//! `--env-file` and shell `source`: one `KEY=VALUE` per line, blank lines and
//! lines starting with `#` ignored, an optional `export ` prefix, and a value
//! optionally wrapped in one pair of single or double quotes (taken
//! literally: no escapes, no `$` expansion, no inline comments, so a secret
//! may hold `#`, `$` or `\` as it is).
//!
//! Errors name the line, never its text: the text is a secret.

/// Why an environment file was refused. Never carries the file's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct EnvFileError {
    /// 1-based line number.
    pub line: usize,
    pub problem: EnvLineProblem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvLineProblem {
    /// No `=` on a line that is neither blank nor a comment.
    #[error("expected KEY=VALUE")]
    NoEquals,
    /// The name before `=` is not a shell-style name.
    #[error("bad variable name (use letters, digits and _, not starting with a digit)")]
    BadName,
    /// A value opens a quote it does not close at the end of the line.
    #[error("the value's opening quote is not closed")]
    UnclosedQuote,
}

/// Whether `name` can name an environment variable a job is given: not
/// empty, and without `=` or NUL (execve's limits; the names `env` accepts).
pub fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// A shell-style name, `[A-Za-z_][A-Za-z0-9_]*`: what an env file's keys
/// must be. Stricter than [`valid_env_name`] so that a stray space or a
/// mistyped line is refused rather than read as an odd name.
fn shell_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The variables of an env file, in file order (a later line for a name
/// replaces an earlier one when they are applied).
pub fn parse_env_file(text: &str) -> Result<Vec<(String, String)>, EnvFileError> {
    let mut vars = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let fail = |problem| EnvFileError {
            line: i + 1,
            problem,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export")
            .filter(|rest| rest.starts_with([' ', '\t']))
            .map_or(line, str::trim_start);
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| fail(EnvLineProblem::NoEquals))?;
        let key = key.trim_end();
        if !shell_name(key) {
            return Err(fail(EnvLineProblem::BadName));
        }
        vars.push((key.to_string(), unquote(value.trim_start()).map_err(fail)?));
    }
    Ok(vars)
}

/// A value without its one pair of surrounding quotes, if it has them.
fn unquote(value: &str) -> Result<String, EnvLineProblem> {
    match value.chars().next() {
        Some(q @ ('"' | '\'')) => value[1..]
            .strip_suffix(q)
            .map(str::to_string)
            .ok_or(EnvLineProblem::UnclosedQuote),
        _ => Ok(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_comments_exports_and_quotes() {
        let text =
            "# a comment\n\nA=1\nexport B = two words \n  C='x # y'\nD=\"$z\\n\"\nE=\nF=a=b\n";
        let vars = parse_env_file(text).unwrap();
        let want: Vec<(String, String)> = [
            ("A", "1"),
            ("B", "two words"),
            ("C", "x # y"),
            ("D", "$z\\n"),
            ("E", ""),
            ("F", "a=b"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(vars, want);
    }

    #[test]
    fn errors_name_the_line_and_never_its_text() {
        let cases = [
            ("A=1\nsecretvalue\n", 2, EnvLineProblem::NoEquals),
            ("1A=secretvalue\n", 1, EnvLineProblem::BadName),
            ("A B=secretvalue\n", 1, EnvLineProblem::BadName),
            ("\n\nA=\"secretvalue\n", 3, EnvLineProblem::UnclosedQuote),
        ];
        for (text, line, problem) in cases {
            let e = parse_env_file(text).unwrap_err();
            assert_eq!((e.line, e.problem), (line, problem), "{text:?}");
            assert!(!e.to_string().contains("secretvalue"), "{e}");
        }
    }

    #[test]
    fn export_is_a_prefix_only_when_followed_by_a_blank() {
        let vars = parse_env_file("exported=1\n").unwrap();
        assert_eq!(vars, vec![("exported".to_string(), "1".to_string())]);
    }
}
