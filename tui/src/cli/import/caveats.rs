//! What a crontab line means that ax says differently: a random sleep
//! before the work (ax's `jitter`), `flock -n` (ax's `overlap = "skip"`),
//! `run-parts` and anacron's test, `@reboot`. Each becomes a caveat the
//! summary and the job file's header name.

use super::command::{has_nonblocking_flock, mentions_program};

/// A random sleep in a command: `sleep $((RANDOM % N))` or `perl -e 'sleep
/// int(rand(N))'`, at most N seconds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RandomSleep {
    /// The sleep as written.
    pub text: String,
    pub seconds: u64,
    /// The command without the sleep, when dropping it changes nothing
    /// but the delay: the sleep starts the command or follows `&&`, `;` or
    /// `(`, and `&&` or `;` follows it.
    pub without: Option<String>,
}

/// The first random sleep of `command`, if any.
pub(crate) fn random_sleep(command: &str) -> Option<RandomSleep> {
    let starts = command.char_indices().filter(|&(i, _)| {
        i == 0
            || command[..i]
                .chars()
                .next_back()
                .is_some_and(|p| matches!(p, ' ' | '\t' | ';' | '&' | '|' | '('))
    });
    for (start, _) in starts {
        let rest = &command[start..];
        let Some((len, seconds)) = perl_sleep(rest).or_else(|| shell_sleep(rest)) else {
            continue;
        };
        let end = start + len;
        let text = command[start..end].to_string();
        let before = command[..start].trim_end();
        let after = command[end..].trim_start();
        let joined_before = before.is_empty()
            || before.ends_with("&&")
            || before.ends_with(';')
            || before.ends_with('(');
        let tail = after
            .strip_prefix("&&")
            .or_else(|| after.strip_prefix(';'))
            .map(str::trim_start);
        let without = match tail {
            Some(tail) if joined_before && !tail.is_empty() => {
                Some(format!("{}{tail}", &command[..start]))
            }
            _ => None,
        };
        return Some(RandomSleep {
            text,
            seconds,
            without,
        });
    }
    None
}

/// `perl -e 'sleep int(rand(N))'` (or with `"`, blanks anywhere, `;` at
/// the end, `sleep(int(rand(N)))` or `sleep rand N`-like forms): its
/// length and N.
fn perl_sleep(s: &str) -> Option<(usize, u64)> {
    let rest = s.strip_prefix("perl")?;
    let rest = blanks(rest)?;
    let rest = rest.strip_prefix("-e")?;
    let rest = blanks(rest)?;
    let quote = rest.chars().next().filter(|q| matches!(q, '\'' | '"'))?;
    let body_len = rest[1..].find(quote)?;
    let body: String = rest[1..1 + body_len]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let body = body.trim_end_matches(';');
    let n = [
        "sleepint(rand(",
        "sleep(int(rand(",
        "sleeprand(",
        "sleep(rand(",
    ]
    .iter()
    .find_map(|p| body.strip_prefix(p))
    .and_then(|r| {
        let digits: String = r.chars().take_while(char::is_ascii_digit).collect();
        let close = &r[digits.len()..];
        (matches!(close, "))" | ")))" | ")") && !digits.is_empty())
            .then(|| digits.parse().ok())
            .flatten()
    })?;
    let len = s.len() - rest.len() + 1 + body_len + 1;
    Some((len, n))
}

/// `sleep $((RANDOM % N))` (blanks anywhere inside, `$RANDOM` too): its
/// length and N.
fn shell_sleep(s: &str) -> Option<(usize, u64)> {
    let rest = s.strip_prefix("sleep")?;
    let rest = blanks(rest)?;
    let inner = rest.strip_prefix("$((")?;
    let close = inner.find("))")?;
    let body: String = inner[..close]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let n = body
        .strip_prefix("$RANDOM%")
        .or_else(|| body.strip_prefix("RANDOM%"))?
        .parse()
        .ok()?;
    let len = s.len() - inner.len() + close + 2;
    Some((len, n))
}

/// `s` after at least one blank.
fn blanks(s: &str) -> Option<&str> {
    let t = s.trim_start_matches([' ', '\t']);
    (t.len() < s.len()).then_some(t)
}

