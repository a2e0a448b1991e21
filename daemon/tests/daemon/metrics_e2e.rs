//! Metrics of the real axd (docs/operations.md, "Monitoring"): after a
//! known workload, the scraped counters equal it, the exposition parses as
//! Prometheus text, and the socket's `metrics` (what `ax metrics` prints)
//! agrees with `GET /metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::support::*;
use crate::{free_port, parse_prometheus};
use ax_protocol::request::Metrics;
use prometheus_parse::{Scrape, Value};
use serde_json::json;

fn http_get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

pub(crate) fn sum(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            _ => 0.0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_workload_is_scraped_exactly_over_the_socket_and_http() {
    let port = free_port();
    let config = format!("metrics_addr = \"127.0.0.1:{port}\"\n{BASE_CONFIG}");
    let d = Daemon::start_with(&config, &[]);
    let mut c = d.client().await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(submit(&mut c, json!({"command": "true", "name": "ok"})).await[0]);
    }
    for _ in 0..3 {
        ids.push(submit(&mut c, json!({"command": "false", "name": "bad"})).await[0]);
    }
    // Fails twice (2 retries), then succeeds.
    let counter = d.path("flaky.count");
    let flaky = format!(
        "n=$(cat {0} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {0}; [ $n -ge 3 ]",
        counter.display()
    );
    ids.push(
        submit(
            &mut c,
            json!({"command": flaky, "name": "flaky", "retries": 2}),
        )
        .await[0],
    );
    let long = submit(&mut c, json!({"command": "sleep 100", "name": "long"})).await[0];
    wait_state(&mut c, long, "running", 10).await;
    c.call("cancel", json!({"id": long})).await.unwrap();
    ids.push(long);
    for id in &ids {
        wait_run(&mut c, *id, 20, |r| r.state.is_terminal()).await;
    }

    let via_socket = c.request(Metrics).await.unwrap().text;
    let (head, via_http) = http_get(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    for text in [&via_socket, &via_http] {
        let s = parse_prometheus(text);
        assert_eq!(sum(&s, "ax_attempts_started_total", &[]), 17.0, "{text}");
        let outcome = |dag: &str, outcome: &str| {
            sum(
                &s,
                "ax_attempt_outcomes_total",
                &[("dag", dag), ("outcome", outcome)],
            )
        };
        // Submitted DAGs share one label (their names are the clients').
        assert_eq!(outcome("(ad-hoc)", "success"), 11.0);
        assert_eq!(outcome("(ad-hoc)", "failed"), 5.0);
        assert_eq!(outcome("(ad-hoc)", "cancelled"), 1.0);
        assert_eq!(outcome("ok", "success"), 0.0);
        assert_eq!(sum(&s, "ax_runs", &[("state", "success")]), 11.0);
        assert_eq!(sum(&s, "ax_runs", &[("state", "failed")]), 3.0);
        assert_eq!(sum(&s, "ax_runs", &[("state", "cancelled")]), 1.0);
        assert_eq!(sum(&s, "ax_pool_slots", &[("pool", "two")]), 2.0);
        assert_eq!(sum(&s, "ax_clients_connected", &[]), 1.0);
    }
    let (head, _) = http_get(port, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}
