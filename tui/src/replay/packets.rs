//! Replay of packet captures (`.pcap`, `.pcapng`; several files are merged in time order, as
//! `analyze` does) through the decoders and the engine, at the pace of the replay clock. The
//! files are streamed, never loaded: a seek forward feeds the packets up to the new position at
//! once; a seek back starts a fresh engine from the first packet and fast-forwards to it.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use probe_user::analyze::{disjoint_captures, file_name, Analyzer, PathLabels};
use probe_user::correlate::{unmet_statements, CaptureHint, Correlator, FrameFeed};
use probe_user::decode::net::LinkType;
use probe_user::dissect::DissectConfig;
use probe_user::engine::Config as EngineConfig;
use probe_user::source::pcap::file::{format_of_magic, CaptureFile};

use super::{LoadError, PlayOptions, ReplayClock};
use crate::app::Request;
use crate::options::changed_nothing;
use crate::source::SnapshotFeed;

/// How packet captures are decoded and correlated, as `analyze` would: the same decoder and
/// engine settings, and what the user stated about the captures.
#[derive(Debug, Clone, Default)]
pub struct PacketSettings {
    /// The decoders' settings.
    pub decode: DissectConfig,
    /// The engine's settings (the player never emits per-message records, nobody reads them,
    /// and always lets messages wait for captures to pair).
    pub engine: EngineConfig,
    /// What the user stated about captures, by path label ([`Correlator::state`]).
    pub captures: Vec<(String, CaptureHint)>,
}

impl PacketSettings {
    /// A fresh correlator for one pass over the files, with the statements applied.
    fn correlator(&self) -> Correlator {
        let mut correlator = Correlator::new(EngineConfig {
            emit_messages: false,
            // The Advice screen.
            collect_evidence: true,
            // Files may come from both ends of a path, as in `analyze`.
            await_pairing: true,
            ..self.engine.clone()
        });
        correlator.state_all(&self.captures);
        correlator
    }
}

/// Packet captures to replay, with the span of their timestamps.
#[derive(Debug, Clone)]
pub struct PacketRecording {
    files: Vec<PathBuf>,
    settings: PacketSettings,
    start_ns: u64,
    end_ns: u64,
    packets: u64,
    /// What the health panel says about the files from the start (link types not decoded).
    warnings: Vec<String>,
}

