//! qlog export: one file per decrypted QUIC connection and capture end, for qvis and other qlog
//! tools. JSON text sequences (RFC 7464: each record is RS 0x1E, the JSON text, LF) in the main
//! qlog schema (draft-ietf-quic-qlog-main-schema, `urn:ietf:params:qlog:file:sequential`) with
//! the QUIC events of draft-ietf-quic-qlog-quic-events-12: a `quic:packet_sent` or
//! `quic:packet_received` per decrypted packet, its header and its frames.
//!
//! Vantage point: a capture observes the wire; it is no endpoint's QUIC stack. Each trace is
//! therefore of type `network`, and its `flow` says whose "sent" and "received" the events are:
//! `client` for captures on the T-Box (or on a host that is not known), `server` for captures on
//! the gateway. A packet from the client is `packet_sent` at the T-Box end and
//! `packet_received` at the gateway end, as each host's own stack would log it, at the time that
//! end's capture saw it. The captures of one host (eth0 and eth1 at the T-Box) are one vantage
//! point, so a multipath connection's paths share a file.
//!
//! Multipath: every event carries `path_id`, the per-event field the main schema suggests for
//! multipath transports: the path whose packet-number space and nonce decrypted the packet (the
//! Path ID, or for draft-05 / tquic the sequence number of the destination connection ID); 0 on
//! single-path connections.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tboxscope_decode::quic::{FrameSummary, PacketSummary, PacketType};
use tboxscope_engine::Host;

use crate::analyze::Record;
use crate::dissect::Decoded;
use crate::output::format_ts;

/// The QUIC event schema the events follow (the draft the `qlog` crate 0.18 implements).
pub const EVENT_SCHEMA: &str = "urn:ietf:params:qlog:events:quic-12";
/// The file schema of a qlog JSON-SEQ file.
pub const FILE_SCHEMA: &str = "urn:ietf:params:qlog:file:sequential";
/// The serialization format named in the header.
pub const SERIALIZATION_FORMAT: &str = "application/qlog+json-seq";
/// File name extension of qlog JSON-SEQ files.
pub const EXTENSION: &str = "sqlog";
/// RFC 7464 record separator.
const RS: u8 = 0x1e;
/// Files kept open at once; past this the least recently written one is closed (and reopened
/// for appending when its connection sends again).
const MAX_OPEN: usize = 64;
/// Capture time an event waits for earlier ones: a capture's timestamps are not always in
/// order (a host stamps the packets it sends and receives at different points, microseconds
/// apart), and qlog wants each trace's events in time order. An event later than this is written
/// where it comes and counted in [`QlogStats::out_of_order`].
const REORDER_WINDOW_NS: u64 = 20_000_000;
/// ACK Delay exponent assumed to scale ACK frames' delay to milliseconds: the transport
/// parameter's default (RFC 9000 §18.2), which the decoder does not read from the handshake.
const ACK_DELAY_EXPONENT: u32 = 3;

/// Why the qlog export failed. The messages say the inner error (it is not also a `source()`,
/// so that a printed chain names it once).
#[derive(Debug, thiserror::Error)]
pub enum QlogError {
    /// The directory could not be created.
    #[error("cannot create qlog directory {}: {error}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// A file could not be created or written.
    #[error("writing qlog file {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
}

/// What the export wrote and left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QlogStats {
    /// Files written (one per connection and capture end).
    pub files: u64,
    /// Connections with at least one file.
    pub connections: u64,
    /// `quic:packet_sent` / `quic:packet_received` events written: one per decrypted packet
    /// and capture end that saw it.
    pub packet_events: u64,
    /// QUIC packets not decrypted: they have no frames to show and are not written.
    pub not_decrypted: u64,
    /// Decrypted packets whose frames could not all be parsed (written with the frames before
    /// the first bad one and the reason in `frame_error`).
    pub frames_cut_short: u64,
    /// Events written after a later one of their trace: captured more than the reorder window
    /// (20 ms) out of time order.
    pub out_of_order: u64,
}

/// Writes qlog files from decoded records ([`QlogExport::record`]).
pub struct QlogExport {
    dir: PathBuf,
    title: String,
    /// Host of each capture label, stated or inferred; other captures are of an unknown host.
    hosts: HashMap<String, Host>,
    traces: HashMap<(u64, Host), Trace>,
    names: HashSet<String>,
    connections: HashSet<u64>,
    open: usize,
    clock: u64,
    stats: QlogStats,
}

