//! A crontab entry's command as cron runs it: the `%` rule (the command
//! ends at the first unescaped `%`, the rest is stdin), and its form as
//! one shell command for ax, whose jobs get no stdin of their own.

/// The command part and the stdin lines of a cron command field, as
/// Vixie cron and cronie split it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// What cron hands to `SHELL -c`: up to the first unescaped `%`, with
    /// each `\%` made a `%` (other backslashes are kept).
    pub command: String,
    /// Cron's stdin, one entry per line, without the line ends; `None`
    /// when the field has no unescaped `%`. Cron writes each line followed
    /// by a newline (it adds the last one when the text lacks it).
    pub stdin: Option<Vec<String>>,
}

/// Splits a cron command field by cron's `%` rule. Quotes do not protect a
/// `%`: cron reads the field before any shell does.
pub(crate) fn split_percent(field: &str) -> Split {
    let mut command = String::new();
    let mut escaped = false;
    let mut rest = None;
    for (at, c) in field.char_indices() {
        // As cronie: the character after a backslash never starts an
        // escape itself, so `\\%` is `\\` and then the end of the command.
        if escaped {
            escaped = false;
            if c == '%' {
                command.pop();
            }
            command.push(c);
            continue;
        }
        if c == '%' {
            rest = Some(&field[at + 1..]);
            break;
        }
        escaped = c == '\\';
        command.push(c);
    }
    let stdin = rest.map(stdin_lines);
    Split { command, stdin }
}

/// cron's stdin text of `rest` (`%` a newline, `\%` a `%`, a final newline
/// added when missing), as lines.
fn stdin_lines(rest: &str) -> Vec<String> {
    let mut text = String::new();
    let mut escaped = false;
    for c in rest.chars() {
        if escaped {
            escaped = false;
            if c != '%' {
                text.push('\\');
            }
        } else if c == '%' {
            text.push('\n');
            continue;
        }
        if c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        text.push(c);
    }
    if escaped {
        text.push('\\');
    }
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(&text);
    body.split('\n').map(str::to_owned).collect()
}

/// `s` as one word for a POSIX shell: in single quotes, each `'` written
/// as `'\''`. Every other byte is literal inside single quotes.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command ax runs for a split field: the command itself, or, when cron
/// gave it stdin, `printf '%s\n' LINE… | ( COMMAND\n)`, which hands the
/// command the same bytes on stdin. The newline before `)` keeps a `#`
/// comment at the end of the command from swallowing the parenthesis.
pub(crate) fn with_stdin(split: &Split) -> String {
    match &split.stdin {
        None => split.command.clone(),
        Some(lines) if lines.is_empty() => split.command.clone(),
        Some(lines) => {
            let words: Vec<String> = lines.iter().map(|l| shell_quote(l)).collect();
            format!(
                "printf '%s\\n' {} | ( {}\n)",
                words.join(" "),
                split.command
            )
        }
    }
}

/// A shell token, as far as naming a job and spotting wrappers needs:
/// words with their quotes removed, and the operators between commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Word(String),
    /// `&&`, `||`, `;`, `|`, `&`, `(`, `)`, `{`, `}` or a redirection.
    Op(String),
}

