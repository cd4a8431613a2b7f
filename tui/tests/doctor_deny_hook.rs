//! A refused hook degrades only its feature, in `doctor` and in `capture` (as root).
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use tcp_common::*;

#[test]
#[ignore = "needs root"]
fn doctor_reports_every_hook_and_a_denied_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["doctor", "-i", "lo", "--json", "--deny-hook", "tcp_probe"])
        .output()
        .unwrap();
    assert!(out.status.success(), "doctor exit {:?}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["live_mode"], true);
    assert_eq!(r["btf"]["ok"], true);
    let hooks = r["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 4);
    for h in hooks {
        let want = if h["name"] == "tcp_probe" {
            "denied"
        } else {
            "attached"
        };
        assert_eq!(h["status"], want, "{h}");
    }
    let degraded: Vec<String> = r["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    assert!(degraded.iter().any(|d| d.contains("cwnd")), "{degraded:?}");
    // Hook types are called available only after a real attach; kprobes need the kernel's
    // kprobe PMU or kprobe_events, so without both doctor must not claim them.
    let types = r["program_types"].as_array().unwrap();
    for t in types {
        if t["available"] == true {
            assert_eq!(t["attached"], true, "{t}");
        }
    }
    let kprobe = types.iter().find(|t| t["hook"] == "kprobe").unwrap();
    let kprobes_in_kernel = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
        || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || std::path::Path::new("/sys/kernel/debug/tracing/kprobe_events").exists();
    if !kprobes_in_kernel {
        assert_eq!(kprobe["available"], false, "{kprobe}");
    }
    let raw = types
        .iter()
        .find(|t| t["hook"] == "raw_tracepoint")
        .unwrap();
    assert_eq!(raw["available"], true, "{raw}");
    assert!(r["privileges"]["missing"].as_array().unwrap().is_empty());
    // Plain report too.
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["doctor", "-i", "lo"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("live mode: can run"), "{text}");
    assert!(text.contains("kprobe"), "{text}");
}

#[test]
fn doctor_rejects_unknown_hook_names() {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["doctor", "--deny-hook", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown hook"));
}

#[test]
#[ignore = "needs root"]
fn tcp_capture_with_a_denied_hook_keeps_the_other_features() {
    let net = NetnsPair::new();
    let port = net.port.to_string();
    let cap = Capture::start("deny", &["--port", &port, "--deny-hook", "tcp_probe"]);
    net.set_receiver_rule(&format!(
        "tcp dport {} numgen random mod 1000 < 30 drop",
        net.port
    ));
    let receiver = spawn_receiver(&net.b, net.server());
    let mut s = connect_from(&net.a, net.server());
    let local = s.local_addr().unwrap().to_string();
    let chunk = vec![1u8; 64 * 1024];
    for _ in 0..128 {
        s.write_all(&chunk).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    receiver.join().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let all = cap.stop();
    let header = &all[0];
    let hooks = header["hooks"].as_array().unwrap();
    let state = |n: &str| {
        hooks.iter().find(|h| h["name"] == n).unwrap()["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(state("tcp_probe"), "denied");
    assert_eq!(state("tcp_retransmit_skb"), "attached");
    assert!(records(&all, "tcp_cwnd", &local).is_empty());
    assert!(!records(&all, "tcp_retransmit", &local).is_empty());
    assert!(!records(&all, "tcp_state", &local).is_empty());
    assert_eq!(all.last().unwrap()["type"], "summary");
}