/// One file: a connection seen from one capture end.
struct Trace {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    /// Capture time of the first event, the trace's reference time.
    epoch_ns: u64,
    /// Events follow the client's data flow (sent = towards the server).
    client_flow: bool,
    /// Writes so far, for closing the least recently written file.
    last_use: u64,
    /// (path index, frame number) of the last datagram, and its id.
    datagram: Option<(usize, u64)>,
    datagram_id: u32,
    /// The file exists (a later open appends to it).
    created: bool,
    /// Encoded events waiting in the reorder window, by capture time and arrival.
    pending: BTreeMap<(u64, u64), Vec<u8>>,
    /// Newest capture time seen, and that of the last event written.
    newest_ns: u64,
    written_ns: u64,
}

impl QlogExport {
    /// An export into `dir` (created if missing); `hosts` names the host of each capture label
    /// (captures not in it are of an unknown host); `title` goes into every file's header.
    pub fn new(dir: &Path, hosts: HashMap<String, Host>, title: String) -> Result<Self, QlogError> {
        std::fs::create_dir_all(dir).map_err(|error| QlogError::Dir {
            path: dir.to_path_buf(),
            error,
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            title,
            hosts,
            traces: HashMap::new(),
            names: HashSet::new(),
            connections: HashSet::new(),
            open: 0,
            clock: 0,
            stats: QlogStats::default(),
        })
    }

    /// Writes the event of one record if it is a decrypted QUIC packet (other records are not
    /// QUIC events; undecrypted packets are counted in [`QlogStats::not_decrypted`]).
    pub fn record(&mut self, r: &Record<'_>) -> Result<(), QlogError> {
        let Decoded::QuicPacket(p) = &r.packet.decoded else {
            return Ok(());
        };
        let (Some(conn), true) = (p.connection, p.decrypted) else {
            self.stats.not_decrypted += 1;
            return Ok(());
        };
        let host = self.hosts.get(r.path).copied().unwrap_or_default();
        let from_client = p
            .from_client
            .unwrap_or_else(|| r.packet.src.port() > r.packet.dst.port());
        let key = (conn, host);
        if !self.traces.contains_key(&key) {
            self.start_trace(key, p, r.packet.ts_ns)?;
        }
        self.clock += 1;
        let clock = self.clock;
        let Some(trace) = self.traces.get_mut(&key) else {
            return Ok(());
        };
        trace.last_use = clock;
        let datagram = (r.path_index, r.frame);
        if trace.datagram != Some(datagram) {
            trace.datagram = Some(datagram);
            trace.datagram_id = trace.datagram_id.wrapping_add(1);
        }
        let event = Event {
            time: (i128::from(r.packet.ts_ns) - i128::from(trace.epoch_ns)) as f64 / 1e6,
            name: if from_client == trace.client_flow {
                "quic:packet_sent"
            } else {
                "quic:packet_received"
            },
            path_id: p.path_id.unwrap_or(0),
            data: PacketData {
                header: header(p),
                raw: Raw {
                    length: Some(p.size as u64),
                    payload_length: None,
                },
                datagram_id: trace.datagram_id,
                frames: p.frames.iter().map(frame).collect(),
                frame_error: p.frame_error.as_deref(),
            },
        };
        self.stats.frames_cut_short += u64::from(p.frame_error.is_some());
        self.stats.packet_events += 1;
        let mut bytes = Vec::with_capacity(256);
        put(&mut bytes, &event).map_err(|error| QlogError::Write {
            path: trace.path.clone(),
            error,
        })?;
        let ts = r.packet.ts_ns;
        trace.pending.insert((ts, clock), bytes);
        trace.newest_ns = trace.newest_ns.max(ts);
        self.write_due(key, false)
    }

    /// Writes the events of `key`'s window that are due (all of them with `all`), in time order.
    fn write_due(&mut self, key: (u64, Host), all: bool) -> Result<(), QlogError> {
        loop {
            let Some(t) = self.traces.get_mut(&key) else {
                return Ok(());
            };
            let due = t.pending.first_key_value().is_some_and(|(&(ts, _), _)| {
                all || ts.saturating_add(REORDER_WINDOW_NS) <= t.newest_ns
            });
            let Some(((ts, _), bytes)) = due.then(|| t.pending.pop_first()).flatten() else {
                return Ok(());
            };
            if ts < t.written_ns {
                self.stats.out_of_order += 1;
            }
            t.written_ns = t.written_ns.max(ts);
            self.write_raw(key, &bytes)?;
        }
    }

