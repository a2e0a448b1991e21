//! `axd.toml` read end to end: defaults, relative paths, each key's checks
//! and the errors that name where a bad value stands.

use super::*;

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("/etc/ax/axd.toml")).map_err(|e| e.to_string())
}

#[test]
fn the_shipped_example_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/axd.toml");
    let c = Config::load(&path).unwrap();
    assert_eq!(c.pools.get("io"), Some(&40));
    assert_eq!(c.burst_extra, 3, "30% of 8, rounded up");
    assert_eq!(c.retry_per_minute, 100);
    assert_eq!(c.log_max_bytes, 10 << 20);
    assert!(c.jobs_dir.ends_with("config/jobs.d"));
}

#[test]
fn state_dir_and_jobs_dir_may_not_hold_each_other() {
    for text in [
        "jobs_dir = \"/srv/ax/jobs\"\nstate_dir = \"/srv/ax/jobs/state\"\n",
        "jobs_dir = \"/srv/ax/state/jobs\"\nstate_dir = \"/srv/ax/state\"\n",
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.contains("must not be inside one another"), "{e}");
    }
    assert!(parse("jobs_dir = \"/srv/ax/jobs\"\nstate_dir = \"/srv/ax/state\"\n").is_ok());
}

#[test]
fn metrics_addr_is_loopback_unless_public() {
    let c = parse("metrics_addr = \"127.0.0.1:9464\"\n").unwrap();
    assert_eq!(c.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
    let c = parse("metrics_addr = \"0.0.0.0:9464\"\nmetrics_public = true\n").unwrap();
    assert!(c.metrics_addr.is_some());
    assert_eq!(parse("").unwrap().metrics_addr, None);
}

#[test]
fn store_is_sqlite_unless_a_postgres_url_is_given() {
    assert!(parse("").unwrap().store.is_none());
    let c = parse("store = \"postgres://ax:pw@db.example/ax\"\n").unwrap();
    let url = c.store.expect("a PostgreSQL store");
    assert_eq!(url.redacted(), "postgres://ax:***@db.example/ax");
    let c = parse("store = \"postgres://ax@db/ax\"\n[cluster]\nheartbeat = \"2s\"\n").unwrap();
    assert_eq!(c.heartbeat, Duration::from_secs(2));
    assert_eq!(c.lease, Duration::from_secs(12), "six heartbeats");
    assert_eq!(parse("").unwrap().heartbeat, Duration::from_secs(5));
    let c =
        parse("store = \"postgres://ax@db/ax\"\n[cluster]\nheartbeat = \"1s\"\nlease = \"30s\"\n")
            .unwrap();
    assert_eq!(c.lease, Duration::from_secs(30));
    let other = parse("store = \"postgres://ax@other/ax\"\n").unwrap();
    assert_eq!(
        parse("").unwrap().restart_only_changes(&other),
        vec!["store"]
    );
}

#[test]
fn relative_paths_and_defaults() {
    let c = parse("jobs_dir = \"j\"\nmax_concurrency = 4\n").unwrap();
    assert_eq!(c.jobs_dir, PathBuf::from("/etc/ax/j"));
    assert_eq!(c.pools.get("default"), Some(&4));
    assert_eq!(c.default_timeout, None, "no timeout unless asked");
    let p = parse(
        "[pools.io]\nslots = 2\ntimeout = \"2h\"\n[pools.open]\nslots = 1\ntimeout = \"none\"\n",
    )
    .unwrap();
    assert_eq!(
        p.pool_timeouts.get("io"),
        Some(&Some(Duration::from_secs(7200)))
    );
    assert_eq!(p.pool_timeouts.get("open"), Some(&None));
    assert_eq!(p.pool_timeouts.get("default"), None);
    assert!(c.synchronous_full);
    assert_eq!(c.burst_extra, 2);
}

#[test]
fn job_environment_keys() {
    let c = parse("").unwrap();
    assert_eq!(c.shell, PathBuf::from("/bin/sh"));
    assert!(c.pass_env.is_empty() && c.job_env.is_empty());
    let c =
        parse("shell = \"/bin/bash\"\npass_env = [\"KEEP_ME\"]\n[job_env]\nLANG = \"C.UTF-8\"\n")
            .unwrap();
    assert_eq!(c.shell, PathBuf::from("/bin/bash"));
    assert_eq!(c.pass_env, ["KEEP_ME"]);
    assert_eq!(c.job_env, [("LANG".to_string(), "C.UTF-8".to_string())]);
}

#[test]
fn errors_name_key_and_line() {
    for (text, needle) in [
        ("max_concurrency = 4\ncolour = 1\n", "line 2"),
        ("max_concurrency = 4\ncolour = 1\n", "(key `colour`)"),
        ("default_timeout = \"ten\"\n", "line 1"),
        (
            "[retry]\nrate = \"lots\"\n",
            "line 2, column 8 (key `retry.rate`)",
        ),
        ("[aging]\ncap = 200\n", "out of range"),
        ("[pools.gpu]\nslots = 0\n", "pools.gpu.slots"),
        ("timezone = \"Mars/Base\"\n", "unknown time zone"),
        ("max_concurrency = \"x\"\n", "line 1"),
        ("[logs]\nmax_bytes = \"10 parsecs\"\n", "size"),
        ("metrics_addr = \"9464\"\n", "address and port"),
        ("metrics_addr = \"0.0.0.0:9464\"\n", "metrics_public = true"),
        (
            "max_concurrency = 4\nstore = \"mysql://db/ax\"\n",
            "line 2, column 9 (key `store`)",
        ),
        ("store = \"mysql://db/ax\"\n", "postgres://"),
        ("store = \"postgres://db:port/ax\"\n", "(key `store`)"),
        (
            "max_concurrency = 4\n[cluster]\nheartbeat = \"2s\"\n",
            "line 2: [cluster] needs a shared store: set store = \"postgres://",
        ),
        (
            "store = \"postgres://db/ax\"\n[cluster]\nheartbeat = \"1ms\"\n",
            "line 3, column 13 (key `cluster.heartbeat`): must be at least 100 ms",
        ),
        (
            "store = \"postgres://db/ax\"\n[cluster]\nbeat = \"1s\"\n",
            "line 3",
        ),
        (
            "pass_env = [\"KEEP\", \"NOTIFY_SOCKET\"]\n",
            "line 1, column 12 (key `pass_env`)",
        ),
        ("pass_env = [\"WATCHDOG_USEC\"]\n", "axd's own"),
        (
            "shell = \"bash\"\n",
            "line 1, column 9 (key `shell`): bash is not an absolute path",
        ),
        (
            "max_concurrency = 4\n[job_env]\nAX_JOB = \"x\"\n",
            "line 2: [job_env] \"AX_JOB\" is axd's own",
        ),
        (
            "[job_env]\nN = 1\n",
            "line 1: [job_env] N: the value must be a string",
        ),
        (
            "store = \"postgres://db/ax\"\n[cluster]\nheartbeat = \"2s\"\nlease = \"5s\"\n",
            "line 2: [cluster] lease = 5s is shorter than 3 heartbeats (6s)",
        ),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.contains(needle), "{text:?}: {err}");
        assert!(err.contains("/etc/ax/axd.toml"), "{err}");
    }
}
