//! The shipped systemd units (`config/axd.service`, `config/axd-user.service`,
//! docs/operations.md): every directive is one systemd knows, the program
//! started is the `axd` this build makes, and, where `systemd-analyze` is
//! installed, systemd itself verifies each unit with its `ExecStart`
//! pointed at the built binary.

use std::path::{Path, PathBuf};
use std::process::Command;

const AXD: &str = env!("CARGO_BIN_EXE_axd");

/// The directives the units may use, by section.
const KNOWN: &[(&str, &[&str])] = &[
    ("Unit", &["Description", "Documentation", "After", "Wants"]),
    (
        "Service",
        &[
            "Type",
            "NotifyAccess",
            "ExecStart",
            "ExecReload",
            "WatchdogSec",
            "Restart",
            "RestartSec",
            "TimeoutStopSec",
            "KillMode",
            "UMask",
            "StateDirectory",
            "StateDirectoryMode",
            "ConfigurationDirectory",
            "CapabilityBoundingSet",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectKernelLogs",
            "ProtectControlGroups",
            "ProtectClock",
            "RestrictRealtime",
            "LockPersonality",
            "SystemCallArchitectures",
        ],
    ),
    ("Install", &["WantedBy"]),
];

fn unit(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// `(section, key, value)` of every directive.
fn directives(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not a directive: {line}"));
        out.push((
            section.clone(),
            key.trim().to_string(),
            value.trim().to_string(),
        ));
    }
    out
}

/// The directives are known, and `ExecStart` starts an `axd` as this
/// build names it; returns the program's path in the unit.
fn check_directives(name: &str, text: &str) -> String {
    let all = directives(text);
    for (section, key, _) in &all {
        let known = KNOWN
            .iter()
            .find(|(s, _)| s == section)
            .map(|(_, keys)| *keys);
        assert!(
            known.is_some_and(|keys| keys.contains(&key.as_str())),
            "{name}: [{section}] {key} is not a known directive"
        );
    }
    let exec = all
        .iter()
        .find(|(_, k, _)| k == "ExecStart")
        .map(|(_, _, v)| v.split_whitespace().next().unwrap().to_string())
        .unwrap_or_else(|| panic!("{name}: no ExecStart"));
    assert_eq!(
        Path::new(&exec).file_name(),
        Path::new(AXD).file_name(),
        "{name}: {exec}"
    );
    assert!(Path::new(AXD).is_file(), "the build has {AXD}");
    // KillMode=process: a restart signals axd alone, and its jobs go on
    // (docs/operations.md, "Upgrade").
    for keep in ["Type=notify", "WatchdogSec=30s", "KillMode=process"] {
        assert!(text.lines().any(|l| l == keep), "{name}: {keep} is kept");
    }
    exec
}

/// `systemd-analyze verify` on `text` with its program replaced by the
/// built axd; `None` when the tool is not installed.
fn systemd_verify(name: &str, text: &str, exec: &str, user: bool) -> Option<()> {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("axd.service");
    std::fs::write(&path, text.replace(exec, AXD)).unwrap();
    let mut cmd = Command::new("systemd-analyze");
    if user {
        // A user manager's places, without a login session.
        let runtime = dir.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
    }
    let out = cmd
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name}: systemd-analyze verify: {stderr}"
    );
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("axd.service"))
        .collect();
    assert!(
        about_unit.is_empty(),
        "{name}: systemd-analyze verify: {about_unit:?}"
    );
    Some(())
}

#[test]
fn the_system_unit_runs_axd_as_root_with_a_bounded_set_of_capabilities() {
    let (_, text) = unit("axd.service");
    let exec = check_directives("axd.service", &text);
    // Root, so that jobs start as their users; setuid programs stay usable
    // by jobs.
    for absent in [
        "User",
        "Group",
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectSystem",
    ] {
        assert!(
            !directives(&text).iter().any(|(_, k, _)| k == absent),
            "axd.service: {absent} must not be set (docs/operations.md)"
        );
    }
    let caps = directives(&text)
        .into_iter()
        .find(|(_, k, _)| k == "CapabilityBoundingSet")
        .map(|(_, _, v)| v)
        .expect("a bounding set");
    for cap in [
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_KILL",
        "CAP_CHOWN",
        "CAP_FOWNER",
        "CAP_DAC_READ_SEARCH",
        "CAP_SYS_PTRACE",
    ] {
        assert!(caps.split_whitespace().any(|c| c == cap), "{cap} in {caps}");
    }
    if systemd_verify("axd.service", &text, &exec, false).is_none() {
        eprintln!(
            "axd.service: systemd-analyze not installed: only the directive list was checked"
        );
    }
}

#[test]
fn the_user_unit_parses() {
    let (_, text) = unit("axd-user.service");
    let exec = check_directives("axd-user.service", &text);
    assert!(text.contains("WantedBy=default.target"));
    if systemd_verify("axd-user.service", &text, &exec, true).is_none() {
        eprintln!(
            "axd-user.service: systemd-analyze not installed: only the directive list was checked"
        );
    }
}
