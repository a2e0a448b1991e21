//! Clients that attack the socket and the metrics port, against the real
//! daemon (docs/operations.md, "Hostile or broken clients"): big reads
//! pipelined and never read, descriptor exhaustion, connections that never
//! say hello or send a byte at a time, too many connections of one uid,
//! peers that exit before their hello, store passwords, and bad values in
//! small places.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::free_port;
use crate::support::*;
use ax_testkit::Conn;
use serde_json::{Value, json};

/// The peak resident memory of `pid` (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn raw(d: &Daemon, read_timeout: u64) -> Conn {
    let conn = Conn::connect(&d.socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(read_timeout)))
        .unwrap();
    conn
}

/// A DAG of one long job and `n` jobs waiting for it: `n + 1` runs that
/// stay in the store without running.
fn waiting_dag(n: usize) -> String {
    let mut toml = String::from("[[job]]\nid = \"first\"\ncommand = \"sleep 600\"\n");
    for i in 0..n {
        toml.push_str(&format!(
            "[[job]]\nid = \"then_{i}\"\ncommand = \"true\"\ndeps = [\"first\"]\n"
        ));
    }
    toml
}

#[test]
fn big_reads_pipelined_and_never_read_slow_no_one_and_stay_bounded() {
    let d = Daemon::start_with(&format!("{BASE_CONFIG}\n"), &[]);
    let mut c = Conn::open(&d.socket, "setup").unwrap();
    let dag = waiting_dag(99);
    for _ in 0..30 {
        c.call("submit", json!({"toml": dag, "name": "wide"}))
            .unwrap();
    }
    let before_kib = peak_rss_kib(d.pid());
    // The attacker: 400 big reads, pipelined, never read.
    let mut attacker = UnixStream::connect(&d.socket).unwrap();
    let hello =
        r#"{"jsonrpc":"2.0","id":0,"method":"hello","params":{"protocol":1,"client":"greedy"}}"#;
    let mut flood = format!("{hello}\n");
    for i in 1..=400 {
        flood.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"list_runs\",\"params\":{{\"limit\":10000}}}}\n"
        ));
    }
    attacker.write_all(flood.as_bytes()).unwrap();
    // Another client's status, throughout.
    let mut probe = Conn::open(&d.socket, "probe").unwrap();
    let mut worst = Duration::ZERO;
    let probing = Instant::now();
    while probing.elapsed() < Duration::from_secs(8) {
        let t = Instant::now();
        probe.call("status", json!({})).unwrap();
        worst = worst.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let peak_kib = peak_rss_kib(d.pid());
    eprintln!(
        "status worst {worst:?} under the attack; axd peak RSS {} MiB before, {} MiB after",
        before_kib / 1024,
        peak_kib / 1024
    );
    assert!(worst < Duration::from_secs(2), "status took {worst:?}");
    assert!(
        peak_kib < before_kib + 200 * 1024,
        "axd grew from {before_kib} KiB to {peak_kib} KiB"
    );
    drop(attacker);
    // A reader that follows the marker gets every run, each answer within
    // a frame.
    let mut params = json!({"limit": 10000});
    let mut seen = std::collections::BTreeSet::new();
    let mut answers = 0;
    loop {
        c.send("list_runs", params.clone()).unwrap();
        let line = c.read_line().unwrap().unwrap();
        assert!(line.len() <= 1 << 20, "an answer of {} bytes", line.len());
        let answer: Value = serde_json::from_str(&line).unwrap();
        for r in answer["result"].as_array().unwrap() {
            assert!(seen.insert(r["id"].as_u64().unwrap()), "run listed twice");
        }
        answers += 1;
        match answer.get("truncated") {
            Some(t) => {
                assert_eq!(
                    t["returned"].as_u64().unwrap() as usize,
                    answer["result"].as_array().unwrap().len()
                );
                params = json!({"limit": 10000, "before": t["next"]["before"]});
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 3000);
    assert!(answers >= 2, "3,000 runs fit in one frame?");
}

fn scrape(port: u16) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.starts_with("HTTP/1.1 200").then_some(text)
}

/// Raises this test process's open-files limit to its hard limit.
fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the local struct only.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

#[test]
fn idle_metrics_connections_past_the_descriptor_limit_log_little_and_metrics_come_back() {
    raise_own_nofile();
    let port = free_port();
    // A descriptor limit below the connection cap (64): `accept` itself
    // fails (EMFILE).
    let config = format!("metrics_addr = \"127.0.0.1:{port}\"\n{BASE_CONFIG}");
    let mut d = Daemon::prepare(&config, &[]);
    d.set_nofile(64);
    d.spawn();
    assert!(scrape(port).is_some());
    let lines_before = d.log().lines().count();
    let mut held = Vec::new();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..600 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => held.push(s),
            Err(_) => break, // the backlog is full
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let added = d.log().lines().count() - lines_before;
    eprintln!(
        "{} idle connections held 3 s: {added} log lines",
        held.len()
    );
    assert!(held.len() > 64, "only {} connections", held.len());
    assert!(added < 20, "{added} log lines:\n{}", d.log());
    assert!(d.log().contains("accept failed"), "{}", d.log());
    drop(held);
    wait_until(20, "metrics served again", || scrape(port).is_some());
    let mut c = Conn::open(&d.socket, "after").unwrap();
    c.call("status", json!({})).unwrap();
}

#[test]
fn the_metrics_port_caps_connections_and_cuts_slow_headers() {
    let port = free_port();
    let config = format!(
        "metrics_addr = \"127.0.0.1:{port}\"\n{BASE_CONFIG}\n[limits]\nmetrics_connections = 4\nframe_timeout = \"1s\"\n"
    );
    let d = Daemon::start_with(&config, &[]);
    // A header a byte at a time: cut off after frame_timeout, though
    // bytes keep coming.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let began = Instant::now();
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let cut = request.iter().any(|b| {
        std::thread::sleep(Duration::from_millis(200));
        slow.write_all(&[*b]).is_err()
    }) || {
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        matches!(slow.read(&mut [0; 64]), Ok(0) | Err(_))
    };
    assert!(cut, "a slow header was never cut off");
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    // Four idle connections fill the cap; a fifth is closed at once.
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(matches!(extra.read(&mut [0; 64]), Ok(0) | Err(_)));
    wait_until(10, "the cap logged", || {
        d.log().contains("limits.metrics_connections")
    });
    drop(idle);
    wait_until(10, "metrics served again", || scrape(port).is_some());
}

#[test]
fn a_connection_without_hello_is_closed_after_the_timeout() {
    let config = format!("{BASE_CONFIG}\n[limits]\nhello_timeout = \"1s\"\n");
    let d = Daemon::start_with(&config, &[]);
    let began = Instant::now();
    let mut silent = raw(&d, 10);
    let line = silent
        .read_line()
        .unwrap()
        .expect("a reason before closing");
    let waited = began.elapsed();
    assert!(
        line.contains("\"timeout\"") && line.contains("hello"),
        "{line}"
    );
    assert!(silent.read_line().unwrap().is_none(), "still open");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    // One that said hello stays.
    let mut polite = Conn::open(&d.socket, "polite").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    polite.call("status", json!({})).unwrap();
}

#[test]
fn a_frame_sent_a_byte_at_a_time_is_cut_off() {
    let config = format!("{BASE_CONFIG}\n[limits]\nframe_timeout = \"1s\"\n");
    let d = Daemon::start_with(&config, &[]);
    let mut slow = raw(&d, 10);
    slow.hello("slow").unwrap();
    let began = Instant::now();
    let frame = br#"{"jsonrpc":"2.0","id":1,"method":"status","params":{"padding":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}"#;
    for b in frame {
        std::thread::sleep(Duration::from_millis(200));
        if slow.write_all(&[*b]).is_err() {
            break;
        }
    }
    let line = slow.read_line().ok().flatten().unwrap_or_default();
    assert!(line.contains("limits.frame_timeout"), "{line:?}");
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    assert!(matches!(slow.read_line(), Ok(None) | Err(_)), "still open");
}

#[test]
fn connections_per_uid_are_capped_with_a_clear_error() {
    let config = format!("{BASE_CONFIG}\n[limits]\nconnections_per_uid = 3\n");
    let d = Daemon::start_with(&config, &[]);
    let mut held: Vec<Conn> = (0..3)
        .map(|i| Conn::open(&d.socket, &format!("c{i}")).unwrap())
        .collect();
    let mut refused = raw(&d, 10);
    let line = refused.read_line().unwrap().expect("a reason");
    assert!(
        line.contains("too_many_connections") && line.contains("limits.connections_per_uid"),
        "{line}"
    );
    assert!(refused.read_line().unwrap().is_none(), "still open");
    wait_until(10, "the refusal logged", || {
        d.log().contains("limits.connections_per_uid")
    });
    for c in &mut held {
        c.call("status", json!({})).unwrap();
    }
    held.pop();
    wait_until(10, "a slot again", || {
        Conn::open(&d.socket, "again").is_ok_and(|mut c| c.call("status", json!({})).is_ok())
    });
}

/// Connects to `socket` from a child process that runs as uid and gid
/// 65534 with `groups` as its supplementary groups, and exits at once: the
/// connection (kept by this process) is the dead child's.
fn connect_as_dead_child(socket: &std::path::Path, groups: &[u32]) -> UnixStream {
    use std::os::fd::FromRawFd;
    let path = std::ffi::CString::new(socket.as_os_str().as_encoded_bytes()).unwrap();
    let groups: Vec<libc::gid_t> = groups.to_vec();
    // SAFETY: the child calls only async-signal-safe functions (setgroups,
    // setgid, setuid, connect, _exit) on data prepared before the fork.
    unsafe {
        // Close-on-exec: an axd another test spawns meanwhile must not
        // inherit the connection (the child only forks, never execs).
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (i, b) in path.as_bytes().iter().enumerate() {
            addr.sun_path[i] = *b as libc::c_char;
        }
        let pid = libc::fork();
        if pid == 0 {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setgid(65534) == 0
                && libc::setuid(65534) == 0
                && libc::connect(
                    fd,
                    (&addr as *const libc::sockaddr_un).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                ) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child could not connect"
        );
        UnixStream::from_raw_fd(fd)
    }
}

#[test]
fn roles_come_from_the_credentials_of_the_connect_not_from_proc() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (a child that connects as another uid)");
        return;
    }
    // `users` (gid 100) may view; the peer has it only as a supplementary
    // group, which /proc no longer shows once the peer has exited.
    let Some(users) = nix::unistd::Group::from_name("users").ok().flatten() else {
        eprintln!("skipped: no `users` group");
        return;
    };
    let users = users.gid.as_raw();
    let d = Daemon::prepare(&format!("socket_group = \"users\"\n{BASE_CONFIG}"), &[]);
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut d = d;
    d.spawn();
    // axd stopped while the child connects and exits: it accepts a
    // connection whose process is gone (its pid free for reuse).
    let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let stream = connect_as_dead_child(&d.socket, &[users]);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    writeln!(
        writer,
        r#"{{"jsonrpc":"2.0","id":1,"method":"hello","params":{{"protocol":1,"client":"gone"}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["result"]["role"], "viewer", "{line}");
}

