//! Stateful engine fuzz target: an arbitrary sequence of observations (capture points, path
//! names, datagrams, KCP segments, QUIC packets, TCP segments, path MTU signals and kernel
//! events, overhead) and
//! engine calls (tick, snapshot, drain, reset of the windows) fed to one engine with small
//! bounds, then finished and its summary rendered. Values come from small sets (two server ports, a few
//! convs, connections, sns, paths and captures) so that copies, retransmissions, pairing and
//! evictions meet; time mostly moves forward and sometimes back.
//! Run: `cargo +nightly fuzz run engine -- -max_total_time=60`.
#![no_main]

use std::net::SocketAddr;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tboxscope_engine::{
    CapturePoint, Config, CongState, CongestionControl, ConnId, Datagram, Engine, FlowSelector,
    Host, KcpCmd, KcpHeader, KcpSegment, MatchMode, ModeOverride, Observation, Overhead,
    OverheadKind, PacketMeta, PathId, PathMtuSignal, PathName, QuicAck, QuicPacket, RetransmitKind, StreamRange,
    TcpEvent, TcpEventKind, TcpFigures, TcpFlags, TcpOptions, TcpSegment,
};

const T0: u64 = 1_796_000_000_000_000_000;
const PATHS: [&str; 3] = ["eth0", "eth1", "g0"];
const CLIENTS: [&str; 3] = ["10.0.0.2:40000", "10.1.0.2:40001", "10.0.0.2:40002"];
const SERVERS: [&str; 2] = ["192.0.2.1:4000", "192.0.2.1:443"];
/// Path ids packets carry: the first ones named [`PATHS`] at the start, the last never named
/// unless the fuzzer names it.
const PATH_IDS: u16 = 4;
/// QUIC connections packets belong to.
const CONNS: u64 = 3;

/// What the fuzzer picks from, made once per run.
struct World {
    clients: Vec<SocketAddr>,
    servers: Vec<SocketAddr>,
}

impl World {
    fn new() -> Self {
        let addrs = |v: &[&str]| v.iter().filter_map(|s| s.parse().ok()).collect();
        World {
            clients: addrs(&CLIENTS),
            servers: addrs(&SERVERS),
        }
    }

    /// The facts of a packet at `ts`: its path, capture, direction and size.
    fn meta(&self, u: &mut Unstructured, ts: u64) -> Result<PacketMeta> {
        let client = *u.choose(&self.clients)?;
        let server = *u.choose(&self.servers)?;
        let (src, dst) = if u.arbitrary()? {
            (client, server)
        } else {
            (server, client)
        };
        Ok(PacketMeta {
            ts_ns: ts,
            path: PathId(u.int_in_range(0..=PATH_IDS - 1)?),
            capture: u.int_in_range(0..=3)?,
            src,
            dst,
            wire_len: u.int_in_range(0..=1500)?,
            ttl: u.arbitrary()?,
        })
    }
}

/// A small engine configuration, so that every bound is reached.
fn config(u: &mut Unstructured) -> Result<Config> {
    let mut mode_overrides = Vec::new();
    if u.ratio(1, 4)? {
        mode_overrides.push(ModeOverride {
            selector: FlowSelector {
                port: Some(*u.choose(&[4000, 443])?),
                conv: None,
                conn: None,
            },
            mode: *u.choose(&MatchMode::ALL)?,
        });
    }
    Ok(Config {
        outage_threshold_ns: u.int_in_range(1..=2_000)? * 1_000_000,
        message_timeout_ns: u.int_in_range(1..=5_000)? * 1_000_000,
        window_ns: u.int_in_range(0..=1_000)? * 1_000_000,
        window_history: u.int_in_range(0..=8)?,
        max_flows: u.int_in_range(1..=8)?,
        max_open_messages: u.int_in_range(1..=64)?,
        max_unacked_per_flow: u.int_in_range(1..=32)?,
        max_incidents: u.int_in_range(1..=8)?,
        max_events: u.int_in_range(0..=8)?,
        max_pending_records: u.int_in_range(0..=64)?,
        emit_messages: u.arbitrary()?,
        await_pairing: u.arbitrary()?,
        mode_overrides,
        ..Config::default()
    })
}

