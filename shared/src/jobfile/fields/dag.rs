//! The DAG-level fields of a job file: what describes the DAG, when it
//! fires, what it runs after, how much history it keeps, and whom it tells
//! how a DAG run ended.

use super::*;

/// The longest `jitter`: a month, the longest slot spacing it is meant
/// to spread.
const MAX_JITTER: Duration = Duration::from_secs(31 * 86_400);

impl Cx<'_> {
    /// What describes the DAG and its hooks: `description`, `owner`,
    /// `on_failure`, `on_success`, `enabled`, `tags`.
    pub(super) fn dag_about(&mut self, root: &Table<'_>, spec: &mut DagSpec) {
        spec.description = self.opt_string(root, "description");
        spec.owner = self.opt_string(root, "owner");
        spec.on_failure = self
            .opt_string(root, "on_failure")
            .filter(|s| !s.is_empty());
        spec.on_success = self
            .opt_string(root, "on_success")
            .filter(|s| !s.is_empty());
        spec.enabled = self.opt_bool(root, "enabled").unwrap_or(true);
        spec.tags = self.opt_strings(root, "tags").unwrap_or_default();
    }

    /// When the DAG fires on its own: `schedule`, `timezone`, `catchup`,
    /// `overlap`, `jitter`.
    pub(super) fn dag_schedule(&mut self, root: &Table<'_>, spec: &mut DagSpec) {
        if let Some(v) = root.get("schedule")
            && let Some(s) = self.as_str(v, "schedule")
        {
            match Schedule::parse(s) {
                Ok(_) => spec.schedule = Some(s.to_string()),
                Err(e) => self.err(v.span(), format!("schedule: {}", e.reason)),
            }
        }
        if let Some(v) = root.get("timezone")
            && let Some(s) = self.as_str(v, "timezone")
        {
            match parse_zone(s) {
                Ok(_) => spec.timezone = Some(s.to_string()),
                Err(e) => self.err(v.span(), format!("timezone: {e}")),
            }
        }
        if let Some(v) = root.get("catchup") {
            spec.catchup = self
                .enumeration(
                    v,
                    "catchup",
                    &[
                        ("none", Catchup::None),
                        ("latest", Catchup::Latest),
                        ("all", Catchup::All),
                    ],
                )
                .unwrap_or_default();
        }
        if let Some(v) = root.get("overlap") {
            spec.overlap = self
                .enumeration(
                    v,
                    "overlap",
                    &[
                        ("skip", Overlap::Skip),
                        ("queue", Overlap::Queue),
                        ("replace", Overlap::Replace),
                        ("allow", Overlap::Allow),
                    ],
                )
                .unwrap_or_default();
        }
        self.dag_jitter(root, spec);
    }

    /// `jitter`: only a schedule's slots are delayed, so it needs one; at
    /// most [`MAX_JITTER`], so a planned start stays a date every reader
    /// can show.
    fn dag_jitter(&mut self, root: &Table<'_>, spec: &mut DagSpec) {
        let Some(v) = root.get("jitter") else {
            return;
        };
        let Some(d) = self.duration(v, "jitter") else {
            return;
        };
        if root.get("schedule").is_none() {
            self.err(
                v.span(),
                "jitter delays a schedule's slots: set `schedule` too",
            );
        } else if d > MAX_JITTER {
            self.err(v.span(), "jitter: at most 31d");
        } else if !d.is_zero() {
            spec.jitter = Some(d);
        }
    }

    /// `notify = { mail = [...], on = [...] }`: `on` is any of failure,
    /// success, output (default failure); `mail = []` sends none, whatever
    /// the daemon's `[notify]` says.
    pub(super) fn dag_notify(&mut self, root: &Table<'_>, spec: &mut DagSpec) {
        let Some(v) = root.get("notify") else {
            return;
        };
        let DeValue::Table(t) = v.get_ref() else {
            self.err(
                v.span(),
                "`notify` must be a table, e.g. { mail = [\"ops@example.com\"], on = [\"failure\"] }",
            );
            return;
        };
        for (key, _) in t.iter() {
            let k = key.get_ref().as_ref();
            if !NOTIFY_KEYS.contains(&k) {
                self.err(key.span(), unknown_key(k, " in notify", NOTIFY_KEYS.iter()));
            }
        }
        let mut notify = Notify {
            mail: Vec::new(),
            on: vec![NotifyOn::Failure],
        };
        if let Some(v) = t.get("mail")
            && let Some(items) = self.as_array(v, "notify.mail")
        {
            for item in items {
                if let Some(address) = self.as_str(item, "notify.mail entry") {
                    match rules::check_mail_address(address) {
                        Ok(()) => notify.mail.push(address.to_string()),
                        Err(e) => self.err(item.span(), format!("notify.mail: {e}")),
                    }
                }
            }
        } else if t.get("mail").is_none() {
            self.err(v.span(), "notify needs `mail`, the addresses to send to");
        }
        if let Some(v) = t.get("on")
            && let Some(items) = self.as_array(v, "notify.on")
        {
            notify.on.clear();
            for item in items {
                if let Some(on) = self.enumeration(item, "notify.on", &NotifyOn::ALL)
                    && !notify.on.contains(&on)
                {
                    notify.on.push(on);
                }
            }
        }
        spec.notify = Some(notify);
    }

    /// `after`: the DAGs whose success triggers this one; returns where
    /// each entry stands, for errors found once every file is read.
    pub(super) fn dag_after(
        &mut self,
        root: &Table<'_>,
        name: &str,
        spec: &mut DagSpec,
    ) -> Vec<(usize, usize)> {
        let mut after_at = Vec::new();
        if let Some(v) = root.get("after")
            && let Some(items) = self.as_array(v, "after")
        {
            for item in items {
                if let Some(s) = self.as_str(item, "after entry") {
                    if s == name {
                        self.err(
                            item.span(),
                            format!("after: DAG {name:?} cannot trigger itself"),
                        );
                    }
                    spec.after.push(s.to_string());
                    after_at.push(self.line_col(item.span().start));
                }
            }
        }

        after_at
    }

    /// `[history] keep_runs = N`: N is at least 1 (keeping no DAG run
    /// would lose a run before anyone saw how it ended).
    pub(super) fn history(&mut self, root: &Table<'_>) -> Option<u32> {
        let v = root.get("history")?;
        let DeValue::Table(t) = v.get_ref() else {
            self.err(v.span(), "`history` must be a table: write [history]");
            return None;
        };
        for (key, _) in t.iter() {
            let k = key.get_ref().as_ref();
            if !HISTORY_KEYS.contains(&k) {
                self.err(
                    key.span(),
                    unknown_key(k, " in [history]", HISTORY_KEYS.iter()),
                );
            }
        }
        let v = t.get("keep_runs")?;
        let n = self.int(v, "history.keep_runs")?;
        match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                self.err(
                    v.span(),
                    format!(
                        "history.keep_runs must be between 1 and {}, not {n}",
                        u32::MAX
                    ),
                );
                None
            }
        }
    }
}
