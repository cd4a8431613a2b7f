//! `tboxscope replay` of a `capture --json` recording: the records are written as `capture`
//! writes them (the kernel observations through the capture's connection table and JSON Lines
//! writer), and every one of them must come back in the replayed view: the congestion-state
//! changes, the retransmission and the socket's last state (its congestion-control algorithm
//! too), and the kernel's drop counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use probe_user::capture::records::DropsRecord;
use probe_user::capture::tracker::Tracker;
use probe_user::output::JsonLinesWriter;
use probe_user::source::ebpf::event::{TcpEventKind, TcpObservation, TcpSnapshot, TCP_CLOSE};
use probe_user::source::ebpf::{KernelDrops, RetransmitKind, SkippedByKernel};
use tboxscope::replay::{load, PlayOptions, Player};
use tboxscope_engine::input::CongState;

/// 2026-11-30T01:00:00Z.
const BASE: u64 = 1_796_000_400_000_000_000;
const MS: u64 = 1_000_000;
const OPEN: u8 = 0;
const LOSS: u8 = 4;
const ESTABLISHED: u8 = 1;

fn observation(ms: u64, kind: TcpEventKind, ca_state: u8, backoff: u8) -> TcpObservation {
    TcpObservation {
        mono_ns: ms * MS,
        sock_id: 7,
        src: "10.0.0.2:40000".parse().unwrap(),
        dst: "198.51.100.1:443".parse().unwrap(),
        kind,
        snap: TcpSnapshot {
            rto_jiffies: 51,
            backoff,
            retransmits: backoff,
            ca_state,
            pending: 0,
            state: ESTABLISHED,
            total_retrans: u32::from(backoff),
            cwnd: 10,
            ssthresh: 7,
            srtt_us: 50_000,
            packets_out: 2,
            lost_out: 1,
            retrans_out: 0,
            congestion_control: "bbr".parse().ok(),
            valid: true,
        },
    }
}

#[test]
fn congestion_states_and_socket_states_of_a_capture_are_replayed() {
    let observations = [
        observation(0, TcpEventKind::Cwnd, OPEN, 0),
        observation(100, TcpEventKind::CongState { new: LOSS }, OPEN, 0),
        observation(
            100,
            TcpEventKind::Retransmit {
                kind: RetransmitKind::Rto,
                segs: Some(1),
                err: 0,
                seq: Some(1000),
                len: Some(1448),
            },
            LOSS,
            0,
        ),
        observation(400, TcpEventKind::CongState { new: OPEN }, LOSS, 1),
        observation(900, TcpEventKind::SockState { new: TCP_CLOSE }, OPEN, 0),
    ];
    let mut tracker = Tracker::new(Some(250), 16, 16);
    let mut writer = JsonLinesWriter::new(Vec::new(), BASE, &serde_json::json!({})).unwrap();
    let mut types = Vec::new();
    for o in &observations {
        for r in tracker.handle(o) {
            types.push(r.type_name());
            writer.write(r.type_name(), BASE + o.mono_ns, &r).unwrap();
        }
    }
    assert_eq!(
        types,
        [
            "tcp_cwnd",
            "tcp_cong_state",
            "tcp_retransmit",
            "tcp_rto",
            "tcp_cong_state",
            "tcp_backoff_end",
            "tcp_state"
        ]
    );
    let drops = DropsRecord {
        kernel: KernelDrops {
            ring_full: 2,
            read_failed: 1,
            skipped_by_kernel: SkippedByKernel {
                retransmit: 1,
                ..SkippedByKernel::default()
            },
        },
        decode_rejected: 4,
        evicted: 0,
        unrecorded_retrans: 2,
        unrecorded_cong_changes: 1,
    };
    writer.write("drops", BASE + 950 * MS, &drops).unwrap();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&writer.into_inner().unwrap()).unwrap();

    let recording = load(file.path()).unwrap();
    assert_eq!(recording.skipped_text(), "none", "every record replayed");
    assert_eq!(
        recording.items.len(),
        types.len() + 1,
        "the TCP records and drops"
    );
    let end = recording.end_ns();
    let mut player = Player::new(
        recording,
        PlayOptions {
            paused: true,
            ..PlayOptions::default()
        },
    );
    player.seek_to(end);
    let snap = player.snapshot();
    assert_eq!(snap.flows.tcp.len(), 1);
    let socket = &snap.flows.tcp[0];
    let states: Vec<CongState> = socket.cong_changes.iter().map(|(_, s)| *s).collect();
    assert_eq!(states, [CongState::Loss, CongState::Open]);
    assert_eq!(socket.cong_state, CongState::Open);
    assert_eq!(socket.state, "CLOSE");
    assert_eq!(socket.retransmissions.len(), 1);
    assert_eq!(socket.retransmissions[0].rto_us, 204_000);
    assert_eq!(socket.figures.retransmits, 0, "total at the close");
    assert_eq!(
        socket.figures.congestion_control.map(|c| c.to_string()),
        Some("bbr".to_owned()),
        "the algorithm kept through the recording"
    );
    assert_eq!(
        snap.health.ring_buffer_dropped, 3,
        "ring full and failed reads"
    );
    assert_eq!(snap.health.tcp_events_dropped, 4, "refused by the decoder");
    assert_eq!(
        snap.health.tcp_hook_runs_skipped, 1,
        "skipped by the kernel"
    );
    assert_eq!(
        snap.health.tcp_retrans_unrecorded, 2,
        "counted with no record"
    );
    assert!(
        snap.health.inferences.iter().any(|l| l
            .contains("1 hook runs skipped by the kernel (retransmit 1)")
            && l.contains("2 retransmitted segments counted by the kernel have no record")
            && l.contains("1 congestion-state changes seen only in a later sample")),
        "{:?}",
        snap.health.inferences
    );
}
