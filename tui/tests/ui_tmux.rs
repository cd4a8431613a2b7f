//! Drives the real `tboxscope` binary in tmux over a replayed capture: switches screens, opens
//! an incident's timeline, quits, and checks the terminal is restored (alternate screen left,
//! cursor visible, canonical mode and echo back, the shell prompt usable). Also: SIGTERM
//! restores the terminal, and a failed start prints a plain message without touching it.
//! Every wait is bounded; the tmux session is killed by a Drop guard even when a check fails.
#![expect(clippy::unwrap_used)]
#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod tcp_common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tboxscope");
const PROMPT: &str = "PROMPT$";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/two-path.jsonl")
}

/// A tmux session running a plain bash; killed on drop.
struct Tmux {
    name: String,
}

impl Tmux {
    fn start(tag: &str) -> Self {
        let name = format!("tboxscope-ui-{tag}-{}", std::process::id());
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", "120", "-y", "40"])
            .args(["env", &format!("PS1={PROMPT} "), "TERM=xterm-256color"])
            .args(["bash", "--norc", "--noprofile"])
            .status()
            .expect("tmux must be installed (cargo xtask setup installs it)");
        assert!(status.success(), "tmux new-session failed");
        let tmux = Self { name };
        tmux.wait_for(|screen| screen.contains(PROMPT), "the shell prompt");
        tmux
    }