/// One observation at `ts`, of a kind picked by the fuzzer.
fn observation(u: &mut Unstructured, w: &World, ts: u64) -> Result<Observation> {
    let small = |u: &mut Unstructured, max: u32| u.int_in_range(0..=max);
    let id = |u: &mut Unstructured| -> Result<Option<u64>> {
        Ok(if u.arbitrary()? {
            Some(u.int_in_range(0..=7)?)
        } else {
            None
        })
    };
    Ok(match u.int_in_range(0..=8)? {
        0 => Observation::Capture(CapturePoint {
            ts_ns: ts,
            capture: u.int_in_range(0..=3)?,
            name: format!("cap{}", small(u, 3)?),
            path: u.choose(&PATHS)?.to_string(),
            host: *u.choose(&[Host::Tbox, Host::Gateway, Host::Unknown])?,
            local_addrs: Vec::new(),
            clock_offset_ns: if u.arbitrary()? {
                Some(u.int_in_range(-50_000_000..=50_000_000)?)
            } else {
                None
            },
            pair_with: if u.ratio(1, 4)? {
                Some(u.int_in_range(0..=3)?)
            } else {
                None
            },
        }),
        1 => Observation::Datagram(Datagram {
            meta: w.meta(u, ts)?,
            payload_hash: u64::from(small(u, 15)?),
            payload_len: small(u, 1400)?,
            app_msg_id: id(u)?,
        }),
        2 | 3 => Observation::Kcp(KcpSegment {
            meta: w.meta(u, ts)?,
            header: KcpHeader {
                conv: small(u, 3)?,
                cmd: *u.choose(&[KcpCmd::Push, KcpCmd::Ack, KcpCmd::Wask, KcpCmd::Wins])?,
                sn: small(u, 40)?,
                una: small(u, 40)?,
                frg: u.int_in_range(0..=2)?,
                wnd: u.arbitrary()?,
                len: small(u, 1400)?,
                ts: small(u, 5_000)?,
            },
            app_msg_id: id(u)?,
            content_hash: id(u)?,
        }),
        4 => {
            let streams = list_of(u, 3, |u| {
                Ok(StreamRange {
                    stream_id: u64::from(small(u, 3)?) * 4,
                    offset: u64::from(small(u, 20)?) * 100,
                    len: u64::from(small(u, 400)?),
                    fin: u.arbitrary()?,
                    data_hash: id(u)?,
                    app_msg_id: id(u)?,
                    framed: None,
                })
            })?;
            let acks = list_of(u, 2, |u| {
                let lo = u64::from(small(u, 30)?);
                let hi = u64::from(small(u, 30)?);
                Ok(QuicAck {
                    path_id: u64::from(small(u, 1)?),
                    ranges: [(lo, hi)].into_iter().collect(),
                    ack_delay_us: u64::from(small(u, 30_000)?),
                })
            })?;
            QuicPacket {
                meta: w.meta(u, ts)?,
                conn: ConnId(u.int_in_range(0..=CONNS - 1)?),
                path_id: u64::from(small(u, 1)?),
                pn: u64::from(small(u, 30)?),
                streams: streams.into_iter().collect(),
                acks: acks.into_iter().collect(),
                ack_only: u.arbitrary()?,
            }
            .into()
        }
        5 => Observation::TcpSegment(TcpSegment {
            meta: w.meta(u, ts)?,
            seq: small(u, 20)? * 500,
            ack: small(u, 20)? * 500,
            flags: TcpFlags(u.arbitrary()?),
            window: u.arbitrary()?,
            len: *u.choose(&[0, 500, 1000])?,
            options: {
                let mut o = TcpOptions::default();
                if u.arbitrary()? {
                    o.timestamps = Some((small(u, 20)?, small(u, 20)?));
                }
                o.sack_count = u.int_in_range(0..=2)?;
                for b in &mut o.sack {
                    *b = (small(u, 20)? * 500, small(u, 20)? * 500);
                }
                o
            },
            // Messages the framing would cut from the stream: ranges on the same grid.
            messages: (0..u.int_in_range(0..=2)?)
                .map(|_| Ok((small(u, 20)? * 500, small(u, 20)? * 500)))
                .collect::<arbitrary::Result<_>>()?,
        }),
        6 => {
            let kind = match u.int_in_range(0..=5)? {
                0 => TcpEventKind::Retransmit {
                    kind: *u.choose(&[
                        RetransmitKind::Fast,
                        RetransmitKind::Rto,
                        RetransmitKind::Tlp,
                        RetransmitKind::LossRecovery,
                        RetransmitKind::Unknown,
                    ])?,
                    seq: small(u, 20)? * 500,
                    len: 500,
                },
                1 => TcpEventKind::RtoExpired,
                2 => TcpEventKind::CongState {
                    state: *u.choose(&[
                        CongState::Open,
                        CongState::Disorder,
                        CongState::Cwr,
                        CongState::Recovery,
                        CongState::Loss,
                    ])?,
                },
                3 => TcpEventKind::StateChange {
                    old: "ESTABLISHED".to_owned(),
                    new: "CLOSE".to_owned(),
                },
                4 => TcpEventKind::BackoffEnd,
                _ => TcpEventKind::Sample,
            };
            let meta = w.meta(u, ts)?;
            Observation::Tcp(TcpEvent {
                ts_ns: ts,
                path: u.choose(&PATHS)?.to_string(),
                local: meta.src,
                remote: meta.dst,
                kind,
                figures: TcpFigures {
                    congestion_control: CongestionControl::new(u.choose(&[
                        &b"cubic"[..],
                        b"bbr",
                        b"reno",
                        b"",
                    ])?),
                    cwnd: small(u, 100)?,
                    ssthresh: small(u, 100)?,
                    srtt_us: small(u, 500_000)?,
                    rto_us: small(u, 3_000_000)?,
                    backoff: u.int_in_range(0..=6)?,
                    retransmits: small(u, 10)?,
                },
            })
        }
        8 => {
            // A router's "too big" about a segment on the TCP grid, to either end.
            let quoted = w.meta(u, ts)?;
            Observation::PathMtu(PathMtuSignal {
                meta: w.meta(u, ts)?,
                mtu: *u.choose(&[0, 576, 1200, 1500])?,
                segment_src: quoted.src,
                segment_dst: quoted.dst,
                seq: small(u, 20)? * 500,
            })
        }
        _ => Observation::Overhead(Overhead {
            meta: w.meta(u, ts)?,
            kind: *u.choose(&[OverheadKind::FecParity, OverheadKind::Other])?,
        }),
    })
}

