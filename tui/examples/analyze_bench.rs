//! Throughput benchmark for `tboxscope analyze` and for live capture, with baselines measured in
//! the same run. Not a test: it prints the figures of BENCHMARKS.md's capture-decode, engine and
//! live-capture sections.
//!
//! ```text
//! cargo build --release -p tboxscope --example analyze_bench
//! target/release/examples/analyze_bench offline [--packets N] [--tboxscope target/release/tboxscope]
//! target/release/examples/analyze_bench offline-quic [--packets N] [--capture PATH]
//! target/release/examples/analyze_bench offline-tcp [--packets N] [--segment-bytes B (1448)] [--capture PATH]
//! target/release/examples/analyze_bench engine [--rounds R (5)] [--dir D]
//! target/release/examples/analyze_bench live [--seconds S] [--rate PPS_PER_PATH] [--compare] [--stop-early]   (root)
//! ```
//!
//! `offline` writes a KCP capture of N packets (default 1,050,000; Ethernet/IPv4/UDP, raw ikcp
//! PUSH segments of 512–1376 bytes and ACK datagrams) to a temporary directory, then times on
//! the same file: the analyze decode in this process, the `tboxscope analyze` binary (wall time
//! and peak RSS from `/usr/bin/time -v`), `tshark -T fields` with three fields, `tcpdump -nn -r`,
//! and a plain read of the file.
//!
//! `live` creates two veth pairs in network namespaces, sends UDP on both at the given rate for
//! S seconds, captures both interfaces with [`LiveCapture`] (default settings; with `--compare`
//! first with the previous ones: immediate mode, 16 MiB, one packet per event) and reports
//! packets captured and libpcap's drop counters (`ps_drop`, `ps_ifdrop`), and the packets libpcap
//! received but never delivered. `--stop-early` stops the capture half-way, traffic still flowing.
//!
//! `engine` writes both captures and measures, on each, the engine's cost on top of decoding
//! in the same run (the goal in BENCHMARKS.md: ≤ 30 %): decode alone, decode + engine on one
//! thread, and with the engine on its own thread as `tboxscope analyze` runs it (`cargo xtask
//! bench` runs it), with the parts of the last: decoding and building observations, and the
//! engine alone. Every round runs each configuration once, and each is reported by its best and
//! its median round.
//!
//! `offline-quic` writes a QUIC capture of N packets (default 1,000,000) with its key log and
//! times the in-process decode with 1-RTT decryption, the binary with `--keylog`, and
//! `tshark -o tls.keylog_file:` on the same file.
//!
//! `offline-tcp` writes a TCP capture of N frames (default 1,000,000: 16 connections as the
//! sender's capture shows them, data segments of B payload bytes — 1448 for bulk transfer, a
//! few hundred for a control channel's messages — 1 % of them lost and repaired by fast
//! retransmit, tail loss probe or RTO, some timing out twice) and times on it: a plain read of
//! the file (the floor of any reader), the in-process decode alone, decode + the wire TCP
//! matcher as `analyze` runs it, the `tboxscope analyze` binary, and tshark's TCP analysis
//! (`-z expert`, and the retransmission fields), each side's retransmissions counted against
//! the generator's truth. The binary and `-z expert` run in three rounds (tshark once, then the
//! binary three times), timed without a wrapper, and are compared by medians and by bests.
//! `write-kcp`/`write-quic`/`write-tcp PATH` only write the captures and `decode FILE [--keylog
//! K]` only decodes (for `perf record`); `decode FILE --engine [--rounds R]` measures the
//! correlation engine on top of decoding in the same run (the ≤ 30 % goal), `decode FILE
//! --engine-only [--messages]` runs decode + engine alone (for `perf record`), `decode FILE
//! --engine-alone` times the engine alone on the file's observations decoded beforehand, `decode
//! FILE --own-thread` runs decode + engine on its own thread alone, `decode FILE --observations`
//! decodes and builds the observations only, and `decode FILE --reader` runs the file reader alone
//! (the decoding thread's floor).
#![expect(clippy::unwrap_used)]

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use probe_user::analyze::Analyzer;
use probe_user::correlate::{Correlator, FrameFeed, ObservationSink};
use probe_user::dissect::{DissectConfig, DissectStats};
use probe_user::engine::{Config as EngineConfig, Engine, Observation};
use probe_user::pipeline::{decode_and_match, Waits};
use probe_user::source::pcap::{
    CaptureFile, FileReading, InterfaceSpec, LiveCapture, LiveConfig, LiveEvent,
};
use tboxscope_decode::quic::Keylog;
use tboxscope_test_support::netns;
use tboxscope_test_support::pcap::PcapFile;
use tboxscope_test_support::quic::{rfc9001_keylog, unhex, OneRttMix};
use tboxscope_test_support::tcpflow::{write_tcp_capture, TcpTraffic, FULL_SEGMENT};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("offline") => offline(&args),
        Some("offline-quic") => offline_quic(&args),
        Some("offline-tcp") => offline_tcp(&args),
        Some("decode") => decode_only(&args),
        Some("engine") => engine_goal(&args),
        // `write-kcp PATH [--packets N]`, `write-quic PATH [--packets N]` (key log at PATH.keys).
        Some("write-kcp") => {
            write_kcp_capture(Path::new(&args[2]), arg(&args, "--packets", 1_050_000));
        }
        Some("write-quic") => {
            let path = Path::new(&args[2]);
            write_quic_capture(path, &path.with_extension("keys"), arg(&args, "--packets", 1_000_000));
        }
        // `write-tcp PATH [--packets N] [--segment-bytes B]`: the capture of `offline-tcp`.
        Some("write-tcp") => {
            let traffic = tcp_traffic(
                arg(&args, "--packets", 1_000_000),
                arg(&args, "--segment-bytes", FULL_SEGMENT),
            );
            let (_, truth) = write_tcp_capture(Path::new(&args[2]), &traffic);
            println!("{truth:?}");
        }
        Some("live") => live(&args),
        _ => eprintln!(
            "usage: analyze_bench offline|offline-quic|offline-tcp|decode|live [options] (see the source header)"
        ),
    }
}