    /// Writes what waits in the reorder windows, flushes and closes every file and says what was
    /// written.
    pub fn finish(mut self) -> Result<QlogStats, QlogError> {
        let keys: Vec<(u64, Host)> = self.traces.keys().copied().collect();
        for key in keys {
            self.write_due(key, true)?;
        }
        for t in self.traces.values_mut() {
            if let Some(mut out) = t.out.take() {
                out.flush().map_err(|error| QlogError::Write {
                    path: t.path.clone(),
                    error,
                })?;
            }
        }
        self.stats.files = self.traces.len() as u64;
        self.stats.connections = self.connections.len() as u64;
        Ok(self.stats)
    }

    fn start_trace(
        &mut self,
        key: (u64, Host),
        p: &PacketSummary,
        ts_ns: u64,
    ) -> Result<(), QlogError> {
        let (conn, host) = key;
        // The original destination CID names the connection where its first Initial was
        // captured (quic-events: group_id and file name); otherwise the first DCID seen.
        let group = if p.dcid.is_empty() {
            format!("connection{conn}")
        } else {
            p.dcid.clone()
        };
        let end = match host {
            Host::Tbox => "tbox",
            Host::Gateway => "gateway",
            Host::Unknown => "capture",
        };
        let mut name = format!("{group}_{end}.{EXTENSION}");
        if self.names.contains(&name) {
            name = format!("{group}_{end}-{conn}.{EXTENSION}");
        }
        self.names.insert(name.clone());
        self.connections.insert(conn);
        let client_flow = host != Host::Gateway;
        let trace = Trace {
            path: self.dir.join(&name),
            out: None,
            epoch_ns: ts_ns,
            client_flow,
            last_use: 0,
            datagram: None,
            datagram_id: 0,
            created: false,
            pending: BTreeMap::new(),
            newest_ns: ts_ns,
            written_ns: 0,
        };
        self.traces.insert(key, trace);
        let (vantage, seen) = match host {
            Host::Tbox => ("tboxscope: capture at the T-Box", "at the T-Box"),
            Host::Gateway => ("tboxscope: capture at the gateway", "at the gateway"),
            Host::Unknown => ("tboxscope: packet capture", "on the wire"),
        };
        let header = FileHeader {
            file_schema: FILE_SCHEMA,
            serialization_format: SERIALIZATION_FORMAT,
            title: self.title.clone(),
            trace: TraceHeader {
                title: format!("QUIC connection {group} seen {seen}"),
                common_fields: CommonFields {
                    group_id: &group,
                    protocol_types: ["QUIC"],
                    time_format: "relative_to_epoch",
                    reference_time: ReferenceTime {
                        clock_type: "system",
                        epoch: format_ts(ts_ns),
                    },
                },
                vantage_point: VantagePoint {
                    name: vantage,
                    kind: "network",
                    flow: if client_flow { "client" } else { "server" },
                },
                event_schemas: [EVENT_SCHEMA],
            },
        };
        let mut bytes = Vec::new();
        put(&mut bytes, &header).map_err(|error| QlogError::Write {
            path: self.dir.join(&name),
            error,
        })?;
        self.write_raw(key, &bytes)
    }

    /// Writes one encoded record to the file of `key`, opening it (and closing the least
    /// recently written one) as needed.
    fn write_raw(&mut self, key: (u64, Host), record: &[u8]) -> Result<(), QlogError> {
        let needs_open = self.traces.get(&key).is_some_and(|t| t.out.is_none());
        if needs_open && self.open >= MAX_OPEN {
            self.close_least_recent()?;
        }
        let Some(t) = self.traces.get_mut(&key) else {
            return Ok(());
        };
        let fail = |path: &Path, error| QlogError::Write {
            path: path.to_path_buf(),
            error,
        };
        if t.out.is_none() {
            // The first open creates the file; later ones (after a close) append to it.
            let file = if t.created {
                OpenOptions::new().append(true).open(&t.path)
            } else {
                File::create(&t.path)
            }
            .map_err(|e| fail(&t.path, e))?;
            t.created = true;
            t.out = Some(BufWriter::new(file));
            self.open += 1;
        }
        let Some(out) = t.out.as_mut() else {
            return Ok(());
        };
        out.write_all(record).map_err(|e| fail(&t.path, e))
    }