impl PacketRecording {
    /// Reads every file's timestamps once (no decoding) so the clock knows the recording's
    /// span, and its interfaces so statements about captures can be checked; an unreadable or
    /// empty file is an error naming it, and so is a statement about a label no capture has.
    pub fn scan(files: &[PathBuf], settings: PacketSettings) -> Result<Self, LoadError> {
        let (mut start_ns, mut end_ns, mut packets) = (u64::MAX, 0u64, 0u64);
        let mut labels = PathLabels::default();
        let mut warnings = Vec::new();
        let mut spans: Vec<(String, (u64, u64))> = Vec::new();
        for (file_no, path) in files.iter().enumerate() {
            let name = path.display().to_string();
            let broken = |e: &dyn std::fmt::Display| LoadError::Capture {
                path: name.clone(),
                reason: e.to_string(),
            };
            let mut reader = CaptureFile::open(path).map_err(|e| broken(&e))?;
            let before = packets;
            let mut span = (u64::MAX, 0u64);
            // A file that breaks after some packets is replayed up to the break, as `analyze`
            // reads it (each pass says where it broke); one with no packet before it is refused.
            let mut failure = None;
            loop {
                match reader.next_packet() {
                    Ok(Some(p)) => {
                        span = (span.0.min(p.ts_ns), span.1.max(p.ts_ns));
                        start_ns = start_ns.min(p.ts_ns);
                        end_ns = end_ns.max(p.ts_ns);
                        packets += 1;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            if packets == before {
                return Err(match failure {
                    Some(e) => broken(&e),
                    None => LoadError::Empty {
                        path: name,
                        skipped: "no packets".to_owned(),
                    },
                });
            }
            spans.push((name.clone(), span));
            for iface in reader.interfaces() {
                labels.id_for(file_no, &file_name(path), &iface.label);
                if iface.link.is_none() {
                    warnings.push(format!(
                        "replay: {} has link type {}, which tboxscope does not decode (it decodes {})",
                        file_name(path),
                        iface.linktype,
                        LinkType::SUPPORTED
                    ));
                }
            }
        }
        let named: Vec<(&str, (u64, u64))> = spans.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        if let Some(w) = disjoint_captures(&named) {
            warnings.push(format!("replay: {w}"));
        }
        let unknown = unmet_statements(&settings.captures, labels.all());
        if !unknown.is_empty() {
            return Err(LoadError::UnknownCapture {
                labels: unknown.join(", "),
                captures: labels.all().join(", "),
            });
        }
        Ok(Self {
            files: files.to_vec(),
            settings,
            start_ns,
            end_ns,
            packets,
            warnings,
        })
    }

    /// First packet time (Unix epoch ns).
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Last packet time (Unix epoch ns).
    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }

    /// Packets in all files.
    pub fn packets(&self) -> u64 {
        self.packets
    }
}

/// Why a pass over the files ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interrupt {
    /// The position moved back before what was fed: start a fresh pass.
    Restart,
    /// The UI went away.
    Quit,
}

/// Holds each packet until the replay clock reaches it, carries out the UI's requests and
/// publishes snapshots.
struct Pacer<'a> {
    clock: ReplayClock,
    feed: &'a SnapshotFeed,
    stop: &'a AtomicBool,
    period: Duration,
    last_wall: Instant,
    next_publish: Instant,
    /// Newest packet time fed to the engine in this pass (0 before the first).
    fed_ns: u64,
    /// What the health panel says about the recording.
    note: String,
    /// What it says about the pass that reached the end (file errors, undecrypted packets).
    pass_notes: Vec<String>,
}

impl Pacer<'_> {
    /// Returns once the clock has reached `ts_ns` (`None`: never, i.e. wait at the end of the
    /// recording for a seek back or the end of the UI).
    fn wait_until(
        &mut self,
        ts_ns: Option<u64>,
        correlator: &mut Correlator,
        done: bool,
    ) -> Result<(), Interrupt> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Interrupt::Quit);
            }
            let now = Instant::now();
            let position = self
                .clock
                .advance(now.saturating_duration_since(self.last_wall));
            self.last_wall = now;
            let due = ts_ns.is_some_and(|t| position >= t);
            if due && now < self.next_publish {
                // Per packet while the clock is ahead (playing, fast-forward): straight on;
                // requests and snapshots wait for the next publish time.
                return Ok(());
            }
            let mut requested = false;
            for request in self.feed.requests() {
                requested = true;
                if request == Request::ResetWindows {
                    correlator.engine_mut().reset_windows();
                } else if let Some(target) = self.clock.request(request) {
                    self.clock.set(target);
                    if target < self.fed_ns {
                        return Err(Interrupt::Restart);
                    }
                }
            }
            if requested {
                self.next_publish = now + self.period;
                self.publish(correlator, done);
                continue;
            }
            if !due {
                // Everything before `position` is fed: time passes without packets.
                correlator.engine_mut().tick(position);
            }
            if now >= self.next_publish {
                self.next_publish = now + self.period;
                self.publish(correlator, done);
            }
            if due {
                return Ok(());
            }
            let until_packet = match ts_ns {
                Some(t) if self.clock.playing() => {
                    Duration::from_nanos(t.saturating_sub(position)).div_f64(self.clock.speed())
                }
                _ => self.period,
            };
            let wait = until_packet
                .min(self.next_publish.saturating_duration_since(now))
                .min(self.period)
                .max(Duration::from_micros(200));
            std::thread::sleep(wait);
        }
    }

    fn publish(&self, correlator: &mut Correlator, done: bool) {
        let mut snapshot = correlator.engine_mut().snapshot_advised();
        snapshot
            .health
            .inferences
            .extend(std::iter::once(&self.note).chain(&self.pass_notes).cloned());
        self.feed.publish(snapshot);
        self.feed.set_position(Some(self.clock.position(done)));
    }
}

