//! `tboxscope analyze` of four captures (`four_captures`: both ends of both paths, the gateway's
//! clock 300 ms ahead): what tboxscope infers by itself (pairs, hosts, the clock offset, the
//! matching mode), and what flags state instead (`--pair`, `--host`, `--clock-offset`,
//! `--match`).
#![expect(clippy::unwrap_used)]

mod four_captures;

use std::path::PathBuf;
use std::process::{Command, Output};

use four_captures::{write_captures, DELAY_MS, MESSAGES};
use serde_json::Value;

fn analyze(files: &[PathBuf], flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(flags)
        .args(["--json", "-"])
        .args(files)
        .output()
        .unwrap()
}

fn summary(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "summary")
        .unwrap()
}

/// Each path's exact largest one-way latency (µs), by label.
fn max_latency_us(s: &Value) -> Vec<(String, u64)> {
    s["latency"]["per_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_owned(),
                p[1]["max_us"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn inferences(s: &Value) -> Vec<String> {
    s["health"]["inferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn inferred_by_itself_or_stated_by_flags() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_captures(dir.path());
    let one_way = |extra_ms: u64| {
        vec![
            ("t-eth0".to_owned(), (DELAY_MS[0] + extra_ms) * 1000),
            ("t-eth1".to_owned(), (DELAY_MS[1] + extra_ms) * 1000),
        ]
    };

    // By itself: both pairs, the T-Box ends, the gateway's clock 300 ms ahead, exact latency.
    let s = summary(&analyze(&files, &[]));
    let said = inferences(&s);
    for (t, g) in [("t-eth0", "gw-g0"), ("t-eth1", "gw-g1")] {
        let pair = format!("captures `{t}` and `{g}` show the same path at its two ends (same copies with the same addresses); `{t}` is on the T-Box (it saw client-to-server copies first)");
        assert!(said.contains(&pair), "{said:#?}");
        let offset = format!("clock offset of `{g}` estimated from copies in both directions: -300.000 ms (updated as traffic flows)");
        assert!(said.contains(&offset), "{said:#?}");
    }
    assert_eq!(max_latency_us(&s), one_way(0));
    let red = &s["redundancy"][0];
    assert_eq!(
        (red["mode"].as_str(), red["mode_forced"].as_bool()),
        (Some("kcp_sn"), Some(false))
    );
    assert_eq!(red["on_all_paths"], MESSAGES);

    // Stated: the pairs and hosts as given, and a clock offset 10 ms short of the truth, which
    // the latencies show exactly (the estimate would have corrected it).
    let s = summary(&analyze(
        &files,
        &[
            "--pair",
            "t-eth0=gw-g0",
            "--pair",
            "gw-g1=t-eth1",
            "--host",
            "t-eth1=tbox",
            "--clock-offset",
            "gw-g0=-290",
            "--clock-offset",
            "gw-g1=-290.0",
            "--match",
            "conv:7=kcp-sn",
        ],
    ));
    let said = inferences(&s);
    for line in [
        "clock offset of `gw-g0` given: -290.000 ms",
        "clock offset of `gw-g1` given: -290.000 ms",
        "captures `t-eth0` and `gw-g0` show the same path at its two ends (stated); `t-eth0` is on the T-Box (it saw client-to-server copies first)",
        "captures `t-eth1` and `gw-g1` show the same path at its two ends (stated); `t-eth1` is on the T-Box",
    ] {
        assert!(said.iter().any(|l| l == line), "{line}\n{said:#?}");
    }
    assert!(!said.iter().any(|l| l.contains("estimated")), "{said:#?}");
    assert_eq!(max_latency_us(&s), one_way(10));
    let red = &s["redundancy"][0];
    assert_eq!(red["mode_forced"], true);
    assert_eq!(red["on_all_paths"], MESSAGES);

    // A statement about a capture no file has fails the run, naming the label.
    let out = analyze(&files, &["--host", "t-eth2=tbox"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no capture is labelled t-eth2"), "{err}");
    // And a malformed one is refused before anything runs.
    let out = analyze(&files, &["--match", "port:x=content"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("selector must be port:N, conv:N or conn:LABEL"),
        "{err}"
    );
}