/// Up to `max` items made by `item`.
fn list_of<T>(
    u: &mut Unstructured,
    max: usize,
    mut item: impl FnMut(&mut Unstructured) -> Result<T>,
) -> Result<Vec<T>> {
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| item(u)).collect()
}

/// Feeds the engine what `data` says, then finishes it.
fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let cfg = config(&mut u)?;
    let max_pending = cfg.max_pending_records.max(1);
    let mut engine = Engine::new(cfg);
    for (i, label) in (0..).zip(PATHS) {
        engine.handle(Observation::PathName(PathName {
            ts_ns: T0,
            id: PathId(i),
            label: label.to_owned(),
        }));
    }
    let world = World::new();
    let mut ts = T0;
    while !u.is_empty() {
        // Mostly forward (up to 2 s), sometimes back (up to 100 ms).
        if u.ratio(1, 16)? {
            ts = ts.saturating_sub(u.int_in_range(0..=100)? * 1_000_000);
        } else {
            ts = ts.saturating_add(u.int_in_range(0..=2_000_000)? * 1_000);
        }
        match u.int_in_range(0..=15)? {
            0 => engine.tick(ts),
            1 => {
                let snap = engine.snapshot();
                assert!(snap.ts_ns == engine.now_ns());
            }
            2 => {
                let drained = engine.drain_records().count();
                assert!(drained <= max_pending, "{drained} records pending");
            }
            3 => engine.reset_windows(),
            4 => engine.handle(Observation::PathName(PathName {
                ts_ns: ts,
                id: PathId(u.int_in_range(0..=PATH_IDS - 1)?),
                label: u.choose(&PATHS)?.to_string(),
            })),
            _ => engine.handle(observation(&mut u, &world, ts)?),
        }
    }
    let _ = engine.snapshot();
    let summary = engine.finish(ts);
    let _ = engine.drain_records().count();
    let _ = tboxscope_engine::report::render(&summary);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
