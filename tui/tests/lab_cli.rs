#![expect(clippy::unwrap_used)]
//! `tboxscope lab up|status|outage|down` end to end with detached delay-line processes, and
//! `down` cleaning up after a crash. Needs root (network namespaces).
use std::process::Command;

fn tboxscope(prefix: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("lab")
        .args(["--prefix", prefix])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn namespaces(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

fn pids_in(ns: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Tears the lab down even when an assertion fails.
struct Guard(String);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = tboxscope(&self.0, &["down"]);
    }
}

#[test]
fn up_status_outage_down_with_detached_delay_lines() {
    let prefix = format!("tbxcli{}-", std::process::id());
    let _guard = Guard(prefix.clone());
    let (rc, out) = tboxscope(&prefix, &["up", "--scenario", "S4", "--delay", "line"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(namespaces(&prefix).len(), 4, "{out}");
    // One delay-line process per path, living in its path namespace.
    let line_a = format!("{prefix}patha");
    let pids = pids_in(&line_a);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // Up again: idempotent (rebuilt, the old delay lines are gone).
    let (rc, out) = tboxscope(&prefix, &["up", "--scenario", "S1", "--delay", "line"]);
    assert_eq!(rc, 0, "{out}");
    assert!(!tboxscope_lab::testbed::process_alive(
        pids[0].parse().unwrap()
    ));
    assert_eq!(pids_in(&line_a).len(), 1);
    // Traffic crosses the detached delay line with the scenario's delay (S1: A 40±8 ms).
    let names = tboxscope_lab::LabNames::new(&prefix).unwrap();
    let r = tboxscope_lab::probe::probe_path(
        &names,
        tboxscope_lab::PathId::A,
        tboxscope_lab::probe::Direction::Up,
        100,
        200,
        100,
        std::time::Duration::from_millis(300),
    )
    .unwrap();
    let s = tboxscope_lab::probe::DelaySummary::of(&r.delays_ns);
    assert!(s.n >= 90 && (s.mean_ms - 40.0).abs() < 5.0, "{s:?}");
    let (rc, out) = tboxscope(&prefix, &["outage", "a", "on"]);
    assert_eq!(rc, 0, "{out}");
    let (rc, out) = tboxscope(&prefix, &["status"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("outage: ON") && out.contains("delay line (pid"),
        "{out}"
    );
    let line_pids: Vec<String> = ["patha", "pathb"]
        .iter()
        .flat_map(|p| pids_in(&format!("{prefix}{p}")))
        .collect();
    assert_eq!(line_pids.len(), 2);
    let (rc, out) = tboxscope(&prefix, &["down"]);
    assert_eq!(rc, 0, "{out}");
    assert!(namespaces(&prefix).is_empty());
    for pid in line_pids {
        assert!(
            !tboxscope_lab::testbed::process_alive(pid.parse().unwrap()),
            "delay line {pid} left"
        );
    }
    let (rc, _) = tboxscope(&prefix, &["status"]);
    assert_eq!(rc, 3);
}

#[test]
fn down_removes_the_leftovers_of_a_crashed_run() {
    let prefix = format!("tbxcrash{}-", std::process::id());
    let _guard = Guard(prefix.clone());
    // What a killed `lab run` leaves: namespaces with our prefix, a process inside one.
    let ns = format!("{prefix}tbox");
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    assert!(Command::new("ip")
        .args(["netns", "add", &format!("{prefix}gateway")])
        .status()
        .unwrap()
        .success());
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns, "sleep", "60"])
        .spawn()
        .unwrap();
    let pid = child.id();
    for _ in 0..100 {
        if !pids_in(&ns).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (rc, out) = tboxscope(&prefix, &["down"]);
    assert_eq!(rc, 0, "{out}");
    assert!(namespaces(&prefix).is_empty());
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the process in the namespace was ended ({pid})"
    );
}
