//! The JSON-RPC frame decoder, including inputs the fuzzer found
//! (`fuzz/`, kept in `tests/fuzz_regressions/`).

use ax_protocol::decode_request;

/// Decoding, encoding and decoding again gives the same request: what the
/// `jsonrpc` fuzz target asserts.
fn round_trips(bytes: &[u8]) {
    let line = String::from_utf8_lossy(bytes);
    if let Ok(req) = decode_request(&line) {
        let again = serde_json::to_string(&req).unwrap();
        let back = decode_request(&again).unwrap();
        assert_eq!(back.method, req.method);
        assert_eq!(back.id, req.id, "the id survives a round trip");
    }
}

#[test]
fn fuzz_regressions_round_trip() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/jsonrpc");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        round_trips(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 2);
}

/// The first crash: a 40-digit id became a float that printed differently
/// after a second parse (serde_json's fast float parsing is not correctly
/// rounded; `float_roundtrip` makes it so).
#[test]
fn huge_numeric_ids_keep_their_value() {
    round_trips(
        br#"{"jsonrpc":"2.0","id":1222222222222222222222222222222222222222,"method":"status"}"#,
    );
    round_trips(
        br#"{"jsonrpc":"2.0","id":0.1000000000000000055511151231257827,"method":"status"}"#,
    );
}

#[test]
fn malformed_frames_get_named_errors() {
    for (line, code) in [
        ("{", "parse_error"),
        ("[]", "invalid_request"),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"status"}"#,
            "invalid_request",
        ),
        (r#"{"jsonrpc":"2.0","id":1}"#, "invalid_request"),
    ] {
        let (_, e) = decode_request(line).unwrap_err();
        assert_eq!(e.kind(), code, "{line}");
        assert!(!e.message.is_empty());
    }
}

// ----- golden lines ---------------------------------------------------------
//
// `tests/golden/protocol.txt` holds lines captured from a real axd and
// client before the protocol was typed: `REQ` a request as ax clients write
// it, the `ANS` line after it the daemon's answer, `NOTE` a notification.
// Decoding each into its type and encoding it again must give the very
// same bytes.

use ax_protocol::api::*;
use ax_protocol::client::request_line;
use ax_protocol::request::*;
use ax_protocol::{Message, Method, Notification, Request};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn golden() -> Vec<(&'static str, String)> {
    include_str!("golden/protocol.txt")
        .lines()
        .map(|l| {
            let (kind, line) = l.split_once(' ').unwrap();
            (kind, line.to_string())
        })
        .collect()
}

/// Decodes `result` as `A` and encodes it again as the daemon does.
fn same_answer<A: Serialize + DeserializeOwned>(line: &str) {
    let msg: Message = serde_json::from_str(line).unwrap();
    let id = msg.id.clone().unwrap();
    let answer = match msg.error {
        Some(e) => Err(e),
        None => {
            let typed: A = serde_json::from_value(msg.result.clone().unwrap())
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            Ok(serde_json::to_value(typed).unwrap())
        }
    };
    let again = serde_json::to_string(&Message::response(id, answer)).unwrap();
    assert_eq!(again, line);
}

fn same_typed_answer(method: &str, line: &str) {
    match method {
        "hello" => same_answer::<<Hello as Method>::Answer>(line),
        "status" => same_answer::<<Status as Method>::Answer>(line),
        "list_runs" => same_answer::<<ListRuns as Method>::Answer>(line),
        "get_run" => same_answer::<<GetRun as Method>::Answer>(line),
        "list_dags" => same_answer::<<ListDags as Method>::Answer>(line),
        "get_dag" => same_answer::<<GetDag as Method>::Answer>(line),
        "get_dag_run" => same_answer::<<GetDagRun as Method>::Answer>(line),
        "submit" => same_answer::<<Submit as Method>::Answer>(line),
        "trigger" => same_answer::<<Trigger as Method>::Answer>(line),
        "cancel" => same_answer::<<Cancel as Method>::Answer>(line),
        "cancel_dag_run" => same_answer::<<CancelDagRun as Method>::Answer>(line),
        "retry" => same_answer::<<Retry as Method>::Answer>(line),
        "pause" => same_answer::<<Pause as Method>::Answer>(line),
        "resume" => same_answer::<<Resume as Method>::Answer>(line),
        "reload" => same_answer::<<Reload as Method>::Answer>(line),
        "heartbeat" => same_answer::<<Heartbeat as Method>::Answer>(line),
        "logs" => same_answer::<<Logs as Method>::Answer>(line),
        "log_info" => same_answer::<<LogInfo as Method>::Answer>(line),
        "events" => same_answer::<<Events as Method>::Answer>(line),
        "subscribe" => same_answer::<<Subscribe as Method>::Answer>(line),
        "apply_dags" => same_answer::<<ApplyDags as Method>::Answer>(line),
        "export_dag" => same_answer::<<ExportDag as Method>::Answer>(line),
        "remove_dag" => same_answer::<<RemoveDag as Method>::Answer>(line),
        other => panic!("no answer type for {other}"),
    }
}