    fn send(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn type_line(&self, line: &str) {
        self.send(&["-l", line]);
        self.send(&["Enter"]);
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen with everything scrolled above it.
    fn history(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-S", "-", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn format(&self, format: &str) -> String {
        let out = Command::new("tmux")
            .args(["display", "-p", "-t", &self.name, format])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits (at most 15 s) until `check` holds for the visible screen. On a timeout the panic
    /// shows that screen, then the Overview (health: drops, counters) and the Events screen.
    fn wait_for(&self, check: impl Fn(&str) -> bool, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            if Instant::now() >= deadline {
                let mut more = String::new();
                for key in ["1", "5"] {
                    self.send(&[key]);
                    std::thread::sleep(Duration::from_millis(500));
                    more.push_str(&format!("\nscreen {key}:\n{}", self.screen()));
                }
                panic!("timed out waiting for {what}; screen:\n{screen}{more}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (at most 15 s) until the UI process has exited and the shell is in the foreground.
    fn wait_for_shell(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.format("#{pane_current_command}") != "bash" {
            assert!(
                Instant::now() < deadline,
                "the UI did not exit; screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The terminal is back to normal: main screen, cursor shown, cooked mode with echo, and
    /// the shell usable.
    fn assert_restored(&self) {
        self.wait_for_shell();
        assert_eq!(
            self.format("#{alternate_on}"),
            "0",
            "still on the alternate screen"
        );
        assert_eq!(self.format("#{cursor_flag}"), "1", "cursor still hidden");
        // The marker is computed by the shell, so only its output (not the typed line) matches.
        self.type_line(
            "echo MODE $(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' ') STTY-$((40+2))",
        );
        let screen = self.wait_for(
            |s| {
                s.lines()
                    .any(|l| l.starts_with("MODE ") && l.contains("STTY-42"))
            },
            "stty output",
        );
        let line = screen
            .lines()
            .find(|l| l.starts_with("MODE ") && l.contains("STTY-42"))
            .unwrap_or_default()
            .to_owned();
        assert!(
            line.contains(" icanon")
                && line.contains(" echo")
                && !line.contains("-icanon")
                && !line.contains("-echo "),
            "terminal left in raw mode: {line:?}\n{screen}"
        );
    }

    /// Pid of the foreground child of the pane's shell.
    fn child_pid(&self) -> Option<u32> {
        let shell = self.format("#{pane_pid}");
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

#[test]
fn replay_switch_screens_open_incident_quit_restores_terminal() {
    let tmux = Tmux::start("keys");
    tmux.type_line(&format!("{BIN} replay {} --speed 8", fixture().display()));
    tmux.wait_for(
        |s| s.contains("1 Overview") && s.contains("eth0"),
        "the Overview",
    );
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "1",
        "UI not on the alternate screen"
    );
    // Let the replay reach its end (16 s at 8x), then look at every screen.
    tmux.wait_for(|s| s.contains(" end "), "the end of the replay");
    tmux.send(&["2"]);
    tmux.wait_for(|s| s.contains("Flows ("), "the Flows screen");
    tmux.send(&["3"]);
    tmux.wait_for(|s| s.contains("TCP sockets"), "the TCP screen");
    tmux.send(&["5"]);
    tmux.wait_for(
        |s| s.contains("Events (") && s.contains("retransmit seq 1000"),
        "the Events screen",
    );
    tmux.send(&["4"]);
    tmux.wait_for(
        |s| s.contains("Incidents:") && s.contains("HOL tcp"),
        "the Incidents screen",
    );
    // Oldest last: the TCP stall; open its timeline.
    tmux.send(&["G"]);
    tmux.send(&["Enter"]);
    // The whole timeline: lost segment, the three timeout retransmissions, the release.
    tmux.wait_for(
        |s| {
            s.contains("timeline")
                && s.contains("seq 1000 sent (1448 B), lost")
                && s.contains("retransmit seq 1000 (rto, backoff 0, RTO 204ms)")
                && s.contains("retransmit seq 1000 (rto, backoff 2, RTO 816ms)")
                && s.contains("released: 12 messages")
        },
        "the incident timeline",
    );
    tmux.send(&["Escape"]);
    tmux.wait_for(|s| !s.contains("timeline"), "the timeline to close");
    tmux.send(&["?"]);
    tmux.wait_for(|s| s.contains("Keys (Esc or ? closes)"), "the help overlay");
    tmux.send(&["q"]);
    tmux.assert_restored();
}

#[test]
fn sigterm_restores_terminal() {
    let tmux = Tmux::start("term");
    tmux.type_line(&format!("{BIN} replay {} --paused", fixture().display()));
    tmux.wait_for(|s| s.contains("1 Overview"), "the Overview");
    let pid = tmux.child_pid().expect("the UI process");
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tmux.assert_restored();
}

#[test]
fn failed_start_is_a_plain_message() {
    let out = Command::new(BIN)
        .args(["replay", "/nonexistent/capture.jsonl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/capture.jsonl"),
        "{stderr}"
    );
    assert!(
        !out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b),
        "escape codes written"
    );
    // A packet capture cut inside its first record: refused before the UI starts (one cut
    // after some packets plays up to the cut, as `analyze` reads it).
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    let bytes = std::fs::read(kcp_fixture()).unwrap();
    std::fs::write(&cut, &bytes[..24 + 10]).unwrap();
    let out = Command::new(BIN).arg("replay").arg(&cut).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot replay") && stderr.contains("cut.pcap"),
        "{stderr}"
    );
    assert!(!out.stderr.contains(&0x1b), "escape codes written");
}

fn kcp_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/ndpi-kcp.pcap")
}

#[test]
fn replay_of_a_pcap_decodes_as_it_plays() {
    let tmux = Tmux::start("pcap");
    tmux.type_line(&format!(
        "{BIN} replay {} --speed 16",
        kcp_fixture().display()
    ));
    tmux.wait_for(
        |s| s.contains("1 Overview") && s.contains("replay ndpi-kcp.pcap"),
        "the Overview",
    );
    tmux.wait_for(|s| s.contains(" end "), "the end of the replay");
    tmux.send(&["2"]);
    tmux.wait_for(
        |s| s.contains("Flows (") && s.contains("conv 10"),
        "the KCP conv",
    );
    tmux.send(&["0"]);
    tmux.wait_for(|s| s.contains("▶"), "playing again from the start");
    tmux.send(&["q"]);
    tmux.assert_restored();
}

#[test]
#[ignore = "needs root"]
fn live_ui_shows_the_kernel_rto_backoff_of_a_tcp_socket_on_its_path() {
    let net = tcp_common::NetnsPair::new();
    let tmux = Tmux::start("live");
    tmux.type_line(&format!(
        "ip netns exec {} {BIN} -i {}=4G --port {}",
        net.a, net.dev_a, net.port
    ));
    tmux.wait_for(
        |s| s.contains("1 Overview") && s.contains("TCP probes: 4/4 hooks attached"),
        "the live Overview with the TCP probes attached",
    );
    let receiver = tcp_common::spawn_receiver(&net.b, net.server());
    let mut s = tcp_common::connect_from(&net.a, net.server());
    let local = s.local_addr().unwrap();
    // Not the default algorithm: the chart's label is the socket's own.
    socket2::SockRef::from(&s)
        .set_tcp_congestion(b"reno")
        .unwrap();
    std::io::Write::write_all(&mut s, &[7u8; 6000]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // A blackhole at the receiver: the timer fires at ~0.2, 0.6, 1.4 s (backoff 0, 1, 2).
    net.set_receiver_rule(&format!("tcp dport {} drop", net.port));
    std::io::Write::write_all(&mut s, b"control message during the outage!").unwrap();
    std::thread::sleep(Duration::from_millis(1700));
    net.set_receiver_rule("");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut k = [0u8; 1];
    std::io::Read::read_exact(&mut s, &mut k).unwrap();
    tmux.send(&["3"]);
    let row = format!("{local} → {}", net.server());
    let screen = tmux.wait_for(
        |s| {
            s.contains("RTO backoff ladder")
                && s.lines().any(|l| l.contains(&row) && l.contains("4G"))
                && s.contains("#0 ")
                && s.contains("#1 ")
                && s.contains("#2 ")
                && s.contains("ssthresh over time · reno")
                && s.contains("RTO ≤b")
        },
        "the socket on path 4G, its backoff ladder, its window chart labelled reno with \
         the timeouts on it",
    );
    // The ladder doubles: each rung's RTO is twice the one before.
    let rtos: Vec<&str> = screen
        .lines()
        .filter_map(|l| {
            let l = l.trim_start_matches('│');
            l.starts_with('#')
                .then(|| l.split_whitespace().nth(1))
                .flatten()
        })
        .collect();
    assert!(rtos.len() >= 3, "ladder: {rtos:?}\n{screen}");
    let ms = |t: &str| -> f64 {
        if let Some(v) = t.strip_suffix("ms") {
            v.parse().unwrap()
        } else {
            t.trim_end_matches('s').parse::<f64>().unwrap() * 1000.0
        }
    };
    for pair in rtos.windows(2) {
        let (a, b) = (ms(pair[0]), ms(pair[1]));
        assert!((b / a - 2.0).abs() < 0.05, "not doubling: {rtos:?}");
    }
    tmux.send(&["q"]);
    tmux.assert_restored();
    drop(s);
    let _ = receiver.join();
}

#[test]
fn a_closed_terminal_ends_the_ui() {
    let tmux = Tmux::start("hup");
    tmux.type_line(&format!("{BIN} replay {}", fixture().display()));
    tmux.wait_for(|s| s.contains("1 Overview"), "the Overview");
    let pid = tmux.child_pid().expect("the UI's process");
    // Killing the session closes the terminal under the running UI.
    drop(tmux);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_owned()))
            .is_some_and(|r| !r.starts_with('Z'))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let still = alive();
    if still {
        // Do not leave it spinning.
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(!still, "the UI (pid {pid}) outlived its terminal");
}

/// Removes a lab by its prefix on drop (after a failed check too).
struct LabDown(tboxscope_lab::LabNames);

impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = tboxscope_lab::down(&self.0);
    }
}

/// Processes whose command line names `prefix`.
fn processes_naming(prefix: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (name != me && cmdline.contains(prefix)).then(|| format!("{name}: {cmdline}"))
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn lab_run_tui_watches_the_run_live_and_q_tears_the_lab_down() {
    let names = tboxscope_lab::LabNames::for_test("tui").unwrap();
    let prefix = names.prefix().to_owned();
    let _lab = LabDown(names);
    let tmux = Tmux::start("lab");
    tmux.type_line(&format!(
        "{BIN} lab --prefix {prefix} run S2 --duration 8s --tui; echo LAB-EXIT-$((40+2))-$?"
    ));
    // The lab's paths (both ends of each), and messages decoded as they arrive: the redundant
    // transports' copies matched across the two paths.
    tmux.wait_for(
        |s| {
            s.contains("1 Overview")
                && s.contains("lab S2: tbox eth0=4G eth1=5G")
                && s.contains("tbox-eth0 (gateway-g0)")
                && s.contains("tbox-eth1 (gateway-g1)")
                && s.contains("kcp :7201")
                && s.contains("quic :7401")
                && s.contains(" msgs")
        },
        "the lab's paths and messages on the Overview",
    );
    // The TCP baseline's socket from the eBPF probes, on path A.
    tmux.send(&["3"]);
    tmux.wait_for(
        |s| {
            s.lines()
                .any(|l| l.contains("→ 10.40.0.1:7001") && l.contains("tbox-eth"))
        },
        "the TCP baseline's socket",
    );
    tmux.send(&["q"]);
    // The run stops early, is captured and torn down, and prints the comparison table.
    let screen = tmux.wait_for(|s| s.contains("LAB-EXIT-42-"), "the end of the run");
    assert!(screen.contains("LAB-EXIT-42-0"), "{screen}");
    // (The tables and the advice after them scroll past one screen.)
    let all = tmux.history();
    assert!(
        all.contains("run ended early")
            && all.contains("kernel (eBPF)")
            && all.contains("advice: "),
        "{all}"
    );
    tmux.assert_restored();
    let left = tboxscope_lab::names::existing_namespaces(&prefix).unwrap();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let procs = processes_naming(&prefix);
    assert!(procs.is_empty(), "processes left behind: {procs:?}");
}
