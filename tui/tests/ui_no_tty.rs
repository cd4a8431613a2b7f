//! The terminal UI refuses to start when standard output is not a terminal, instead of
//! writing escape codes into a pipe or a file, and says which commands write text.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn replay_into_a_pipe_is_refused_with_the_text_commands() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/two-path.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("replay")
        .arg(&fixture)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard output is not"), "{err}");
    assert!(
        err.contains("capture --json") && err.contains("analyze"),
        "{err}"
    );
}

#[test]
fn live_ui_into_a_pipe_is_refused_before_any_interface_or_probe() {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["-i", "lo"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard output is not"), "{err}");
}

/// The live UI takes `analyze`'s message identity (`--app-id`, `--framing`), checked as
/// `analyze` checks them, before it looks for a terminal.
#[test]
fn live_ui_takes_the_message_identity_of_analyze() {
    let live = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .args(args)
            .args(["-i", "lo"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = live(&["--app-id", "8:8:le", "--framing", "len:u16be@0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard output is not"), "{err}");
    let out = live(&["--framing", "lines"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected fixed:N, len:u16be@K"), "{err}");
}
