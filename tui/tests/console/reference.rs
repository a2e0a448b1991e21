//! docs/console.md's key table is the keymap the console dispatches from:
//! regenerate it with `AX_UPDATE_DOCS=1 cargo test -p ax-clients --test
//! console reference::`.

use std::path::Path;

use ax_clients::console::keymap::reference_markdown;

const START: &str = "<!-- keymap: generated from tui/src/console/keymap.rs -->\n";
const END: &str = "<!-- /keymap -->";

#[test]
fn docs_console_md_lists_the_keymap() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = text.split_once(START).expect("the start marker");
    let (_, tail) = rest.split_once(END).expect("the end marker");
    let want = format!("{head}{START}{}{END}{tail}", reference_markdown());
    if std::env::var_os("AX_UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert!(
        text == want,
        "docs/console.md's key table differs from the keymap; regenerate it with\n\n    \
         AX_UPDATE_DOCS=1 cargo test -p ax-clients --test console reference::\n"
    );
}

/// The DAGs view shows the next fire in each DAG's own zone, and the
/// reference says so.
#[test]
fn docs_console_md_gives_the_next_fire_in_the_dags_zone() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console.md");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("next fire in local time"));
    assert!(text.contains("next fire in the DAG's zone"));
}