/// One Ethernet/IPv4/UDP frame from `src` to `dst` around `payload` (checksums left zero, as
/// offloaded NICs do).
fn frame(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    f.extend([0x45, 0]);
    f.extend(total.to_be_bytes());
    f.extend([0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend(src.ip().octets());
    f.extend(dst.ip().octets());
    f.extend(src.port().to_be_bytes());
    f.extend(dst.port().to_be_bytes());
    f.extend(((8 + payload.len()) as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend(payload);
    f
}

fn kcp(conv: u32, cmd: u8, frg: u8, ts: u32, sn: u32, una: u32, payload_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + payload_len);
    v.extend(conv.to_le_bytes());
    v.push(cmd);
    v.push(frg);
    v.extend(128u16.to_le_bytes());
    v.extend(ts.to_le_bytes());
    v.extend(sn.to_le_bytes());
    v.extend(una.to_le_bytes());
    v.extend((payload_len as u32).to_le_bytes());
    v.resize(24 + payload_len, 0x5a);
    v
}

/// Writes a classic pcap of `n` KCP frames as one end of four raw-ikcp conversations shows
/// them; returns its size in bytes. Of every 4 frames, 3 are client → server PUSH of 512–1376
/// bytes (the conversations take turns) and 1 is a server → client datagram of two ACKs, as
/// ikcp batches them: for each conversation in turn, its two newest segments (sn and ts
/// echoed) with una past them, which also acknowledges the one before.
fn write_kcp_capture(path: &Path, n: u64) -> u64 {
    let mut w = PcapFile::create(path);
    let sizes = [512usize, 1024, 1376, 1376, 700];
    // Per conversation: the next sn to send.
    let mut next_sn = [0u32; 4];
    let mut pushes = 0u64;
    for i in 0..n {
        let ts_ms = (i / 100) as u32;
        let client = |conv: u32| SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000 + conv as u16);
        let server = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4000);
        let (src, dst, payload) = if i % 4 == 3 {
            let conv = ((i / 4) % 4) as u32;
            let s = next_sn[conv as usize];
            // The segments went out within the last few frames (≤ 1 ms before).
            let sent_ms = ts_ms.saturating_sub(1);
            let mut p = kcp(conv, 82, 0, sent_ms, s.saturating_sub(2), s, 0);
            p.extend(kcp(conv, 82, 0, sent_ms, s.saturating_sub(1), s, 0));
            (server, client(conv), p)
        } else {
            let conv = (pushes % 4) as u32;
            pushes += 1;
            let sn = &mut next_sn[conv as usize];
            let p = kcp(conv, 81, 0, ts_ms, *sn, 0, sizes[(i % 5) as usize]);
            *sn += 1;
            (client(conv), server, p)
        };
        w.packet(
            1_700_000_000_000_000u64 + i * 10,
            &frame(src, dst, &payload),
        );
    }
    w.finish()
}

/// Runs `cmd` with stdout discarded; returns (wall seconds, peak RSS in KiB) from `time -v`.
fn timed(cmd: &mut Command) -> Option<(f64, u64)> {
    timed_output(cmd).map(|(wall, rss, _)| (wall, rss))
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The binary (`--tboxscope`, else the release build), a temporary directory and the capture
/// to write (`--capture`, else `name` in that directory).
fn bench_file(args: &[String], name: &str) -> (PathBuf, tempfile::TempDir, PathBuf) {
    let default_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/tboxscope");
    let bin: PathBuf = arg(args, "--tboxscope", default_bin);
    let dir = tempfile::tempdir().unwrap();
    let file = arg(args, "--capture", dir.path().join(name));
    (bin, dir, file)
}

/// Seconds to read `file` to its end with `buf_size`-byte reads, doing nothing with the bytes.
fn read_file(file: &Path, buf_size: usize) -> f64 {
    let t = Instant::now();
    let mut f = std::fs::File::open(file).unwrap();
    let mut buf = vec![0u8; buf_size];
    while let Ok(k) = f.read(&mut buf) {
        if k == 0 {
            break;
        }
    }
    t.elapsed().as_secs_f64()
}

fn offline(args: &[String]) {
    let n: u64 = arg(args, "--packets", 1_050_000);
    let (bin, _dir, file) = bench_file(args, "kcp-bench.pcap");
    let t = Instant::now();
    let size = write_kcp_capture(&file, n);
    println!(
        "capture: {n} KCP frames, {:.0} MB, written in {:.2} s",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    // Baselines: read the file (page cache warm after writing), then walk its records without
    // decoding, on this thread alone and with the read-ahead thread.
    for buf_size in [256usize << 10, 1 << 20] {
        let read_s = read_file(&file, buf_size);
        println!(
            "read file ({} KiB buffer): {read_s:.3} s ({:.1} GB/s)",
            buf_size >> 10,
            size as f64 / read_s / 1e9
        );
    }
    for reading in [FileReading::SameThread, FileReading::ReadAhead] {
        let t = Instant::now();
        let mut r = CaptureFile::open_with(&file, reading).unwrap();
        while r.next_packet().unwrap().is_some() {}
        println!(
            "walk records ({reading:?}): {:.3} s",
            t.elapsed().as_secs_f64()
        );
    }
    println!(
        "the analyze driver reads this file {:?} (FileReading::Auto)",
        CaptureFile::open(&file).unwrap().reading()
    );

    // In-process decode (the analyze driver, no output).
    let run = decode_in_process(&file, &DissectConfig::default(), 2);
    assert_eq!(run.stats.kcp_datagrams, n);
    let (best, segments) = (run.wall, run.records);
    let decode_pps = n as f64 / best;
    println!(
        "analyze decode (in process, best of 2): {best:.3} s, {:.2} M packets/s ({:.2} M per second of the thread's CPU time), {segments} segments, VmHWM {} MiB",
        decode_pps / 1e6,
        n as f64 / run.cpu / 1e6,
        vm_hwm_kib() / 1024
    );

    let (engine_wall, engine_cpu) = decode_with_engine(&file, &DissectConfig::default(), false);
    println!(
        "analyze decode + engine (in process, as the report does): {engine_wall:.3} s; engine on top of decoding: +{:.0} % wall, +{:.0} % CPU",
        (engine_wall / best - 1.0) * 100.0,
        (engine_cpu / run.cpu - 1.0) * 100.0
    );
    let file_s = file.to_str().unwrap();
    let tbox = if bin.exists() {
        timed(Command::new(&bin).args(["analyze", file_s]))
    } else {
        println!(
            "(no {} — build it with cargo build --release -p tboxscope)",
            bin.display()
        );
        None
    };
    if let Some((s, rss)) = tbox {
        println!(
            "tboxscope analyze FILE (binary, end to end): {s:.3} s, {:.2} M packets/s, peak RSS {} MiB",
            n as f64 / s / 1e6,
            rss / 1024
        );
    }
    let tcpdump = timed(Command::new("tcpdump").args(["-nn", "-r", file_s]));
    if let Some((s, rss)) = tcpdump {
        println!(
            "tcpdump -nn -r FILE: {s:.3} s, {:.0} k packets/s, peak RSS {} MiB",
            n as f64 / s / 1e3,
            rss / 1024
        );
    }
    let tshark = timed(Command::new("tshark").args([
        "-r",
        file_s,
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "udp.srcport",
        "-e",
        "udp.length",
    ]));
    if let Some((s, rss)) = tshark {
        println!(
            "tshark -T fields (3 fields): {s:.3} s, {:.0} k packets/s, peak RSS {} MiB",
            n as f64 / s / 1e3,
            rss / 1024
        );
    }
    let ratio = |base: Option<(f64, u64)>, name: &str| {
        if let Some((s, _)) = base {
            println!("ratio decode vs {name}: {:.1}x", s / best);
            if let Some((t, _)) = tbox {
                println!("ratio tboxscope binary vs {name}: {:.1}x", s / t);
            }
        }
    };
    ratio(tshark, "tshark");
    ratio(tcpdump, "tcpdump");
}

fn rfc9001_packet(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../decode/tests/data")
        .join(name);
    unhex(&std::fs::read_to_string(p).unwrap())
}

/// Writes a QUIC capture of `n` frames and its key log: the RFC 9001 Appendix A client and
/// server Initials (real TLS hellos, so the key log applies), then 1-RTT packets protected with
/// the project's own packet protection under the logged traffic secrets (AES-128-GCM): 55 %
/// full-size STREAM data client → server, 35 % ACK-only server → client (zero-length DCID), 10 %
/// ACK + two STREAM frames. Returns the capture's size.
fn write_quic_capture(path: &Path, keylog: &Path, n: u64) -> u64 {
    std::fs::write(keylog, rfc9001_keylog()).unwrap();
    let client = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 50000);
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 443);
    let mut w = PcapFile::create(path);
    let t0 = 1_700_000_000_000_000u64;
    w.packet(
        t0,
        &frame(
            client,
            server,
            &rfc9001_packet("rfc9001-client-initial.hex"),
        ),
    );
    w.packet(
        t0 + 10,
        &frame(
            server,
            client,
            &rfc9001_packet("rfc9001-server-initial.hex"),
        ),
    );
    let mut mix = OneRttMix::new();
    for i in 2..n {
        let (from, to, packet) = match mix.packet(i) {
            (true, p) => (client, server, p),
            (false, p) => (server, client, p),
        };
        w.packet(t0 + i * 10, &frame(from, to, &packet));
    }
    w.finish()
}

/// On-CPU time of the calling thread, ns (`/proc/thread-self/schedstat`): on a shared machine
/// the wall clock also counts time other processes held the core.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What one in-process decode measured.
struct DecodeRun {
    /// Best wall time, s.
    wall: f64,
    /// On-CPU time of the decoding thread in that round, s.
    cpu: f64,
    records: u64,
    stats: DissectStats,
    /// QUIC packets decrypted.
    quic_decrypted: u64,
}

/// In-process decode of `file`, best of `rounds` (by wall time).
fn decode_in_process(file: &Path, config: &DissectConfig, rounds: usize) -> DecodeRun {
    decode_in_process_with(file, config, rounds, FileReading::Auto)
}

fn decode_in_process_with(
    file: &Path,
    config: &DissectConfig,
    rounds: usize,
    reading: FileReading,
) -> DecodeRun {
    let mut best = DecodeRun {
        wall: f64::MAX,
        cpu: 0.0,
        records: 0,
        stats: DissectStats::default(),
        quic_decrypted: 0,
    };
    for _ in 0..rounds {
        let mut analyzer = Analyzer::new(config.clone());
        analyzer.set_file_reading(reading);
        let mut count = 0u64;
        let (t, cpu0) = (Instant::now(), thread_cpu_ns());
        let mut emit = |_r: probe_user::analyze::Record<'_>| -> Result<(), ()> {
            count += 1;
            Ok(())
        };
        analyzer.run_file(file, &mut emit).unwrap().unwrap();
        let wall = t.elapsed().as_secs_f64();
        if wall < best.wall {
            best = DecodeRun {
                wall,
                cpu: (thread_cpu_ns() - cpu0) as f64 / 1e9,
                records: count,
                stats: analyzer.stats().clone(),
                quic_decrypted: analyzer.dissector().quic_stats().decrypted,
            };
        }
    }
    best
}