/// The player thread: passes over the files until the UI goes away.
pub(super) fn run(
    recording: &PacketRecording,
    options: PlayOptions,
    feed: &SnapshotFeed,
    stop: &AtomicBool,
) {
    let now = Instant::now();
    let mut pacer = Pacer {
        clock: ReplayClock::new(recording.start_ns, recording.end_ns, options),
        feed,
        stop,
        period: Duration::from_millis(1000 / u64::from(options.snapshots_per_s.max(1))),
        last_wall: now,
        next_publish: now,
        fed_ns: 0,
        note: format!(
            "replay: {} packets in {} file(s), decoded as they play",
            recording.packets,
            recording.files.len()
        ),
        pass_notes: Vec::new(),
    };
    loop {
        let mut analyzer = Analyzer::new(recording.settings.decode.clone());
        let mut correlator = recording.settings.correlator();
        let mut frames = FrameFeed::default();
        pacer.fed_ns = 0;
        pacer.pass_notes.clear();
        pacer.pass_notes.extend(recording.warnings.iter().cloned());
        let pass = analyzer.run_files(&recording.files, &mut |r| {
            pacer.wait_until(Some(r.packet.ts_ns), &mut correlator, false)?;
            frames.observe(&mut correlator, &r);
            pacer.fed_ns = pacer.fed_ns.max(r.packet.ts_ns);
            correlator.engine_mut().drain_records().for_each(drop);
            Ok::<(), Interrupt>(())
        });
        let interrupt = match pass {
            Err(i) => i,
            Ok(errors) => {
                // The recording is over: close what is still open (messages waiting for a
                // copy, the outage in progress) as `analyze` does.
                let summary = correlator.engine_mut().finish(recording.end_ns);
                correlator.engine_mut().drain_records().for_each(drop);
                let app_ids = analyzer.dissector().app_ids_read();
                pacer.pass_notes.extend(
                    changed_nothing(&recording.settings.engine, app_ids, &summary)
                        .into_iter()
                        .map(|n| format!("replay: {n}")),
                );
                pacer
                    .pass_notes
                    .extend(errors.iter().map(|e| format!("replay: {e}")));
                let failures = analyzer.dissector().quic_stats().not_decrypted_total();
                if failures > 0 {
                    pacer.pass_notes.push(format!(
                        "replay: {failures} QUIC packets not decrypted (give --keylog)"
                    ));
                }
                match pacer.wait_until(None, &mut correlator, true) {
                    Err(i) => i,
                    Ok(()) => Interrupt::Quit,
                }
            }
        };
        if interrupt == Interrupt::Quit {
            return;
        }
    }
}

/// Whether `path` starts like a pcap or pcapng file.
pub fn is_packet_capture(path: &Path) -> Result<bool, LoadError> {
    use std::io::Read;
    let io = |cause| LoadError::Io {
        path: path.display().to_string(),
        cause,
    };
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(io)?;
    if n == 4 && format_of_magic(head).is_some() {
        return Ok(true);
    }
    // Named as a packet capture but not one: say so, as `analyze` does, rather than try it as
    // a JSON Lines recording.
    let named_capture = path.extension().is_some_and(|e| {
        ["pcap", "pcapng", "cap"]
            .iter()
            .any(|c| e.eq_ignore_ascii_case(c))
    });
    if named_capture {
        return Err(LoadError::Capture {
            path: path.display().to_string(),
            reason: match CaptureFile::open(path) {
                Err(e) => e.to_string(),
                Ok(_) => "not a pcap or pcapng file".to_owned(),
            },
        });
    }
    Ok(false)
}