    fn close_least_recent(&mut self) -> Result<(), QlogError> {
        let Some(t) = self
            .traces
            .values_mut()
            .filter(|t| t.out.is_some())
            .min_by_key(|t| t.last_use)
        else {
            return Ok(());
        };
        if let Some(mut out) = t.out.take() {
            self.open -= 1;
            out.flush().map_err(|error| QlogError::Write {
                path: t.path.clone(),
                error,
            })?;
        }
        Ok(())
    }
}

/// One JSON text sequence record.
fn put<T: Serialize>(out: &mut impl Write, record: &T) -> io::Result<()> {
    out.write_all(&[RS])?;
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")
}

/// The first record of a file.
#[derive(Serialize)]
struct FileHeader<'a> {
    file_schema: &'static str,
    serialization_format: &'static str,
    title: String,
    trace: TraceHeader<'a>,
}

#[derive(Serialize)]
struct TraceHeader<'a> {
    title: String,
    common_fields: CommonFields<'a>,
    vantage_point: VantagePoint,
    event_schemas: [&'static str; 1],
}

#[derive(Serialize)]
struct CommonFields<'a> {
    group_id: &'a str,
    protocol_types: [&'static str; 1],
    time_format: &'static str,
    reference_time: ReferenceTime,
}

/// Event times are milliseconds after `epoch` on the capture's (system) clock.
#[derive(Serialize)]
struct ReferenceTime {
    clock_type: &'static str,
    epoch: String,
}

#[derive(Serialize)]
struct VantagePoint {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    flow: &'static str,
}

/// A `quic:packet_sent` or `quic:packet_received` event.
#[derive(Serialize)]
struct Event<'a> {
    time: f64,
    name: &'static str,
    path_id: u64,
    data: PacketData<'a>,
}

#[derive(Serialize)]
struct PacketData<'a> {
    header: Header<'a>,
    raw: Raw,
    datagram_id: u32,
    frames: Vec<QlogFrame<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frame_error: Option<&'a str>,
}

/// RawInfo: lengths in bytes (a packet's includes its header and AEAD tag).
#[derive(Serialize)]
struct Raw {
    #[serde(skip_serializing_if = "Option::is_none")]
    length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_length: Option<u64>,
}

impl Raw {
    fn payload(n: u64) -> Self {
        Self {
            length: None,
            payload_length: Some(n),
        }
    }
}

#[derive(Serialize)]
struct Header<'a> {
    packet_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    packet_number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scid: Option<&'a str>,
    dcid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    spin_bit: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_phase_bit: Option<bool>,
}

fn header(p: &PacketSummary) -> Header<'_> {
    Header {
        packet_type: match p.packet_type {
            PacketType::Initial => "initial",
            PacketType::ZeroRtt => "0RTT",
            PacketType::Handshake => "handshake",
            PacketType::Retry => "retry",
            PacketType::VersionNegotiation => "version_negotiation",
            PacketType::OneRtt => "1RTT",
            PacketType::UnknownVersion => "unknown",
        },
        packet_number: p.pn,
        // QuicVersion is a bare hexstring.
        version: p.version.as_deref().map(|v| v.trim_start_matches("0x")),
        length: p.length,
        scid: p.scid.as_deref(),
        dcid: &p.dcid,
        spin_bit: p.spin_bit,
        key_phase_bit: p.key_phase,
    }
}

/// An inclusive range of packet numbers: `[n]` for one packet, else `[smallest, largest]`.
#[derive(Serialize)]
#[serde(untagged)]
enum AckRange {
    One([u64; 1]),
    Many([u64; 2]),
}

/// ACK fields shared by ACK and PATH_ACK.
#[derive(Serialize)]
struct Ack {
    #[serde(skip_serializing_if = "Option::is_none")]
    path_id: Option<u64>,
    /// Milliseconds, scaled with the default ACK Delay exponent.
    ack_delay: f64,
    acked_ranges: Vec<AckRange>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ect0: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ect1: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ce: Option<u64>,
}

/// NEW_CONNECTION_ID fields (also PATH_NEW_CONNECTION_ID's, with a path ID).
#[derive(Serialize)]
struct NewCid<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    path_id: Option<u64>,
    sequence_number: u64,
    retire_prior_to: u64,
    connection_id_length: usize,
    connection_id: &'a str,
}

