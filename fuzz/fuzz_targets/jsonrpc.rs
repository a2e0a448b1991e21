//! Any line as a JSON-RPC frame: decoded or refused with a named error,
//! never a panic. A decoded request encodes back to an equal one.
#![no_main]
use ax_protocol::decode_request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    match decode_request(&line) {
        Ok(req) => {
            assert_eq!(req.jsonrpc, "2.0");
            let again = serde_json::to_string(&req).expect("encodes");
            let back = decode_request(&again).expect("re-decodes");
            assert_eq!(back.method, req.method);
            assert_eq!(back.id, req.id);
        }
        Err((_, e)) => assert!(!e.message.is_empty()),
    }
});
