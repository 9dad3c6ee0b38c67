//! Logs people read: colour only on a terminal and never under `NO_COLOR`, so a log written
//! to a file or a pipe holds no escape codes. The terminal is a real pty (util-linux's
//! `script`), the command `lockstep demo` (JSON report, so no bars are drawn on it).

use std::process::{Command, Output};

const ESCAPE: &str = "\x1b[";

fn demo_command(dir: &std::path::Path) -> String {
    format!(
        "{} --output json demo --dir {}",
        e2e::lockstep_bin().display(),
        dir.display()
    )
}

/// `command` under a pseudo-terminal; what the terminal showed, stdout and stderr alike.
fn on_a_terminal(command: &str, no_color: Option<&str>) -> Output {
    let mut script = Command::new("script");
    script.args(["-qec", command, "/dev/null"]);
    script.env_remove("NO_COLOR");
    if let Some(value) = no_color {
        script.env("NO_COLOR", value);
    }
    script.output().expect("util-linux script runs")
}

#[test]
fn a_redirected_log_has_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(e2e::lockstep_bin())
        .args(["--output", "json", "demo", "--dir"])
        .arg(dir.path().join("demo"))
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains(" INFO "), "no log lines: {log}");
    assert!(
        !log.contains(ESCAPE),
        "escape codes in a piped log: {log:?}"
    );
    // The demo restores with indexes, so its restore verifies what every end shows.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = report
        .get("reports")
        .and_then(|r| r.get(0))
        .unwrap_or(&report);
    let shown = report["verification"]["shown"]
        .as_array()
        .expect("a verification");
    assert_eq!(shown.len(), 3 * 3, "{report}");
    assert!(
        shown
            .iter()
            .all(|s| s["unverifiable"].is_null() && s["shows"] == s["live"]),
        "{report}"
    );
}

#[test]
fn a_terminal_gets_colour_unless_no_color_is_set() {
    let dir = tempfile::tempdir().unwrap();
    // The control: on a terminal the log is coloured, so the check below can see colour.
    let coloured = on_a_terminal(&demo_command(&dir.path().join("a")), None);
    let shown = String::from_utf8_lossy(&coloured.stdout);
    assert!(coloured.status.success(), "{shown}");
    assert!(shown.contains(ESCAPE), "no colour on a terminal: {shown:?}");

    let plain = on_a_terminal(&demo_command(&dir.path().join("b")), Some("1"));
    let shown = String::from_utf8_lossy(&plain.stdout);
    assert!(plain.status.success(), "{shown}");
    assert!(shown.contains("INFO"), "no log lines: {shown}");
    assert!(
        !shown.contains(ESCAPE),
        "escape codes under NO_COLOR=1: {shown:?}"
    );

    // NO_COLOR present but empty does not count (no-color.org).
    let empty = on_a_terminal(&demo_command(&dir.path().join("c")), Some(""));
    assert!(String::from_utf8_lossy(&empty.stdout).contains(ESCAPE));
}