/// A frame as quic-events names it (`frame_type`); frames the draft does not define (the
/// multipath, ACK frequency, timestamp and reliable-reset extensions) take their own drafts'
/// names, as the `$QuicFrame` extension point allows.
#[derive(Serialize)]
#[serde(tag = "frame_type", rename_all = "snake_case")]
enum QlogFrame<'a> {
    Padding {
        payload_length: u64,
        raw: Raw,
    },
    Ping,
    Ack(Ack),
    ResetStream {
        stream_id: u64,
        error: &'static str,
        error_code: u64,
        final_size: u64,
    },
    StopSending {
        stream_id: u64,
        error: &'static str,
        error_code: u64,
    },
    Crypto {
        offset: u64,
        length: u64,
        raw: Raw,
    },
    NewToken {
        token: Token,
    },
    Stream {
        stream_id: u64,
        offset: u64,
        length: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        fin: Option<bool>,
        raw: Raw,
    },
    MaxData {
        maximum: u64,
    },
    MaxStreamData {
        stream_id: u64,
        maximum: u64,
    },
    MaxStreams {
        stream_type: &'static str,
        maximum: u64,
    },
    DataBlocked {
        limit: u64,
    },
    StreamDataBlocked {
        stream_id: u64,
        limit: u64,
    },
    StreamsBlocked {
        stream_type: &'static str,
        limit: u64,
    },
    NewConnectionId(NewCid<'a>),
    RetireConnectionId {
        sequence_number: u64,
    },
    PathChallenge {
        data: &'a str,
    },
    PathResponse {
        data: &'a str,
    },
    ConnectionClose {
        error_space: &'static str,
        error_code: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        trigger_frame_type: Option<u64>,
    },
    HandshakeDone,
    Datagram {
        length: u64,
        raw: Raw,
    },
    PathAck(Ack),
    PathNewConnectionId(NewCid<'a>),
    PathRetireConnectionId {
        path_id: u64,
        sequence_number: u64,
    },
    PathAbandon {
        path_id: u64,
        error_code: u64,
    },
    PathStatusAvailable {
        path_id: u64,
        path_status_sequence_number: u64,
    },
    PathStatusBackup {
        path_id: u64,
        path_status_sequence_number: u64,
    },
    MaxPathId {
        maximum_path_id: u64,
    },
    PathsBlocked {
        maximum_path_id: u64,
    },
    PathCidsBlocked {
        path_id: u64,
        next_sequence_number: u64,
    },
    AckFrequency {
        sequence_number: u64,
    },
    ImmediateAck,
    TimeStamp {
        timestamp: u64,
    },
    ResetStreamAt {
        stream_id: u64,
        error: &'static str,
        error_code: u64,
        final_size: u64,
        reliable_size: u64,
    },
    /// A frame name this export does not know (none today).
    Unknown {
        name: &'static str,
    },
}

/// A NEW_TOKEN frame's token: only its length is shown.
#[derive(Serialize)]
struct Token {
    raw: Raw,
}

fn stream_type(bidi: Option<bool>) -> &'static str {
    if bidi.unwrap_or(true) {
        "bidirectional"
    } else {
        "unidirectional"
    }
}

fn ack(f: &FrameSummary) -> Ack {
    let ranges = f.ack_ranges.as_deref().unwrap_or_default();
    let ecn = f.ecn;
    Ack {
        path_id: f.path_id,
        ack_delay: f.ack_delay.unwrap_or(0) as f64 * f64::from(1u32 << ACK_DELAY_EXPONENT) / 1000.0,
        // Lowest first, as acknowledged packet numbers are usually read.
        acked_ranges: ranges
            .iter()
            .rev()
            .map(|&[lo, hi]| {
                if lo == hi {
                    AckRange::One([lo])
                } else {
                    AckRange::Many([lo, hi])
                }
            })
            .collect(),
        ect0: ecn.map(|e| e.ect0),
        ect1: ecn.map(|e| e.ect1),
        ce: ecn.map(|e| e.ce),
    }
}

fn new_cid(f: &FrameSummary) -> NewCid<'_> {
    let cid = f.cid.as_deref().unwrap_or_default();
    NewCid {
        path_id: f.path_id,
        sequence_number: f.seq.unwrap_or(0),
        retire_prior_to: f.retire_prior_to.unwrap_or(0),
        connection_id_length: cid.len() / 2,
        connection_id: cid,
    }
}

