//! The JSON-RPC frame decoder, including inputs the fuzzer found
//! (`fuzz/`, kept in `tests/fuzz_regressions/`).

use ax_shared::protocol::decode_request;

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