#[test]
fn a_store_password_is_shown_nowhere() {
    let Some(db) = ax_testkit::pg::TestDb::create("redact") else {
        eprintln!("skipped: no PostgreSQL");
        return;
    };
    let secret = "hunter2secret";
    let sep = if db.url.contains('?') { '&' } else { '?' };
    // Trust authentication: the server ignores the password.
    let url = format!("{}{sep}password={secret}", db.url);
    let d = Daemon::start_with(&format!("store = \"{url}\"\n{BASE_CONFIG}"), &[]);
    let mut c = Conn::open(&d.socket, "viewer").unwrap();
    let status = c.call("status", json!({})).unwrap();
    let shown = status["config"]["store"].as_str().unwrap().to_string();
    assert!(
        !shown.contains(secret) && shown.contains("password=***"),
        "{shown}"
    );
    assert!(!d.log().contains(secret), "{}", d.log());
    drop(d);
    // Start-up errors, in each form libpq reads.
    for store in [
        format!("host=127.0.0.1 password={secret}"),
        format!("postgres://ax:{secret}@127.0.0.1:1/ax"),
        format!("postgres://ax@127.0.0.1:1/ax?password={secret}"),
    ] {
        let mut bad = Daemon::prepare(&format!("store = \"{store}\"\n{BASE_CONFIG}"), &[]);
        let err = ax_testkit::Daemon::spawn(&mut bad).expect_err("a store that cannot open");
        let text = err.to_string();
        assert!(
            text.contains("store") || text.contains("cannot open"),
            "{text}"
        );
        assert!(!text.contains(secret), "{store}: {text}");
        assert!(!bad.log().contains(secret), "{store}: {}", bad.log());
    }
}