/// The qlog form of a frame summary (the summary holds each field its frame type has).
fn frame(f: &FrameSummary) -> QlogFrame<'_> {
    let n = |v: Option<u64>| v.unwrap_or(0);
    let stream_id = n(f.stream_id);
    let error_code = n(f.error_code);
    let path_id = n(f.path_id);
    match f.frame_type {
        "padding" => QlogFrame::Padding {
            payload_length: n(f.length),
            raw: Raw {
                length: f.length,
                payload_length: f.length,
            },
        },
        "ping" => QlogFrame::Ping,
        "ack" => QlogFrame::Ack(ack(f)),
        "path_ack" => QlogFrame::PathAck(ack(f)),
        "reset_stream" => QlogFrame::ResetStream {
            stream_id,
            error: "unknown",
            error_code,
            final_size: n(f.value),
        },
        "stop_sending" => QlogFrame::StopSending {
            stream_id,
            error: "unknown",
            error_code,
        },
        "crypto" => QlogFrame::Crypto {
            offset: n(f.offset),
            length: n(f.length),
            raw: Raw::payload(n(f.length)),
        },
        "new_token" => QlogFrame::NewToken {
            token: Token {
                raw: Raw {
                    length: f.length,
                    payload_length: None,
                },
            },
        },
        "stream" => QlogFrame::Stream {
            stream_id,
            offset: n(f.offset),
            length: n(f.length),
            // Set only when true (quic-events).
            fin: f.fin.filter(|&fin| fin),
            raw: Raw::payload(n(f.length)),
        },
        "max_data" => QlogFrame::MaxData {
            maximum: n(f.value),
        },
        "max_stream_data" => QlogFrame::MaxStreamData {
            stream_id,
            maximum: n(f.value),
        },
        "max_streams" => QlogFrame::MaxStreams {
            stream_type: stream_type(f.bidi),
            maximum: n(f.value),
        },
        "data_blocked" => QlogFrame::DataBlocked { limit: n(f.value) },
        "stream_data_blocked" => QlogFrame::StreamDataBlocked {
            stream_id,
            limit: n(f.value),
        },
        "streams_blocked" => QlogFrame::StreamsBlocked {
            stream_type: stream_type(f.bidi),
            limit: n(f.value),
        },
        "new_connection_id" => QlogFrame::NewConnectionId(new_cid(f)),
        "path_new_connection_id" => QlogFrame::PathNewConnectionId(new_cid(f)),
        "retire_connection_id" => QlogFrame::RetireConnectionId {
            sequence_number: n(f.seq),
        },
        "path_retire_connection_id" => QlogFrame::PathRetireConnectionId {
            path_id,
            sequence_number: n(f.seq),
        },
        "path_challenge" => QlogFrame::PathChallenge {
            data: f.cid.as_deref().unwrap_or_default(),
        },
        "path_response" => QlogFrame::PathResponse {
            data: f.cid.as_deref().unwrap_or_default(),
        },
        "connection_close" => QlogFrame::ConnectionClose {
            error_space: if f.application == Some(true) {
                "application"
            } else {
                "transport"
            },
            error_code,
            reason: f.reason.as_deref(),
            trigger_frame_type: f.value,
        },
        "handshake_done" => QlogFrame::HandshakeDone,
        "datagram" => QlogFrame::Datagram {
            length: n(f.length),
            raw: Raw::payload(n(f.length)),
        },
        "path_abandon" => QlogFrame::PathAbandon {
            path_id,
            error_code,
        },
        "path_status" if f.available == Some(false) => QlogFrame::PathStatusBackup {
            path_id,
            path_status_sequence_number: n(f.seq),
        },
        "path_status" => QlogFrame::PathStatusAvailable {
            path_id,
            path_status_sequence_number: n(f.seq),
        },
        "max_path_id" => QlogFrame::MaxPathId {
            maximum_path_id: n(f.value),
        },
        "paths_blocked" => QlogFrame::PathsBlocked {
            maximum_path_id: n(f.value),
        },
        "path_cids_blocked" => QlogFrame::PathCidsBlocked {
            path_id,
            next_sequence_number: n(f.seq),
        },
        "ack_frequency" => QlogFrame::AckFrequency {
            sequence_number: n(f.seq),
        },
        "immediate_ack" => QlogFrame::ImmediateAck,
        "time_stamp" => QlogFrame::TimeStamp {
            timestamp: n(f.value),
        },
        "reset_stream_at" => QlogFrame::ResetStreamAt {
            stream_id,
            error: "unknown",
            error_code,
            final_size: n(f.value),
            reliable_size: n(f.length),
        },
        name => QlogFrame::Unknown { name },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dissect::DecodedPacket;
    use tboxscope_decode::quic::{Frame, Frames};

    fn packet(conn: u64, pn: u64, ts_ns: u64) -> DecodedPacket {
        DecodedPacket {
            ts_ns,
            src: "10.0.0.1:50000".parse().unwrap(),
            dst: "10.0.0.2:443".parse().unwrap(),
            ttl: 64,
            decoded: Decoded::QuicPacket(Box::new(PacketSummary {
                packet_type: PacketType::OneRtt,
                version: None,
                pn: Some(pn),
                dcid: format!("{conn:016x}"),
                scid: None,
                length: None,
                size: 40,
                spin_bit: Some(false),
                key_phase: Some(false),
                path_id: Some(0),
                ack_space: None,
                connection: Some(conn),
                from_client: Some(true),
                decrypted: true,
                undecrypted_reason: None,
                frames: vec![FrameSummary::from_frame(&Frame::Ping)],
                frame_error: None,
            })),
            app_msg_id: None,
            content_hash: None,
            stream_heads: Vec::new(),
            tcp_messages: Vec::new(),
        }
    }

    #[test]
    fn more_connections_than_open_files_each_get_a_whole_file() {
        let dir = std::env::temp_dir().join(format!("tbx-qlog-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut export = QlogExport::new(&dir, HashMap::new(), "t".into()).unwrap();
        let conns = MAX_OPEN as u64 + 6;
        let paths = ["eth0".to_owned()];
        // Round robin: every connection's file is closed and reopened between its packets.
        for pn in 0..3 {
            for conn in 0..conns {
                let p = packet(conn, pn, 1_000_000_000 * pn + conn);
                let r = Record {
                    file: "f",
                    frame: pn * conns + conn + 1,
                    path: "eth0",
                    path_index: 0,
                    paths: &paths,
                    data: &[],
                    wire_len: 0,
                    packet: &p,
                };
                export.record(&r).unwrap();
            }
        }
        let stats = export.finish().unwrap();
        assert_eq!((stats.files, stats.packet_events), (conns, 3 * conns));
        for conn in 0..conns {
            let text = std::fs::read(dir.join(format!("{conn:016x}_capture.sqlog"))).unwrap();
            let records: Vec<serde_json::Value> = text
                .split(|&b| b == RS)
                .skip(1)
                .map(|r| serde_json::from_slice(r).unwrap())
                .collect();
            assert_eq!(records.len(), 4, "connection {conn}");
            assert_eq!(records[0]["file_schema"], FILE_SCHEMA);
            let pns: Vec<u64> = records[1..]
                .iter()
                .map(|e| e["data"]["header"]["packet_number"].as_u64().unwrap())
                .collect();
            assert_eq!(pns, [0, 1, 2]);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn json(f: &Frame<'_>) -> String {
        let s = FrameSummary::from_frame(f);
        serde_json::to_string(&frame(&s)).unwrap_or_default()
    }

    #[test]
    fn frames_take_quic_events_names_and_fields() {
        assert_eq!(json(&Frame::Ping), r#"{"frame_type":"ping"}"#);
        assert_eq!(
            json(&Frame::Stream {
                stream_id: 4,
                offset: 10,
                has_offset: true,
                has_length: true,
                fin: false,
                data: b"abc",
            }),
            r#"{"frame_type":"stream","stream_id":4,"offset":10,"length":3,"raw":{"payload_length":3}}"#
        );
        assert_eq!(
            json(&Frame::MaxStreams {
                bidi: false,
                max: 7
            }),
            r#"{"frame_type":"max_streams","stream_type":"unidirectional","maximum":7}"#
        );
        assert_eq!(
            json(&Frame::Padding { len: 5 }),
            r#"{"frame_type":"padding","payload_length":5,"raw":{"length":5,"payload_length":5}}"#
        );
        // ACK: largest 9, delay 125 (1 ms at the default exponent), one gap: 8-9 and 5.
        let wire = [0x02, 9, 0x40, 125, 1, 1, 1, 0];
        let Some(Ok(ack)) = Frames::new(&wire).next() else {
            panic!("ack did not parse");
        };
        assert_eq!(
            json(&ack),
            r#"{"frame_type":"ack","ack_delay":1.0,"acked_ranges":[[5],[8,9]]}"#
        );
    }
}
