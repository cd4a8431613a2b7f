//! `capture` refuses bad input clearly, before attaching anything.
#![expect(clippy::unwrap_used)] // test helpers outside #[test] fns
use std::process::Command;

fn capture(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("capture")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tcp_capture_bad_host_filter() {
    let (ok, err) = capture(&[
        "--json",
        "-",
        "--host",
        "not-an-address",
        "--duration",
        "1s",
    ]);
    assert!(!ok);
    assert!(
        err.contains("not-an-address") && err.contains("IPv4 or IPv6"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn tcp_capture_unwritable_output() {
    let (ok, err) = capture(&["--json", "/nonexistent-dir/x.jsonl", "--duration", "1s"]);
    assert!(!ok);
    assert!(err.contains("cannot write the JSON output"), "{err}");
}

#[test]
fn tcp_capture_bad_duration_and_port() {
    let (ok, err) = capture(&["--json", "-", "--duration", "5 parsecs"]);
    assert!(!ok && err.contains("duration"), "{err}");
    let (ok, err) = capture(&["--json", "-", "--port", "0"]);
    assert!(!ok && err.contains("--port 0"), "{err}");
}

#[test]
#[ignore = "needs root"]
fn tcp_capture_to_stdout_ends_with_summary() {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args([
            "capture",
            "--json",
            "-",
            "--duration",
            "300ms",
            "--port",
            "9",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "header");
    assert_eq!(lines[0]["schema"], "tboxscope/1");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "summary");
    assert_eq!(last["stopped_by"], "duration");
    assert!(lines.iter().any(|l| l["type"] == "drops"));
}