#[test]
fn every_request_and_answer_keeps_its_exact_json() {
    let lines = golden();
    let mut methods = std::collections::BTreeSet::new();
    for pair in lines.windows(2) {
        let [(kind, req), (next, ans)] = pair else {
            unreachable!()
        };
        if *kind != "REQ" {
            continue;
        }
        assert_eq!(*next, "ANS", "{req}");
        let frame = decode_request(req).unwrap();
        let request = Request::decode(&frame.method, frame.params.clone())
            .unwrap_or_else(|e| panic!("{req}: {e:?}"));
        assert_eq!(request.method(), frame.method);
        let id = frame.id.as_ref().and_then(Value::as_u64).unwrap();
        assert_eq!(
            request_line(id, request.method(), request.params()),
            *req,
            "the request encodes as today's clients write it"
        );
        same_typed_answer(&frame.method, ans);
        methods.insert(frame.method);
    }
    // Every method is pinned.
    for m in [
        "hello",
        "status",
        "list_runs",
        "get_run",
        "list_dags",
        "get_dag",
        "get_dag_run",
        "submit",
        "trigger",
        "cancel",
        "cancel_dag_run",
        "retry",
        "pause",
        "resume",
        "reload",
        "heartbeat",
        "logs",
        "log_info",
        "events",
        "subscribe",
        "apply_dags",
        "export_dag",
        "remove_dag",
    ] {
        assert!(methods.contains(m), "no golden line for {m}");
    }
}

#[test]
fn notifications_keep_their_exact_json() {
    let mut kinds = Vec::new();
    for (kind, line) in golden() {
        if kind != "NOTE" {
            continue;
        }
        let msg: Message = serde_json::from_str(&line).unwrap();
        let note = Notification::decode(msg.method.as_deref().unwrap(), msg.params.unwrap())
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(note.to_line(), line);
        kinds.push(std::mem::discriminant(&note));
    }
    assert!(kinds.len() >= 2);
}

#[test]
fn typed_views_carry_types() {
    let lines = golden();
    let ans = lines
        .iter()
        .find(|(k, l)| *k == "ANS" && l.contains("\"state\":\"delayed\""))
        .map(|(_, l)| l.clone())
        .unwrap();
    let msg: Message = serde_json::from_str(&ans).unwrap();
    let run: RunView = serde_json::from_value(msg.result.unwrap()).unwrap();
    assert_eq!(run.state, ax_shared::RunState::Delayed);
    assert_eq!(run.attempts[0].outcome, Some(ax_shared::Outcome::Failed));
    assert!(run.next_at.unwrap() > run.created_at.unwrap());
}

#[test]
fn writes_are_the_methods_that_change_state() {
    let writes: Vec<&str> = golden()
        .iter()
        .filter(|(k, _)| *k == "REQ")
        .map(|(_, l)| decode_request(l).unwrap())
        .map(|f| Request::decode(&f.method, f.params).unwrap())
        .filter(Request::is_write)
        .map(|r| r.method())
        .collect();
    for w in [
        "submit",
        "trigger",
        "cancel",
        "cancel_dag_run",
        "retry",
        "pause",
        "resume",
        "reload",
        "heartbeat",
        "apply_dags",
        "remove_dag",
    ] {
        assert!(writes.contains(&w), "{w} is a write");
    }
    for r in [
        "status",
        "get_run",
        "list_runs",
        "logs",
        "events",
        "subscribe",
        "log_info",
        "export_dag",
    ] {
        assert!(!writes.contains(&r), "{r} only reads");
    }
}

#[test]
fn bad_parts_are_refused_whole_naming_the_part() {
    for (method, params, part) in [
        (
            "submit",
            r#"{"command":"true","env":{"A":"x","B":1}}"#,
            "env.B",
        ),
        ("cancel", r#"{"ids":[1,"x"]}"#, "ids[1]"),
        ("get_run", r#"{"id":"x"}"#, "id"),
        ("list_runs", r#"{"limit":-1}"#, "limit"),
        ("heartbeat", r#"{"run":1,"progress":"half"}"#, "progress"),
    ] {
        let e = Request::decode(method, serde_json::from_str(params).unwrap()).unwrap_err();
        assert_eq!(e.kind(), "invalid_params", "{method} {params}");
        assert!(
            e.message.contains(part),
            "{method}: {:?} names {part}",
            e.message
        );
    }
    let e = Request::decode("frobnicate", Value::Null).unwrap_err();
    assert_eq!(e.kind(), "method_not_found");
    // Run ids may also be given as decimal strings.
    assert_eq!(
        Request::decode("get_run", serde_json::json!({"id": "42"})).unwrap(),
        Request::from(GetRun { id: 42 })
    );
}