/// `seconds` as an ax duration in its largest whole unit (`12h`, `90s`).
pub(crate) fn duration(seconds: u64) -> String {
    match seconds {
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The caveats of a command as ax runs it, and of its schedule.
pub(crate) fn of_entry(schedule: &str, command: &str) -> Vec<String> {
    let mut out = Vec::new();
    if schedule == "@reboot" {
        out.push(
            "@reboot fires once per boot of the machine, not on a clock: the job runs when \
             axd starts after a boot (a file axd sees for the first time waits for the next \
             boot), so check that what it needs (network, mounts) is up by then"
                .into(),
        );
    }
    if has_nonblocking_flock(command) {
        out.push(
            "flock -n: cron started every slot and the lock made a slot that found the last \
             run active do nothing; ax's overlap = \"skip\" means that (the file keeps \
             overlap = \"allow\" and the flock, as cron ran it)"
                .into(),
        );
    }
    if mentions_program(command, "anacron") {
        out.push(
            "anacron test: the command runs only where anacron is not installed (anacron runs \
             the folder then); this file keeps catchup = \"none\", and catchup = \"latest\" \
             runs a slot missed while the machine was off, as anacron does"
                .into(),
        );
    }
    if mentions_program(command, "run-parts") {
        out.push(
            "run-parts: every script of the folder runs in this one job, so one failing \
             script fails the job and their outputs share one log; one job per script \
             (with deps for their order) shows each"
                .into(),
        );
    }
    let lower = command.to_ascii_lowercase();
    if random_sleep(command).is_none()
        && lower.contains("sleep")
        && (command.contains("RANDOM") || lower.contains("rand(") || lower.contains("shuf"))
    {
        out.push(
            "a random sleep: ax's jitter (e.g. jitter = \"10m\") delays each start by a random \
             time without holding a process"
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_and_shell_random_sleeps_are_found_and_dropped() {
        let s = random_sleep(
            "test -x /usr/bin/certbot && perl -e 'sleep int(rand(43200))' && certbot -q renew",
        )
        .unwrap();
        assert_eq!(s.text, "perl -e 'sleep int(rand(43200))'");
        assert_eq!(s.seconds, 43200);
        assert_eq!(
            s.without.as_deref(),
            Some("test -x /usr/bin/certbot && certbot -q renew")
        );
        let s = random_sleep("sleep $(( RANDOM % 600 )); /x/y --z").unwrap();
        assert_eq!(
            (s.text.as_str(), s.seconds),
            ("sleep $(( RANDOM % 600 ))", 600)
        );
        assert_eq!(s.without.as_deref(), Some("/x/y --z"));
        let s = random_sleep("perl -e \"sleep(int(rand(90)));\" && x").unwrap();
        assert_eq!((s.seconds, s.without.as_deref()), (90, Some("x")));
    }

    #[test]
    fn a_sleep_is_kept_where_dropping_it_would_change_the_command() {
        // After `||` the sleep decides whether `b` runs.
        let s = random_sleep("a || sleep $((RANDOM % 5)) && b").unwrap();
        assert_eq!(s.without, None);
        // Piped, or the whole command.
        assert_eq!(
            random_sleep("sleep $((RANDOM%5)) | cat").unwrap().without,
            None
        );
        assert_eq!(random_sleep("sleep $((RANDOM%5))").unwrap().without, None);
        assert_eq!(random_sleep("sleep 5 && x"), None);
        assert_eq!(random_sleep("nosleep $((RANDOM%5)) && x"), None);
    }

    #[test]
    fn caveats_name_flock_run_parts_anacron_reboot_and_other_sleeps() {
        assert_eq!(of_entry("0 * * * *", "/bin/true").len(), 0);
        let c = of_entry("@reboot", "flock -n /l x");
        assert!(
            c[0].starts_with("@reboot") && c[1].starts_with("flock -n"),
            "{c:?}"
        );
        let c = of_entry(
            "25 6 * * *",
            "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
        );
        assert!(
            c[0].starts_with("anacron") && c[1].starts_with("run-parts"),
            "{c:?}"
        );
        // ax reads the day fields as cron does: nothing to say.
        assert_eq!(of_entry("0 0 */10 * MON", "x"), Vec::<String>::new());
        assert_eq!(of_entry("0 0 13 * */2", "x"), Vec::<String>::new());
        let c = of_entry("0 * * * *", "sleep $(shuf -i 1-60 -n 1) && x");
        assert!(c[0].starts_with("a random sleep"), "{c:?}");
    }
}
