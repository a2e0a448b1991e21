//! `ax status`: the daemon, its pools, its runs per state, its sizes,
//! the cluster's nodes, the config in force and what is broken.

use ax_protocol::api::{ConfigView, PoolView, StatusView};

use super::cells::human_bytes;
use super::cluster;

/// Every line of `ax status`, in order.
pub(crate) fn status_page(s: &StatusView) -> Vec<String> {
    let mut lines = vec![
        format!(
            "axd {}  up {}s  max_concurrency {} (+{} burst, {} in use)",
            s.version, s.uptime_s, s.max_concurrency, s.burst_extra, s.burst_in_use
        ),
        "pools:".into(),
    ];
    lines.extend(s.pools.iter().map(pool_line));
    let cluster_runs = s.cluster.as_ref().and_then(|c| c.runs.as_ref());
    // In a cluster the counts below are the answering node's.
    let here = if cluster_runs.is_some() {
        " (this node)"
    } else {
        ""
    };
    lines.push(format!("runs{here}:"));
    for (state, n) in &s.runs {
        lines.push(format!("  {state:<10} {n}"));
    }
    lines.push(format!(
        "failed in the last hour{here}: {}",
        s.failed_last_hour
    ));
    if let Some(runs) = cluster_runs {
        lines.push(cluster::cluster_runs_line(runs));
    }
    let size = |b: Option<u64>| b.map_or_else(|| "not measured yet".into(), human_bytes);
    lines.push(format!(
        "store {}  logs {}",
        size(s.store_bytes),
        size(s.log_bytes)
    ));
    if let Some(c) = &s.cluster {
        lines.extend(cluster::node_lines(&c.nodes));
    }
    if let Some(c) = &s.config {
        lines.extend(config_lines(c));
    }
    if let Some(e) = &s.store_error {
        lines.push(format!("STORE CANNOT WRITE: {e} (new writes are refused)"));
    }
    if !s.errors.is_empty() {
        lines.push("job-file errors:".into());
        lines.extend(s.errors.iter().map(|e| format!("  {e}")));
    }
    lines
}

/// One pool: running of its slots (in a cluster: in the whole cluster,
/// and here), and how many wait for it when known.
fn pool_line(p: &PoolView) -> String {
    let queued = p
        .queued
        .map(|q| format!(", {q} queued"))
        .unwrap_or_default();
    match p.cluster_running {
        Some(all) => format!(
            "  {:<12} {:>4}/{:<4} running in the cluster ({} here){queued}",
            p.name, all, p.slots, p.running
        ),
        None => format!(
            "  {:<12} {:>4}/{:<4} running{queued}",
            p.name, p.running, p.slots
        ),
    }
}

/// The config in force: its file, store, folders and limits.
fn config_lines(c: &ConfigView) -> Vec<String> {
    let mut lines = vec![format!(
        "config: {}",
        c.file.as_deref().unwrap_or("(defaults)")
    )];
    if let Some(store) = &c.store {
        lines.push(format!("  store {store}"));
    }
    let timeout = c.default_timeout.as_deref().unwrap_or("none");
    lines.push(format!(
        "  jobs_dir {}  state_dir {}  timezone {}",
        c.jobs_dir, c.state_dir, c.timezone
    ));
    lines.push(format!(
        "  default_timeout {timeout}  shutdown_grace {}  retry.rate {}/min",
        c.shutdown_grace, c.retry_per_minute
    ));
    lines.push(format!(
        "  aging every {} cap {}  burst.priority {}  logs max_bytes {} retain {}",
        c.aging_every, c.aging_cap, c.burst_priority, c.log_max_bytes, c.log_retain
    ));
    lines
}