#[test]
fn out_of_range_and_malformed_values_are_refused() {
    let d = Daemon::start(&[]);
    let mut c = Conn::open(&d.socket, "t").unwrap();
    let run = run_ids(&c.call("submit", json!({"command": "echo hi"})).unwrap())[0];
    c.wait_count("success", 1, Duration::from_secs(20)).unwrap();
    let code = |r: Result<Value, ax_testkit::conn::ConnError>| match r {
        Err(ax_testkit::conn::ConnError::Rpc { error, .. }) => error["data"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        other => format!("{other:?}"),
    };
    // 2^32 + 1 is not attempt 1.
    let r = c.call("logs", json!({"run": run, "attempt": 4294967297u64}));
    assert_eq!(code(r), "invalid_params");
    for name in [
        String::new(),
        "two\nlines".into(),
        "nul\0byte".into(),
        "x".repeat(100_000),
    ] {
        let r = c.call("submit", json!({"command": "true", "name": name}));
        assert_eq!(
            code(r),
            "invalid_params",
            "{:?}",
            &name[..name.len().min(20)]
        );
        let toml = "command = \"true\"\n";
        let r = c.call("submit", json!({"toml": toml, "name": name}));
        assert_eq!(code(r), "invalid_params");
    }
    // Ad-hoc names share one metrics label.
    for i in 0..20 {
        c.call(
            "submit",
            json!({"command": "true", "name": format!("adhoc-{i}")}),
        )
        .unwrap();
    }
    c.wait_count("success", 21, Duration::from_secs(30))
        .unwrap();
    let text = c.call("metrics", json!({})).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let dags: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("ax_attempt_outcomes_total{"))
        .filter_map(|l| l.split("dag=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(dags.into_iter().collect::<Vec<_>>(), ["(ad-hoc)"], "{text}");
}

#[test]
fn a_dag_list_longer_than_a_frame_is_cut_and_paged_by_name() {
    let mut files = Vec::new();
    for d in 0..200 {
        let mut toml = String::new();
        for j in 0..100 {
            toml.push_str(&format!(
                "[[job]]\nid = \"a_job_with_a_rather_long_name_{j}\"\ncommand = \"true\"\n"
            ));
            if j > 0 {
                toml.push_str(&format!(
                    "deps = [\"a_job_with_a_rather_long_name_{}\"]\n",
                    j - 1
                ));
            }
        }
        files.push((format!("dag{d:03}.toml"), toml));
    }
    let jobs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let d = Daemon::start(&jobs);
    let mut c = raw(&d, 30);
    c.hello("pager").unwrap();
    let mut params = Value::Null;
    let mut names = Vec::new();
    let mut answers = 0;
    loop {
        c.send("list_dags", params.clone()).unwrap();
        let line = c.read_line().unwrap().unwrap();
        assert!(line.len() <= 1 << 20, "an answer of {} bytes", line.len());
        let answer: Value = serde_json::from_str(&line).unwrap();
        names.extend(
            answer["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["name"].as_str().unwrap().to_string()),
        );
        answers += 1;
        match answer.get("truncated") {
            Some(t) => params = t["next"].clone(),
            None => break,
        }
    }
    let expected: Vec<String> = (0..200).map(|d| format!("dag{d:03}")).collect();
    assert_eq!(names, expected);
    assert!(answers >= 2, "200 DAGs of 100 jobs fit in one frame?");
}
