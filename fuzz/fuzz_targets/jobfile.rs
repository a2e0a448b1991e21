//! Any bytes as a job file: parse and validate must return Ok or errors
//! that point inside the text, never panic or hang.
#![no_main]
use ax_shared::jobfile::{ValidateOptions, check_after, parse_dag};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let opts = ValidateOptions {
        pools: Some(vec!["default".into(), "gpu".into()]),
    };
    match parse_dag("fuzz", "fuzz.toml", text, &opts) {
        Ok(file) => {
            let _ = check_after(&[&file]);
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            let lines = text.lines().count().max(1);
            for e in errors {
                assert!(!e.message.is_empty());
                if let Some(line) = e.line {
                    assert!(line >= 1 && line <= lines + 1, "line {line} of {lines}: {e}");
                }
            }
        }
    }
});