/// In-process decode of `file` with every decoded unit fed to the engine, records drained and
/// dropped (no output written): (wall s, CPU s of this thread). `messages`: the engine builds a
/// `message` record per message, as `tboxscope analyze --json` does; without, as the text
/// report does.
fn decode_with_engine(file: &Path, config: &DissectConfig, messages: bool) -> (f64, f64) {
    let (wall, cpu, _) = decode_and_match_timed(file, config, messages, false);
    (wall, cpu)
}

/// Decodes `file` and matches it as `tboxscope analyze` does (its text report when `messages`
/// is false), the engine on its own thread with `own_thread`; returns (wall s, CPU s of the
/// whole process: both threads, and with its own thread how long each thread waited for the
/// other).
fn decode_and_match_timed(
    file: &Path,
    config: &DissectConfig,
    messages: bool,
    own_thread: bool,
) -> (f64, f64, Option<Waits>) {
    let mut analyzer = Analyzer::new(config.clone());
    let engine = Engine::new(EngineConfig {
        emit_messages: messages,
        ..EngineConfig::default()
    });
    let (t, cpu0) = (Instant::now(), process_cpu_ns());
    let matched = decode_and_match(
        &mut analyzer,
        &[file.to_path_buf()],
        &[],
        engine,
        (),
        |_, ()| Ok::<(), std::io::Error>(()),
        own_thread,
    )
    .unwrap();
    assert!(matched.file_errors.is_empty());
    let mut engine = matched.engine;
    let summary = engine.finish(matched.last_ts);
    std::hint::black_box(summary);
    (
        t.elapsed().as_secs_f64(),
        (process_cpu_ns() - cpu0) as f64 / 1e9,
        matched.waits,
    )
}