/// Splits a command into words and operators; an unclosed quote ends the
/// last word (`unclosed` says so).
pub(crate) fn tokens(command: &str) -> (Vec<Token>, bool) {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let mut unclosed = false;
    let flush = |word: &mut String, in_word: &mut bool, out: &mut Vec<Token>| {
        if *in_word {
            out.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => flush(&mut word, &mut in_word, &mut out),
            '\'' | '"' => {
                in_word = true;
                let mut closed = false;
                while let Some(q) = chars.next() {
                    if q == c {
                        closed = true;
                        break;
                    }
                    if q == '\\' && c == '"' {
                        if let Some(n) = chars.next() {
                            word.push(n);
                        }
                        continue;
                    }
                    word.push(q);
                }
                unclosed |= !closed;
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            ';' | '&' | '|' | '(' | ')' | '<' | '>' => {
                flush(&mut word, &mut in_word, &mut out);
                let mut op = c.to_string();
                if let Some(&n) = chars.peek()
                    && ((n == c && matches!(c, '&' | '|' | '>' | '<')) || (c == '>' && n == '&'))
                {
                    op.push(n);
                    chars.next();
                }
                out.push(Token::Op(op));
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut in_word, &mut out);
    (out, unclosed)
}

/// The simple commands of a token list: the words between the operators
/// that separate commands (`&&`, `||`, `;`, `|`, `&`, parentheses,
/// braces), redirections and their targets left out.
pub(crate) fn simple_commands(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    let mut redirect_target = false;
    for t in tokens {
        match t {
            Token::Op(op) if op.starts_with('>') || op.starts_with('<') => redirect_target = true,
            Token::Op(_) => {
                redirect_target = false;
                out.push(Vec::new());
            }
            Token::Word(w) if w == "{" || w == "}" || w == "!" => out.push(Vec::new()),
            Token::Word(w) => {
                if std::mem::take(&mut redirect_target) {
                    continue;
                }
                // `2>` leaves a bare file-descriptor number before the operator.
                out.last_mut().expect("never empty").push(w.clone());
            }
        }
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Programs that run the command after their options (and, for some, one
/// argument): the job is named after what they run.
fn wrapper_arity(program: &str) -> Option<usize> {
    match program {
        "nice" | "ionice" | "nohup" | "exec" | "env" | "time" | "command" | "chronic" => Some(0),
        "flock" | "timeout" | "setlock" => Some(1),
        _ => None,
    }
}

/// The words of `cmd` after leading `NAME=value` assignments and
/// wrappers (`nice -n 5`, `flock -n LOCK`, `timeout 5m`, `sudo -u X`).
fn unwrapped(cmd: &[String]) -> &[String] {
    let mut rest = cmd;
    loop {
        while let Some(w) = rest.first()
            && is_assignment(w)
        {
            rest = &rest[1..];
        }
        let Some(first) = rest.first() else {
            return rest;
        };
        let base = basename(first);
        let arity = match base {
            "sudo" | "runuser" => {
                // Their `-u USER` takes a value; skip it and the options.
                let mut i = 1;
                while i < rest.len() && rest[i].starts_with('-') {
                    if matches!(rest[i].as_str(), "-u" | "-g" | "--user" | "--group") {
                        i += 1;
                    }
                    i += 1;
                }
                rest = &rest[i.min(rest.len())..];
                continue;
            }
            b => match wrapper_arity(b) {
                Some(n) => n,
                None => return rest,
            },
        };
        let mut i = 1;
        while i < rest.len() && rest[i].starts_with('-') {
            // `nice -n 5`, `ionice -c 3`, `timeout -s KILL`: options with a value.
            if matches!(rest[i].as_str(), "-n" | "-c" | "-s" | "-w" | "-E") && base != "flock" {
                i += 1;
            }
            if base == "flock" && matches!(rest[i].as_str(), "-w" | "-E" | "--timeout") {
                i += 1;
            }
            i += 1;
        }
        rest = &rest[(i + arity).min(rest.len())..];
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit()
    })
}

/// The last component of a path.
pub(crate) fn basename(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// Steps that only test or prepare (`cd /`, `test -x X`, a sleep): the job
/// is named after the first step that is not one of these.
fn is_preparation(program: &str) -> bool {
    matches!(
        program,
        "cd" | "test" | "[" | "[[" | "sleep" | "true" | ":" | "perl" | "umask" | "set" | "export"
    )
}

/// The program the command is about, for the job's name: the first simple
/// command that is not a preparation, unwrapped; for `run-parts`, its
/// folder (`cron.daily`). A script's extension is dropped.
pub(crate) fn program_name(command: &str) -> Option<String> {
    let (tokens, _) = tokens(command);
    let commands = simple_commands(&tokens);
    let mut first = None;
    for cmd in &commands {
        let words = unwrapped(cmd);
        let Some(program) = words.first() else {
            continue;
        };
        let base = basename(program);
        first.get_or_insert(base);
        if is_preparation(base) {
            continue;
        }
        if base == "run-parts"
            && let Some(dir) = words[1..].iter().rev().find(|w| !w.starts_with('-'))
        {
            return Some(basename(dir).to_string());
        }
        return Some(strip_extension(base).to_string());
    }
    first.map(|b| strip_extension(b).to_string())
}

fn strip_extension(name: &str) -> &str {
    for ext in [".sh", ".bash", ".py", ".pl", ".rb", ".php"] {
        if let Some(stem) = name.strip_suffix(ext)
            && !stem.is_empty()
        {
            return stem;
        }
    }
    name
}

/// Whether some simple command of `command` runs `flock` with `-n`
/// (`--nonblock`, or `-n` among grouped short options).
pub(crate) fn has_nonblocking_flock(command: &str) -> bool {
    let (tokens, _) = tokens(command);
    simple_commands(&tokens).iter().any(|cmd| {
        let mut words = cmd.iter().skip_while(|w| is_assignment(w));
        words.next().is_some_and(|w| basename(w) == "flock")
            && words
                .take_while(|w| w.starts_with('-'))
                .any(|w| w == "--nonblock" || (!w.starts_with("--") && w.contains('n')))
    })
}

/// Whether any word of the command is `name` or a path ending in it.
pub(crate) fn mentions_program(command: &str, name: &str) -> bool {
    tokens(command)
        .0
        .iter()
        .any(|t| matches!(t, Token::Word(w) if basename(w) == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(field: &str) -> (String, Option<Vec<&str>>) {
        let s = split_percent(field);
        (
            s.command,
            s.stdin
                .map(|l| l.leak().iter().map(|s| s.as_str()).collect()),
        )
    }

    #[test]
    fn escaped_percent_is_a_literal_percent_in_the_command() {
        assert_eq!(
            split(r"pg_dump app > /b/app-$(date +\%F).dump"),
            ("pg_dump app > /b/app-$(date +%F).dump".into(), None)
        );
        // Other backslashes stay for the shell.
        assert_eq!(split(r"echo a\ b \\n"), (r"echo a\ b \\n".into(), None));
        // An escaped backslash does not escape the % after it.
        assert_eq!(split(r"echo \\%x"), (r"echo \\".into(), Some(vec!["x"])));
    }

    #[test]
    fn unescaped_percent_ends_the_command_and_starts_stdin() {
        assert_eq!(
            split("mail -s hi bob%line1%line2"),
            ("mail -s hi bob".into(), Some(vec!["line1", "line2"]))
        );
        // A trailing % is the final newline; %% an empty line.
        assert_eq!(split("cat%a%%"), ("cat".into(), Some(vec!["a", ""])));
        assert_eq!(split("cat%a%"), ("cat".into(), Some(vec!["a"])));
        // \% in the stdin part is a literal %, other backslashes are kept.
        assert_eq!(
            split(r"cat%50\% done\n"),
            ("cat".into(), Some(vec![r"50% done\n"]))
        );
        assert_eq!(split("cat%"), ("cat".into(), Some(vec![])));
    }

    #[test]
    fn a_percent_inside_single_quotes_is_still_crons() {
        assert_eq!(
            split("date '+%Y-%m'"),
            ("date '+".into(), Some(vec!["Y-", "m'"]))
        );
        assert!(
            tokens("date '+").1,
            "the command is left with an open quote"
        );
    }

    #[test]
    fn stdin_becomes_a_printf_pipeline_the_shell_runs_as_cron_did() {
        let s = split_percent("tr a-z A-Z%it's%$HOME `x`");
        let line = with_stdin(&s);
        assert_eq!(
            line,
            "printf '%s\\n' 'it'\\''s' '$HOME `x`' | ( tr a-z A-Z\n)"
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &line])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "IT'S\n$HOME `X`\n");
        // A comment at the end of the command does not eat the `)`.
        let s = split_percent("cat # note%x");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &with_stdin(&s)])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
    }

    #[test]
    fn jobs_are_named_after_the_program_past_wrappers_and_tests() {
        for (command, name) in [
            ("cd / && run-parts --report /etc/cron.hourly", "cron.hourly"),
            (
                "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
                "cron.daily",
            ),
            (
                "php /var/www/app/artisan schedule:run >> /dev/null 2>&1",
                "php",
            ),
            (
                "/usr/local/bin/backup.sh --full && /usr/local/bin/prune-backups.sh",
                "backup",
            ),
            ("flock -n /tmp/sync.lock /opt/sync/run.sh", "run"),
            ("FOO=1 nice -n 10 ionice -c3 /srv/x/reindex.py", "reindex"),
            ("sudo -u bob -- /home/bob/go", "go"),
            ("test -x /usr/bin/certbot && certbot -q renew", "certbot"),
            ("cd /tmp", "cd"),
        ] {
            assert_eq!(program_name(command).as_deref(), Some(name), "{command}");
        }
    }

    #[test]
    fn nonblocking_flock_is_found_in_any_form() {
        assert!(has_nonblocking_flock("flock -n /tmp/l run"));
        assert!(has_nonblocking_flock(
            "cd / && /usr/bin/flock -xn /tmp/l run"
        ));
        assert!(has_nonblocking_flock("flock --nonblock /tmp/l run"));
        assert!(!has_nonblocking_flock("flock /tmp/l run"));
        assert!(!has_nonblocking_flock("echo flock -n"));
    }
}
