//! The bottom line's two inputs and outputs: the `:` command being typed
//! (its completions and what it names) and the answer to the last action,
//! which clears itself after `SAY_FOR`.

use chrono::{DateTime, Utc};

use super::action::View;

/// What `:` accepts besides the view names.
const COMMANDS: [&str; 2] = ["help", "quit"];

/// How long an action's result stays on the status line.
const SAY_FOR: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// What a `:` command names.
#[derive(Debug, PartialEq)]
pub(crate) enum Named {
    /// Nothing was typed.
    Nothing,
    Show(View),
    Help,
    Quit,
    /// An unknown or ambiguous name, and what to say about it.
    Error(String),
}

/// The `:` command typed so far.
#[derive(Debug, Default)]
pub(crate) struct CommandLine {
    pub(crate) text: String,
}

fn names() -> impl Iterator<Item = &'static str> {
    View::ALL.iter().map(|v| v.name()).chain(COMMANDS)
}

impl CommandLine {
    /// The names the typed text completes to.
    pub(crate) fn completions(&self) -> Vec<&'static str> {
        names()
            .filter(|n| n.starts_with(self.text.trim()))
            .collect()
    }

    /// Tab: extends the text to the longest prefix all completions share.
    pub(crate) fn complete(&mut self) {
        let options = self.completions();
        let Some(first) = options.first() else {
            return;
        };
        let mut common = first.to_string();
        for o in &options[1..] {
            while !o.starts_with(&common) {
                common.pop();
            }
        }
        if common.len() > self.text.trim().len() {
            self.text = common;
        }
    }

    /// Enter: what the text names (the text is cleared).
    pub(crate) fn take(&mut self) -> Named {
        let typed = self.text.trim().to_string();
        self.text.clear();
        // `:dag` and `:run` (singular) name their views too.
        let found: Vec<&str> = names()
            .filter(|n| n.starts_with(&typed) || n.trim_end_matches('s') == typed)
            .collect();
        match found.as_slice() {
            _ if typed.is_empty() => Named::Nothing,
            [name] => match View::ALL.iter().find(|v| v.name() == *name) {
                Some(v) => Named::Show(*v),
                None if *name == "quit" => Named::Quit,
                None => Named::Help,
            },
            [] => Named::Error(format!(
                "unknown command :{typed} (try :runs :dags :pools :events :nodes)"
            )),
            many => Named::Error(format!(":{typed} is ambiguous: {}", many.join(" "))),
        }
    }
}

/// The answer to the last action: its text, whether it is an error, and
/// when it was said. An answer is marked `✓` (done) or `✗` (error); a
/// question or an action still on its way (`note`) has no mark, as
/// nothing is done yet.
#[derive(Debug)]
pub(crate) struct StatusLine {
    pub(crate) said: Option<(String, bool)>,
    /// Whether `said` is an answer (marked) rather than a note.
    pub(crate) answer: bool,
    said_at: DateTime<Utc>,
}

impl StatusLine {
    pub(crate) fn new(now: DateTime<Utc>) -> StatusLine {
        StatusLine {
            said: None,
            answer: true,
            said_at: now,
        }
    }

    pub(crate) fn say(&mut self, text: String, error: bool, now: DateTime<Utc>) {
        self.said = Some((text, error));
        self.answer = true;
        self.said_at = now;
    }

    /// A question, or an action sent and not yet answered: no mark.
    pub(crate) fn note(&mut self, text: String, now: DateTime<Utc>) {
        self.said = Some((text, false));
        self.answer = false;
        self.said_at = now;
    }

    /// The line as shown: `✓ done`, `✗ error`, or a note as it is.
    pub(crate) fn text(&self) -> Option<String> {
        let (text, error) = self.said.as_ref()?;
        Some(match (self.answer, error) {
            (false, _) => text.clone(),
            (true, true) => format!("✗ {text}"),
            (true, false) => format!("✓ {text}"),
        })
    }

    /// Clears an answer older than `SAY_FOR`, unless it is a question
    /// still asked (`asking`).
    pub(crate) fn expire(&mut self, now: DateTime<Utc>, asking: bool) {
        if !asking && now - self.said_at > SAY_FOR {
            self.said = None;
        }
    }
}
