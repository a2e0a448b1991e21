//! `ax reload` on a broken `axd.toml`: exit 2 with the daemon's message
//! naming the key and line; on a good one, exit 0 (docs/cli.md, "ax";
//! docs/config.md, "Reload").

use std::path::Path;
use std::process::Command;

use ax_testkit::{Daemon, axd_beside};

fn ax_reload(socket: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(socket)
        .arg("reload")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ax_reload_exits_2_naming_the_broken_key() {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let d = Daemon::start(axd, "timezone = \"UTC\"\n", &[]).unwrap();
    assert_eq!(ax_reload(&d.socket).0, 0);
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(&d.config, format!("{text}colour = 1\n")).unwrap();
    let (code, stderr) = ax_reload(&d.socket);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("(key `colour`)"), "{stderr}");
}