/// CPU time of the whole process (every thread), ns.
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// The decoding thread's share of the engine on its own thread: decodes `file` and builds
/// every observation as the engine would get it; (wall s, CPU s).
fn decode_to_observations(file: &Path, config: &DissectConfig) -> (f64, f64) {
    /// Drops each observation.
    struct Discard;
    impl ObservationSink for Discard {
        fn handle(&mut self, obs: Observation) {
            drop(std::hint::black_box(obs));
        }
    }
    let mut analyzer = Analyzer::new(config.clone());
    let mut correlator = Correlator::with_sink(Discard);
    let mut feed = FrameFeed::default();
    let (t, cpu0) = (Instant::now(), thread_cpu_ns());
    analyzer
        .run_file(file, &mut |r| {
            feed.observe(&mut correlator, &r);
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    (
        t.elapsed().as_secs_f64(),
        (thread_cpu_ns() - cpu0) as f64 / 1e9,
    )
}

/// The engine alone: decodes `file` into the engine's observations (kept in memory), then
/// times handing them to the engine (as the text report runs it) and finishing; returns
/// (wall s, CPU s).
fn engine_alone(file: &Path, config: &DissectConfig) -> (f64, f64) {
    let mut analyzer = Analyzer::new(config.clone());
    let mut correlator = Correlator::new(EngineConfig {
        emit_messages: false,
        ..EngineConfig::default()
    });
    let mut feed = FrameFeed::default();
    let mut observations = Vec::new();
    analyzer
        .run_file(file, &mut |r| {
            observations.push(feed.observation(&mut correlator, &r));
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    let (t, cpu0) = (Instant::now(), thread_cpu_ns());
    let engine = correlator.engine_mut();
    for o in observations {
        engine.handle(o);
        engine.drain_records().for_each(drop);
    }
    let summary = engine.finish(feed.last_ts());
    std::hint::black_box(summary);
    (
        t.elapsed().as_secs_f64(),
        (thread_cpu_ns() - cpu0) as f64 / 1e9,
    )
}

/// The engine's cost on top of decoding, measured in the same run: `rounds` rounds, each
/// running every configuration once in turn (so that a slow spell of the machine falls on all
/// of them alike): decoding alone; decoding and building the engine's observations (the
/// decoding thread's share); the engine alone on observations decoded beforehand; decode +
/// engine on one thread; with the engine on its own thread as `tboxscope analyze` runs it; and
/// with `message` records (as `--json`). Prints each configuration's best and median wall
/// time and CPU time, and the goal's ratio by both.
fn engine_overhead(file: &Path, config: &DissectConfig, rounds: usize) {
    const NAMES: [&str; 6] = [
        "decode alone",
        "decode + observations built",
        "engine alone (observations decoded beforehand)",
        "decode + engine, one thread",
        "decode + engine on its own thread (as `tboxscope analyze` runs it)",
        "decode + engine with message records, one thread",
    ];
    let mut walls: [Vec<f64>; 6] = Default::default();
    let mut cpus: [Vec<f64>; 6] = Default::default();
    let mut frames = 0u64;
    // Per own-thread run: the share of its wall time each thread waited for the other.
    let (mut engine_waited, mut decoding_waited) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        // Every configuration reads the file from the page cache: `tboxscope analyze` reads a
        // file that is mostly out of it on a third thread (`FileReading::Auto`), and the
        // other processes on the machine evict pages of an 880 MB file between rounds.
        let reading = warm_page_cache(file);
        if reading != FileReading::SameThread {
            println!(
                "round {}: the file is not in the page cache ({reading:?})",
                round + 1
            );
        }
        // The round's two paired runs take turns at going first (right after the warm-up
        // read), so that neither has that place in every round.
        let (d, (own_wall, own_cpu, waits)) = if round % 2 == 0 {
            let d = decode_in_process(file, config, 1);
            (d, decode_and_match_timed(file, config, false, true))
        } else {
            let own = decode_and_match_timed(file, config, false, true);
            (decode_in_process(file, config, 1), own)
        };
        frames = d.stats.frames;
        let waits = waits.unwrap_or_default();
        engine_waited.push(waits.engine.as_secs_f64() / own_wall);
        decoding_waited.push(waits.decoding.as_secs_f64() / own_wall);
        let runs = [
            (d.wall, d.cpu),
            decode_to_observations(file, config),
            engine_alone(file, config),
            decode_with_engine(file, config, false),
            (own_wall, own_cpu),
            decode_with_engine(file, config, true),
        ];
        let line: Vec<String> = runs
            .iter()
            .map(|(w, c)| format!("{w:.3} s ({c:.3})"))
            .collect();
        println!(
            "round {}: {} [own thread: engine waited {:.0} ms, decoding {:.0} ms]",
            round + 1,
            line.join("; "),
            waits.engine.as_secs_f64() * 1e3,
            waits.decoding.as_secs_f64() * 1e3
        );
        for (i, (w, c)) in runs.into_iter().enumerate() {
            walls[i].push(w);
            cpus[i].push(c);
        }
    }
    // Each round's own-thread run against that round's decoding alone: the host's slow spells
    // last seconds, so a round's two runs share theirs.
    let mut paired: Vec<f64> = walls[4].iter().zip(&walls[0]).map(|(o, d)| o / d).collect();
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let (paired_min, paired_median) = stats(&mut paired);
    let paired_max = paired.last().copied().unwrap_or(paired_median);
    let (walls, cpus): (Vec<_>, Vec<_>) = walls
        .iter_mut()
        .zip(cpus.iter_mut())
        .map(|(w, c)| (stats(w), stats(c)))
        .unzip();
    let pct = |x: f64, base: f64| (x / base - 1.0) * 100.0;
    println!("{rounds} rounds, wall time best / median (CPU time, all threads, best / median):");
    for (i, name) in NAMES.iter().enumerate() {
        let vs = if i == 0 {
            String::new()
        } else {
            format!(
                "  → {:+.0} % / {:+.0} % wall, {:+.0} % CPU",
                pct(walls[i].0, walls[0].0),
                pct(walls[i].1, walls[0].1),
                pct(cpus[i].0, cpus[0].0)
            )
        };
        println!(
            "  {name}: {:.3} / {:.3} s ({:.3} / {:.3} s CPU){vs}",
            walls[i].0, walls[i].1, cpus[i].0, cpus[i].1
        );
    }
    let mfps = |s: f64| frames as f64 / s / 1e6;
    println!(
        "goal (matching ≤ 30 % on top of decoding): decode {:.2} M frames/s, decode + match + \
histograms {:.2} M frames/s with the engine on its own thread: +{:.0} % (best), +{:.0} % (median)",
        mfps(walls[0].0),
        mfps(walls[4].0),
        pct(walls[4].0, walls[0].0),
        pct(walls[4].1, walls[0].1)
    );
    println!(
        "  the same, each round's own-thread run against that round's decoding alone: median \
{:+.0} %, rounds from {:+.0} % to {:+.0} %",
        (paired_median - 1.0) * 100.0,
        (paired_min - 1.0) * 100.0,
        (paired_max - 1.0) * 100.0
    );
    let (_, engine_waited) = stats(&mut engine_waited);
    let (_, decoding_waited) = stats(&mut decoding_waited);
    println!(
        "  which thread set the pace (median share of the own-thread wall spent waiting for the \
other): engine's thread {:.0} %, decoding thread {:.0} %",
        engine_waited * 100.0,
        decoding_waited * 100.0
    );
}

/// Reads `file` once so that its pages are in the page cache; returns how `tboxscope analyze`
/// would then read it.
fn warm_page_cache(file: &Path) -> FileReading {
    let mut f = std::fs::File::open(file).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf).unwrap() > 0 {}
    CaptureFile::open(file).unwrap().reading()
}

/// `engine [--rounds R] [--dir D]`: the ≤ 30 % goal on both bench captures, written to a
/// temporary directory (or D, kept): the engine's cost on top of decoding ([`engine_overhead`]),
/// KCP then QUIC with 1-RTT decryption.
fn engine_goal(args: &[String]) {
    let rounds = arg(args, "--rounds", 5);
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = arg(args, "--dir", tmp.path().to_path_buf());
    let kcp = dir.join("kcp-bench.pcap");
    let quic = dir.join("quic-bench.pcap");
    let keylog = quic.with_extension("keys");
    write_kcp_capture(&kcp, 1_050_000);
    write_quic_capture(&quic, &keylog, 1_000_000);
    println!("KCP, 1 050 000 frames ({}):", kcp.display());
    engine_overhead(&kcp, &DissectConfig::default(), rounds);
    println!(
        "QUIC, 1 000 000 packets, 1-RTT decrypted ({}):",
        quic.display()
    );
    let config = DissectConfig {
        keylog: Some(Keylog::from_file(&keylog).unwrap()),
        ..DissectConfig::default()
    };
    engine_overhead(&quic, &config, rounds);
}

/// `decode FILE [--keylog K] [--rounds R] [--engine | --engine-only [--messages]]`: the
/// in-process decode of an existing capture (for profiling); with `--engine`, the engine's cost
/// on top of it ([`engine_overhead`]); with `--engine-only`, only decode + engine rounds.
fn decode_only(args: &[String]) {
    // One configuration alone, `rounds` times (for `perf record`).
    const ALONE: [(&str, &str); 5] = [
        (
            "--observations",
            "decode + observations built, each over the last",
        ),
        ("--engine-alone", "engine alone"),
        ("--reader", "the file reader alone"),
        ("--own-thread", "decode + engine on its own thread"),
        ("--engine-only", "decode + engine"),
    ];
    let file = PathBuf::from(args.get(2).expect("decode FILE"));
    let keylog: Option<PathBuf> = args
        .iter()
        .position(|a| a == "--keylog")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let config = DissectConfig {
        keylog: keylog.map(|k| Keylog::from_file(&k).unwrap()),
        ..DissectConfig::default()
    };
    let rounds = arg(args, "--rounds", 3);
    if args.iter().any(|a| a == "--engine") {
        engine_overhead(&file, &config, rounds);
        return;
    }
    if let Some(&(flag, label)) = ALONE.iter().find(|(f, _)| args.iter().any(|a| a == f)) {
        let messages = args.iter().any(|a| a == "--messages");
        warm_page_cache(&file);
        for _ in 0..rounds {
            let (wall, cpu) = match flag {
                "--observations" => decode_to_observations(&file, &config),
                "--reader" => reader_alone(&file),
                "--engine-alone" => engine_alone(&file, &config),
                "--own-thread" => {
                    let (wall, cpu, waits) = decode_and_match_timed(&file, &config, false, true);
                    if let Some(w) = waits {
                        println!(
                            "engine's thread waited {:.0} ms, decoding thread {:.0} ms",
                            w.engine.as_secs_f64() * 1e3,
                            w.decoding.as_secs_f64() * 1e3
                        );
                    }
                    (wall, cpu)
                }
                _ => decode_with_engine(&file, &config, messages),
            };
            println!("{label}: {wall:.3} s ({cpu:.3} s CPU)");
        }
        return;
    }
    let reading = match args
        .iter()
        .position(|a| a == "--reading")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("same-thread") => FileReading::SameThread,
        Some("read-ahead") => FileReading::ReadAhead,
        _ => FileReading::Auto,
    };
    let run = decode_in_process_with(&file, &config, rounds, reading);
    println!(
        "decode ({reading:?}): best {:.3} s, {:.2} M frames/s ({:.2} M per second of the thread's CPU time), {} records",
        run.wall,
        run.stats.frames as f64 / run.wall / 1e6,
        run.stats.frames as f64 / run.cpu / 1e6,
        run.records
    );
}

/// The traffic of `offline-tcp` and `write-tcp`.
fn tcp_traffic(frames: u64, segment_bytes: u32) -> TcpTraffic {
    TcpTraffic {
        connections: 16,
        frames,
        loss_per_mille: 10,
        seed: 1,
        segment_bytes,
    }
}

/// Runs `cmd` with its standard output kept: (wall seconds, peak RSS in KiB, stdout).
fn timed_output(cmd: &mut Command) -> Option<(f64, u64, String)> {
    let out_file = tempfile::NamedTempFile::new().ok()?;
    let mut full = Command::new("/usr/bin/time");
    full.arg("-v").arg(cmd.get_program()).args(cmd.get_args());
    full.stdout(out_file.reopen().ok()?);
    let start = Instant::now();
    let out = full.stderr(std::process::Stdio::piped()).output().ok()?;
    let wall = start.elapsed().as_secs_f64();
    if !out.status.success() {
        eprintln!("{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let rss = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some((wall, rss, std::fs::read_to_string(out_file.path()).ok()?))
}

/// Wall seconds of `cmd`, its standard output to a file, timed here: `/usr/bin/time -v`
/// ([`timed_output`], for the peak RSS) added ~8 ms to each run (2026-12-06: 67.7 -> 75.9 ms
/// median of a ~68 ms `analyze`), nothing to tshark's seconds but an eighth of tboxscope's.
fn wall_of(cmd: &mut Command) -> Option<f64> {
    let out_file = tempfile::NamedTempFile::new().ok()?;
    cmd.stdout(out_file.reopen().ok()?)
        .stderr(std::process::Stdio::null());
    let start = Instant::now();
    let status = cmd.status().ok()?;
    let wall = start.elapsed().as_secs_f64();
    status.success().then_some(wall)
}

/// Rounds of `offline-tcp`'s end-to-end comparison (tshark's expert analysis once, then the
/// binary three times, in each).
const E2E_ROUNDS: usize = 3;

/// The median of `runs` (the upper one of an even count), `None` when there are none.
fn median(runs: &[f64]) -> Option<f64> {
    let mut v = runs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The shortest of `runs` (infinite when there are none).
fn best_of(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(f64::INFINITY, f64::min)
}

fn offline_tcp(args: &[String]) {
    let n: u64 = arg(args, "--packets", 1_000_000);
    let segment_bytes: u32 = arg(args, "--segment-bytes", FULL_SEGMENT);
    let (bin, _dir, file) = bench_file(args, "tcp-bench.pcap");
    let t = Instant::now();
    let (size, truth) = write_tcp_capture(&file, &tcp_traffic(n, segment_bytes));
    // Written back before anything is timed: the kernel's writeback of the fresh file would
    // otherwise take a core in the middle of a run.
    std::fs::File::open(&file).unwrap().sync_all().unwrap();
    println!(
        "capture: {} TCP frames, data segments of {segment_bytes} bytes, {:.0} MB, written in {:.2} s; truth: {} retransmissions (fast {}, loss probe {}, RTO level 0 {}, level 1 {})",
        truth.frames,
        size as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        truth.retransmissions(),
        truth.fast,
        truth.loss_probe,
        truth.rto_level0,
        truth.rto_level1
    );
    warm_page_cache(&file);
    let mut read = f64::MAX;
    for _ in 0..3 {
        read = read.min(read_file(&file, 256 << 10));
    }
    println!(
        "read file (256 KiB buffer, best of 3): {read:.3} s, {:.1} GB/s",
        size as f64 / read / 1e9
    );
    let config = DissectConfig::default();
    let run = decode_in_process(&file, &config, 3);
    assert_eq!(run.stats.tcp, truth.frames);
    let best = run.wall;
    println!(
        "analyze decode (in process, best of 3): {best:.3} s, {:.2} M frames/s",
        truth.frames as f64 / best / 1e6
    );
    let mut matched = f64::MAX;
    for _ in 0..3 {
        let (wall, _, _) = decode_and_match_timed(&file, &config, false, true);
        matched = matched.min(wall);
    }
    println!(
        "analyze decode + engine with the wire TCP matcher (own thread, best of 3): {matched:.3} s, {:.2} M frames/s, +{:.0} % on decoding",
        truth.frames as f64 / matched / 1e6,
        (matched / best - 1.0) * 100.0
    );
    let file_s = file.to_str().unwrap();
    // The end-to-end comparison in rounds, as single runs of a ~70 ms process swing with the
    // host: each round runs tshark's expert analysis once, then the binary three times.
    let (mut tbox_runs, mut expert_runs) = (Vec::new(), Vec::new());
    let (mut tbox, mut expert_rss) = (None, 0);
    if !bin.exists() {
        println!(
            "(no {} — build it with cargo build --release -p tboxscope)",
            bin.display()
        );
    }
    for _ in 0..E2E_ROUNDS {
        expert_runs.extend(wall_of(
            Command::new("tshark").args(["-r", file_s, "-q", "-z", "expert"]),
        ));
        for _ in 0..3 {
            if bin.exists() {
                tbox_runs.extend(wall_of(
                    Command::new(&bin).args(["analyze", file_s, "--json", "-"]),
                ));
            }
        }
    }
    // Peak RSS and the output from one more run of each under `/usr/bin/time -v`.
    if let Some((_, rss, _)) =
        timed_output(Command::new("tshark").args(["-r", file_s, "-q", "-z", "expert"]))
    {
        expert_rss = rss;
    }
    if bin.exists() {
        tbox = timed_output(Command::new(&bin).args(["analyze", file_s, "--json", "-"]))
            .map(|(_, rss, out)| (rss, out));
    }
    let tbox_s = median(&tbox_runs);
    if let (Some(s), Some((rss, out))) = (tbox_s, &tbox) {
        let kinds = [
            "rto",
            "fast",
            "loss_probe",
            "loss_recovery",
            "path_mtu",
            "other",
        ]
        .map(|k| {
            let needle = format!("\"kind\":\"{k}\"");
            out.lines()
                .filter(|l| l.contains("\"type\":\"tcp_retransmit\"") && l.contains(&needle))
                .count()
        });
        println!(
            "tboxscope analyze --json - (binary, end to end, median of {} runs): {s:.3} s (best {:.3} s), {:.2} M frames/s, peak RSS {} MiB; retransmissions rto {} fast {} loss_probe {} loss_recovery {} path_mtu {} other {}",
            tbox_runs.len(),
            best_of(&tbox_runs),
            truth.frames as f64 / s / 1e6,
            rss / 1024,
            kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5]
        );
    }
    let expert_s = median(&expert_runs);
    if let Some(s) = expert_s {
        println!(
            "tshark -q -z expert (median of {} runs): {s:.3} s (best {:.3} s), {:.0} k frames/s, peak RSS {} MiB",
            expert_runs.len(),
            best_of(&expert_runs),
            truth.frames as f64 / s / 1e3,
            expert_rss / 1024
        );
    }
    if let (Some(t), Some(e)) = (tbox_s, expert_s) {
        println!(
            "ratio tboxscope binary vs tshark -z expert: {:.1}x by medians, {:.1}x by bests",
            e / t,
            best_of(&expert_runs) / best_of(&tbox_runs)
        );
    }
    let fields = timed_output(Command::new("tshark").args([
        "-r",
        file_s,
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "tcp.analysis.retransmission",
        "-e",
        "tcp.analysis.fast_retransmission",
    ]));
    if let Some((s, rss, out)) = &fields {
        let flagged = |col: usize| {
            out.lines()
                .filter(|l| l.split('\t').nth(col).is_some_and(|v| !v.is_empty()))
                .count()
        };
        println!(
            "tshark -T fields (tcp.analysis.retransmission, fast_retransmission): {s:.3} s, {:.0} k frames/s, peak RSS {} MiB; flagged {} retransmissions, {} fast",
            truth.frames as f64 / s / 1e3,
            rss / 1024,
            flagged(1),
            flagged(2)
        );
    }
    let fields_s = fields.as_ref().map(|(s, _, _)| *s);
    for (name, base) in [
        ("tshark -z expert", expert_s),
        ("tshark tcp.analysis fields", fields_s),
    ] {
        if let Some(s) = base {
            println!(
                "ratio read file alone vs {name}: {:.1}x (the ceiling)",
                s / read
            );
            println!("ratio decode + matcher vs {name}: {:.1}x", s / matched);
        }
    }
    if let (Some(t), Some(f)) = (tbox_s, fields_s) {
        println!(
            "ratio tboxscope binary vs tshark tcp.analysis fields: {:.1}x",
            f / t
        );
    }
}

fn offline_quic(args: &[String]) {
    let n: u64 = arg(args, "--packets", 1_000_000);
    let default_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/tboxscope");
    let bin: PathBuf = arg(args, "--tboxscope", default_bin);
    let dir = tempfile::tempdir().unwrap();
    let file = arg(args, "--capture", dir.path().join("quic-bench.pcap"));
    let keylog = file.with_extension("keys");
    let t = Instant::now();
    let size = write_quic_capture(&file, &keylog, n);
    println!(
        "capture: {n} QUIC frames (1-RTT AES-128-GCM), {:.0} MB, written in {:.2} s",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let config = DissectConfig {
        keylog: Some(Keylog::from_file(&keylog).unwrap()),
        ..DissectConfig::default()
    };
    let run = decode_in_process(&file, &config, 2);
    let best = run.wall;
    println!(
        "analyze decode + 1-RTT decryption (in process, best of 2): {best:.3} s, {:.2} M packets/s \
({:.2} M per second of the thread's CPU time), {} QUIC packets ({} datagrams, {} decrypted), VmHWM {} MiB",
        n as f64 / best / 1e6,
        n as f64 / run.cpu / 1e6,
        run.records,
        run.stats.quic_datagrams,
        run.quic_decrypted,
        vm_hwm_kib() / 1024
    );
    assert_eq!(run.stats.quic_datagrams, n);
    let (file_s, keylog_s) = (file.to_str().unwrap(), keylog.to_str().unwrap());
    let tbox = bin
        .exists()
        .then(|| timed(Command::new(&bin).args(["analyze", file_s, "--keylog", keylog_s])))
        .flatten();
    if let Some((s, rss)) = tbox {
        println!(
            "tboxscope analyze FILE --keylog K (binary, end to end): {s:.3} s, {:.2} M packets/s, peak RSS {} MiB",
            n as f64 / s / 1e6,
            rss / 1024
        );
    }
    let tls = format!("tls.keylog_file:{keylog_s}");
    let tshark_args = [
        "-r",
        file_s,
        "-o",
        &tls,
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "quic.packet_number",
        "-e",
        "quic.stream.offset",
    ];
    // Check that tshark really decrypts (packet numbers are only visible after decryption).
    let sample = Command::new("tshark")
        .args(tshark_args)
        .args(["-c", "1000"])
        .output();
    if let Ok(out) = sample {
        let text = String::from_utf8_lossy(&out.stdout);
        let with_pn = text
            .lines()
            .filter(|l| l.split('\t').nth(1).is_some_and(|f| !f.is_empty()))
            .count();
        println!("tshark check: {with_pn} of the first 1000 frames show a packet number");
    }
    let tshark = timed(Command::new("tshark").args(tshark_args));
    if let Some((s, rss)) = tshark {
        println!(
            "tshark -o tls.keylog_file -T fields (3 fields): {s:.3} s, {:.0} k packets/s, peak RSS {} MiB",
            n as f64 / s / 1e3,
            rss / 1024
        );
        println!("ratio decode vs tshark: {:.1}x", s / best);
        if let Some((t, _)) = tbox {
            println!("ratio tboxscope binary vs tshark: {:.1}x", s / t);
        }
    }
}

fn live(args: &[String]) {
    let seconds: u64 = arg(args, "--seconds", 3);
    let rate: u64 = arg(args, "--rate", 100_000);
    let stop_early = args.iter().any(|a| a == "--stop-early");
    let lab = netns::Lab::new("b", 2);
    let specs: Vec<InterfaceSpec> = lab
        .links
        .iter()
        .zip(["4G", "5G"])
        .map(|(l, label)| InterfaceSpec::parse(&format!("{}={label}", l.0)).unwrap())
        .collect();
    let now = LiveConfig {
        interfaces: specs,
        filter: Some("udp dst port 7000".to_owned()),
        ..LiveConfig::default()
    };
    // The settings before the live path was tuned: immediate mode, 16 MiB, one packet per event.
    let before = LiveConfig {
        immediate: true,
        buffer_size: 16 << 20,
        batch: 1,
        channel_capacity: 1 << 16,
        ..now.clone()
    };
    let immediate_batched = LiveConfig {
        immediate: true,
        ..now.clone()
    };
    let rounds = if args.iter().any(|a| a == "--compare") {
        vec![
            ("previous settings", before),
            ("immediate mode, batched", immediate_batched),
            ("defaults", now),
        ]
    } else {
        vec![("defaults", now)]
    };
    for (name, cfg) in rounds {
        println!(
            "{name}: immediate {}, buffer {} MiB, batch {}",
            cfg.immediate,
            cfg.buffer_size >> 20,
            cfg.batch
        );
        live_round(&lab, cfg, seconds, rate, stop_early);
    }
    drop(lab);
}

/// Sends `count` (≤ 64) copies of `payload` on the connected `sock` with one `sendmmsg(2)`
/// (one system call per batch keeps the senders from being the bottleneck on two cores);
/// returns how many were sent.
fn send_batch(sock: &UdpSocket, payload: &[u8], count: usize) -> u64 {
    use std::os::fd::AsRawFd;
    let count = count.min(64);
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // SAFETY: an all-zero mmsghdr is valid (no name, no control data).
    let mut msgs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
    for m in msgs.iter_mut().take(count) {
        m.msg_hdr.msg_iov = &mut iov;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..count]` point at one live iovec over `payload`, which the kernel only
    // reads; the socket is connected, so no address is needed.
    let sent = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), count as u32, 0) };
    u64::try_from(sent).unwrap_or(0)
}

/// Sends `rate` packets/s on each of the lab's two links for `seconds` and captures both; with
/// `stop_early`, the capture is stopped half-way while the senders go on.
fn live_round(lab: &netns::Lab, cfg: LiveConfig, seconds: u64, rate: u64, stop_early: bool) {
    let cap = netns::spawn_in(&lab.tbox, move || LiveCapture::start(cfg))
        .join()
        .unwrap()
        .unwrap();
    // Consumer: counts packets per path and keeps the last drop counters.
    let stop = Arc::new(AtomicBool::new(false));
    let captured: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let sent: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let mut senders = Vec::new();
    for (path, link) in lab.links.iter().enumerate() {
        let (src, dst) = (format!("{}:0", link.2), format!("{}:7000", link.3));
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent[path]));
        senders.push(netns::spawn_in(&lab.tbox, move || {
            let sock = UdpSocket::bind(&src).unwrap();
            sock.connect(&dst).unwrap();
            let payload = [0x42u8; 100];
            let t0 = Instant::now();
            let mut n = 0u64;
            let end = t0 + Duration::from_secs(seconds);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                // Pace: stay at `rate` packets/s on average.
                let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
                while n < due {
                    n += send_batch(&sock, &payload, (due - n).min(64) as usize);
                }
                std::thread::yield_now();
            }
            sent.store(n, Ordering::Relaxed);
        }));
    }
    let mut last_stats = [None, None];
    // Until the senders are done and nothing more arrived for two seconds (what the kernel
    // holds is delivered within the read timeout), at most `seconds + 10` s.
    let deadline = start + Duration::from_secs(seconds + 10);
    let mut last_packet = Instant::now();
    while Instant::now() < deadline {
        match cap.events().recv_timeout(Duration::from_millis(50)) {
            Ok(LiveEvent::Packets(batch)) => {
                last_packet = Instant::now();
                for p in &batch {
                    captured[p.path].fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(LiveEvent::Stats { path, stats, .. }) => last_stats[path] = Some(stats),
            Ok(_) => {}
            Err(_) => {}
        }
        let quiet = last_packet.elapsed() > Duration::from_secs(2);
        if quiet
            && senders
                .iter()
                .all(|s: &std::thread::JoinHandle<()>| s.is_finished())
        {
            break;
        }
        if stop_early && start.elapsed().as_secs_f64() >= seconds as f64 / 2.0 {
            break;
        }
    }
    let mut cap = cap;
    if stop_early {
        cap.request_stop();
    } else {
        stop.store(true, Ordering::Relaxed);
    }
    for s in senders {
        s.join().unwrap();
    }
    cap.request_stop();
    while let Ok(ev) = cap.events().recv_timeout(Duration::from_millis(300)) {
        match ev {
            LiveEvent::Packets(batch) => {
                for p in &batch {
                    captured[p.path].fetch_add(1, Ordering::Relaxed);
                }
            }
            LiveEvent::Stats { path, stats, .. } => last_stats[path] = Some(stats),
            _ => {}
        }
    }
    cap.stop();
    let mut total_sent = 0;
    let mut total_captured = 0;
    for path in 0..2 {
        let (s, c) = (
            sent[path].load(Ordering::Relaxed),
            captured[path].load(Ordering::Relaxed),
        );
        total_sent += s;
        total_captured += c;
        println!(
            "path {path}: sent {s} ({:.0} k/s), captured {c}, libpcap {:?}, received by libpcap but not delivered: {}",
            s as f64 / seconds as f64 / 1e3,
            last_stats[path],
            last_stats[path].map_or(0, |st| st.received as i64 - st.dropped as i64 - c as i64)
        );
    }
    println!(
        "combined: sent {:.0} k packets/s for {seconds} s, captured {total_captured} of {total_sent}",
        total_sent as f64 / seconds as f64 / 1e3
    );
}

/// The file reader alone (`read()` and the capture's records; one byte of each frame read):
/// the floor of the decoding thread. (wall s, CPU s).
fn reader_alone(file: &Path) -> (f64, f64) {
    let (t, cpu0) = (Instant::now(), thread_cpu_ns());
    let mut reader = CaptureFile::open_with(file, FileReading::Auto).unwrap();
    let mut sum = 0u64;
    while let Ok(Some(p)) = reader.next_packet() {
        sum += u64::from(p.data.first().copied().unwrap_or(0));
    }
    std::hint::black_box(sum);
    (
        t.elapsed().as_secs_f64(),
        (thread_cpu_ns() - cpu0) as f64 / 1e9,
    )
}
