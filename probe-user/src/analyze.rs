//! Offline analysis driver: capture files → [`Dissector`] → records tagged with file, frame and
//! path. Shared by `tboxscope analyze`, the tests and the throughput benchmark.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::dissect::{Decoded, DecodedPacket, DissectConfig, DissectStats, Dissector, UnitSink};
use crate::output::{JsonLinesWriter, OutputError};
use crate::source::pcap::{CaptureFile, FileError, FileReading, Format, SECRETS_TLS_KEY_LOG};
use tboxscope_decode::net::{LinkType, TcpSegment};

/// One decoded unit with where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The file, as given.
    pub file: &'a str,
    /// 1-based frame number in that file (as tshark counts).
    pub frame: u64,
    /// The path label.
    pub path: &'a str,
    /// Where `path` is in `paths` (the same label keeps its place for the whole run).
    pub path_index: usize,
    /// Every path label known so far: each file's interfaces as read up to its next packet
    /// (with several files, all of them before the first record).
    pub paths: &'a [String],
    /// The frame's captured bytes (link header first).
    pub data: &'a [u8],
    /// The frame's length on the wire (more than `data` when the capture's snap length cut it).
    pub wire_len: u32,
    /// The decoded content.
    pub packet: &'a DecodedPacket,
}

/// What one file held.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileSummary {
    /// The file, as given.
    pub file: String,
    /// Container format (absent if the file could not be opened).
    pub format: Option<Format>,
    /// Frames read.
    pub frames: u64,
    /// Path labels of its interfaces.
    pub paths: Vec<String>,
    /// KCP segments decoded.
    pub kcp_segments: u64,
    /// QUIC packets decoded.
    pub quic_packets: u64,
    /// UDP datagrams no decoder recognised.
    pub other_udp: u64,
    /// The error that stopped reading the file, if any (file, offset, why).
    pub error: Option<String>,
}

/// Path labels of capture files' interfaces: an interface's own label, qualified with its
/// file's name when another file already has an interface of that label.
#[derive(Debug, Clone, Default)]
pub struct PathLabels {
    /// Labels of all paths so far (index = path id).
    paths: Vec<String>,
    /// The file number that claimed each label (to tell two files' same-named interfaces apart).
    path_files: Vec<usize>,
}

impl PathLabels {
    /// All labels, by path id.
    pub fn all(&self) -> &[String] {
        &self.paths
    }

    /// The path id for interface `label` of file number `file_no` (file name `file_name`): the
    /// label itself unless another file already uses it, then `file_name:label`.
    pub fn id_for(&mut self, file_no: usize, file_name: &str, label: &str) -> usize {
        if let Some(i) = self.paths.iter().position(|p| p == label) {
            if self.path_files[i] == file_no {
                return i;
            }
            let qualified = format!("{file_name}:{label}");
            if let Some(j) = self.paths.iter().position(|p| *p == qualified) {
                return j;
            }
            self.paths.push(qualified);
        } else {
            self.paths.push(label.to_owned());
        }
        self.path_files.push(file_no);
        self.paths.len() - 1
    }
}

/// The name a file's interfaces are qualified with in [`PathLabels`]: its file name.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Runs files through one dissector, assigning path labels.
pub struct Analyzer {
    dissector: Dissector,
    /// Labels of all paths so far.
    labels: PathLabels,
    files: Vec<FileSummary>,
    warnings: Vec<String>,
    reading: FileReading,
    /// Interfaces of a link type not decoded, with their frames (named in warnings).
    unsupported: Vec<UnsupportedLink>,
    /// Time of the last frame captured on each path (by path id).
    path_last_ns: Vec<u64>,
}

/// An interface whose link type is not decoded, and how many frames it had.
#[derive(Debug, Clone)]
struct UnsupportedLink {
    file: String,
    label: String,
    linktype: u32,
    path_id: usize,
    frames: u64,
}

impl Analyzer {
    /// A fresh analysis.
    pub fn new(config: DissectConfig) -> Self {
        Self {
            dissector: Dissector::new(config),
            labels: PathLabels::default(),
            files: Vec::new(),
            warnings: Vec::new(),
            reading: FileReading::Auto,
            unsupported: Vec::new(),
            path_last_ns: Vec::new(),
        }
    }

    /// Each path's label with the time of the last frame its capture holds: where its capture
    /// ended, which no outage on it may outlast.
    pub fn capture_ends(&self) -> Vec<(&str, u64)> {
        self.labels
            .all()
            .iter()
            .zip(&self.path_last_ns)
            .filter(|(_, &t)| t > 0)
            .map(|(l, &t)| (l.as_str(), t))
            .collect()
    }

    fn note_frame(&mut self, path_id: usize, ts_ns: u64) {
        if self.path_last_ns.len() <= path_id {
            self.path_last_ns.resize(path_id + 1, 0);
        }
        if let Some(t) = self.path_last_ns.get_mut(path_id) {
            *t = (*t).max(ts_ns);
        }
    }

    /// Reads the files as `reading` says (default [`FileReading::Auto`]).
    pub fn set_file_reading(&mut self, reading: FileReading) {
        self.reading = reading;
    }

    /// The dissector (for its counters).
    pub fn dissector(&self) -> &Dissector {
        &self.dissector
    }

    /// The dissector, to give it keys.
    pub fn dissector_mut(&mut self) -> &mut Dissector {
        &mut self.dissector
    }

    /// Frame-level counters over all files.
    pub fn stats(&self) -> &DissectStats {
        self.dissector.stats()
    }

    /// Summaries of the files run so far.
    pub fn files(&self) -> &[FileSummary] {
        &self.files
    }

    /// All path labels.
    pub fn paths(&self) -> &[String] {
        self.labels.all()
    }

    /// Decodes every packet of `path`, calling `emit` for each decoded unit. A file that cannot
    /// be read (or breaks half-way) is recorded in its summary and returned as the error; what
    /// was decoded before the break has been emitted.
    pub fn run_file<E>(
        &mut self,
        path: &Path,
        emit: &mut dyn FnMut(Record<'_>) -> Result<(), E>,
    ) -> Result<Result<(), FileError>, E> {
        self.run_file_to(path, &mut EachRecord(emit))
    }

    /// [`Analyzer::run_file`] handing what it decodes to `sink`.
    pub fn run_file_to<E>(
        &mut self,
        path: &Path,
        emit: &mut dyn RecordSink<E>,
    ) -> Result<Result<(), FileError>, E> {
        let file_no = self.files.len();
        let name = path.display().to_string();
        self.files.push(FileSummary {
            file: name.clone(),
            ..FileSummary::default()
        });
        let mut reader = match CaptureFile::open_with(path, self.reading) {
            Ok(r) => r,
            Err(e) => {
                self.files[file_no].error = Some(e.to_string());
                return Ok(Err(e));
            }
        };
        self.files[file_no].format = Some(reader.format());
        let file_name = file_name(path);
        // Interface index in the file → (path id, link type); filled as interfaces appear.
        let mut iface_paths: Vec<(usize, Option<LinkType>)> = Vec::new();
        let mut summary = FileSummary {
            file: name.clone(),
            format: Some(reader.format()),
            ..FileSummary::default()
        };
        let before = self.dissector.stats().clone();
        let mut secrets_loaded = 0usize;
        let result = loop {
            let packet = match reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            };
            let (frame, iface, ts_ns) = (packet.frame, packet.interface, packet.ts_ns);
            let wire_len = packet.orig_len;
            if iface >= iface_paths.len() || packet.secrets_changed {
                // New interfaces and secrets only appear between packets; the reader is
                // borrowed by this frame, so it is copied (once per interface or secrets block).
                let secrets_changed = packet.secrets_changed;
                let data = packet.data.to_vec();
                if secrets_changed {
                    self.load_secrets(&reader, &mut secrets_loaded, &name);
                }
                self.register_interfaces(
                    file_no,
                    &file_name,
                    &reader,
                    &mut iface_paths,
                    &mut summary,
                );
                let (path_id, link) = iface_paths.get(iface).copied().unwrap_or((0, None));
                self.note_frame(path_id, ts_ns);
                if link.is_none() {
                    self.count_unsupported(path_id);
                }
                let at = FrameAt {
                    file: &name,
                    frame,
                    path: &self.labels.all()[path_id],
                    path_index: path_id,
                    paths: self.labels.all(),
                    link,
                    ts_ns,
                    orig_len: wire_len,
                    data: &data,
                };
                dissect_and_emit(&mut self.dissector, &at, emit)?;
            } else {
                let (path_id, link) = iface_paths[iface];
                self.note_frame(path_id, ts_ns);
                if link.is_none() {
                    self.count_unsupported(path_id);
                }
                let at = FrameAt {
                    file: &name,
                    frame,
                    path: &self.labels.all()[path_id],
                    path_index: path_id,
                    paths: self.labels.all(),
                    link,
                    ts_ns,
                    orig_len: wire_len,
                    data: packet.data,
                };
                dissect_and_emit(&mut self.dissector, &at, emit)?;
            }
        };
        summary.frames = reader.frames();
        let after = self.dissector.stats();
        summary.kcp_segments = after.kcp_segments - before.kcp_segments;
        summary.other_udp = after.other_udp - before.other_udp;
        summary.quic_packets = after.quic_packets - before.quic_packets;
        if summary.paths.is_empty() {
            summary.paths = reader
                .interfaces()
                .iter()
                .map(|i| i.label.clone())
                .collect();
        }
        if let Err(e) = &result {
            summary.error = Some(e.to_string());
        }
        self.files[file_no] = summary;
        self.warn_unsupported();
        Ok(result)
    }
}

impl Analyzer {
    /// Gives the dissector the TLS key logs among the file's secrets blocks not loaded yet; a bad
    /// block is recorded as a warning on the file (decoding goes on without it).
    fn load_secrets(&mut self, reader: &CaptureFile, loaded: &mut usize, name: &str) {
        for s in reader.secrets().iter().skip(*loaded) {
            if s.kind != SECRETS_TLS_KEY_LOG {
                continue;
            }
            let source = format!("{name}: secrets block at offset {}", s.offset);
            if let Err(e) = self.dissector.add_keylog_text(&s.data, &source) {
                self.warnings.push(e.to_string());
            }
        }
        *loaded = reader.secrets().len();
    }

    fn count_unsupported(&mut self, path_id: usize) {
        count_unsupported(&mut self.unsupported, path_id);
    }

    /// Names each interface of a link type not decoded that had frames, in a warning.
    fn warn_unsupported(&mut self) {
        for u in self.unsupported.drain(..).filter(|u| u.frames > 0) {
            self.warnings.push(format!(
                "{}: capture {} has link type {}, which tboxscope does not decode (it decodes \
                 {}): its {} {} not decoded",
                u.file,
                u.label,
                u.linktype,
                LinkType::SUPPORTED,
                u.frames,
                if u.frames == 1 {
                    "frame is"
                } else {
                    "frames are"
                }
            ));
        }
    }

    /// Problems that did not stop the analysis (unusable embedded secrets, captures of a link
    /// type that is not decoded).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Gives path ids to the interfaces the reader has announced since the last call.
    fn register_interfaces(
        &mut self,
        file_no: usize,
        file_name: &str,
        reader: &CaptureFile,
        iface_paths: &mut Vec<(usize, Option<LinkType>)>,
        summary: &mut FileSummary,
    ) {
        for i in iface_paths.len()..reader.interfaces().len() {
            let iface = &reader.interfaces()[i];
            let (label, link) = (iface.label.clone(), iface.link);
            let id = self.labels.id_for(file_no, file_name, &label);
            if link.is_none() {
                self.unsupported.push(UnsupportedLink {
                    file: file_name.to_owned(),
                    label: label.clone(),
                    linktype: iface.linktype,
                    path_id: id,
                    frames: 0,
                });
            }
            iface_paths.push((id, link));
            let label = &self.labels.all()[id];
            if !summary.paths.contains(label) {
                summary.paths.push(label.clone());
            }
        }
    }

    /// Decodes several files as one capture: their packets are handed to `emit` in timestamp
    /// order across files (each file stays in its own order), so that captures of two paths,
    /// or of both ends of a path, reach the engine as the events happened. One file is read
    /// without copying ([`Analyzer::run_file`]); with several, each file's next packet is
    /// copied out of its reader while the others are compared. Returns the files' errors.
    pub fn run_files<E>(
        &mut self,
        paths: &[PathBuf],
        emit: &mut dyn FnMut(Record<'_>) -> Result<(), E>,
    ) -> Result<Vec<FileError>, E> {
        self.run_files_to(paths, &mut EachRecord(emit))
    }

    /// [`Analyzer::run_files`] handing what it decodes to `sink`.
    pub fn run_files_to<E>(
        &mut self,
        paths: &[PathBuf],
        emit: &mut dyn RecordSink<E>,
    ) -> Result<Vec<FileError>, E> {
        if let [only] = paths {
            return Ok(self.run_file_to(only, emit)?.err().into_iter().collect());
        }
        let mut errors = Vec::new();
        let mut open: Vec<MergedFile> = Vec::new();
        for path in paths {
            let file_no = self.files.len();
            let name = path.display().to_string();
            self.files.push(FileSummary {
                file: name.clone(),
                ..FileSummary::default()
            });
            match CaptureFile::open_with(path, self.reading) {
                Ok(reader) => {
                    self.files[file_no].format = Some(reader.format());
                    let file_name = file_name(path);
                    open.push(MergedFile {
                        file_no,
                        name,
                        file_name,
                        reader,
                        iface_paths: Vec::new(),
                        secrets_loaded: 0,
                        pending: None,
                        data: Vec::new(),
                    });
                }
                Err(e) => {
                    self.files[file_no].error = Some(e.to_string());
                    errors.push(e);
                }
            }
        }
        for f in &mut open {
            if let Err(e) = self.refill(f) {
                errors.push(e);
            }
        }
        // Each file's first and last packet time, to tell captures that never overlap.
        let mut spans: Vec<Option<(u64, u64)>> = vec![None; open.len()];
        while let Some(i) = open
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.pending.map(|p| (p.ts_ns, i)))
            .min()
            .map(|(_, i)| i)
        {
            let f = &mut open[i];
            if let Some(p) = f.pending.take() {
                let span = spans[i].get_or_insert((p.ts_ns, p.ts_ns));
                span.1 = span.1.max(p.ts_ns);
                let (path_id, link) = f.iface_paths.get(p.interface).copied().unwrap_or((0, None));
                self.note_frame(path_id, p.ts_ns);
                if link.is_none() {
                    count_unsupported(&mut self.unsupported, path_id);
                }
                let before = self.dissector.stats().clone();
                let at = FrameAt {
                    file: &f.name,
                    frame: p.frame,
                    path: &self.labels.all()[path_id],
                    path_index: path_id,
                    paths: self.labels.all(),
                    link,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                    data: &f.data,
                };
                let emitted = dissect_and_emit(&mut self.dissector, &at, emit);
                let after = self.dissector.stats();
                let summary = &mut self.files[f.file_no];
                summary.frames += 1;
                summary.kcp_segments += after.kcp_segments - before.kcp_segments;
                summary.quic_packets += after.quic_packets - before.quic_packets;
                summary.other_udp += after.other_udp - before.other_udp;
                emitted?;
            }
            if let Err(e) = self.refill(&mut open[i]) {
                errors.push(e);
            }
        }
        let named: Vec<(&str, (u64, u64))> = open
            .iter()
            .zip(&spans)
            .filter_map(|(f, s)| s.map(|s| (f.name.as_str(), s)))
            .collect();
        if let Some(w) = disjoint_captures(&named) {
            self.warnings.push(w);
        }
        self.warn_unsupported();
        Ok(errors)
    }

    /// Copies `f`'s next packet out of its reader, registering interfaces and secrets that
    /// appeared before it. At the end of the file (or on an error) nothing is pending.
    fn refill(&mut self, f: &mut MergedFile) -> Result<(), FileError> {
        let next = match f.reader.next_packet() {
            Ok(Some(p)) => {
                f.data.clear();
                f.data.extend_from_slice(p.data);
                Some((
                    PendingPacket {
                        frame: p.frame,
                        interface: p.interface,
                        ts_ns: p.ts_ns,
                        orig_len: p.orig_len,
                    },
                    p.secrets_changed,
                ))
            }
            Ok(None) => None,
            Err(e) => {
                self.files[f.file_no].error = Some(e.to_string());
                return Err(e);
            }
        };
        let Some((pending, secrets_changed)) = next else {
            return Ok(());
        };
        if secrets_changed {
            self.load_secrets(&f.reader, &mut f.secrets_loaded, &f.name);
        }
        let mut summary = std::mem::take(&mut self.files[f.file_no]);
        self.register_interfaces(
            f.file_no,
            &f.file_name,
            &f.reader,
            &mut f.iface_paths,
            &mut summary,
        );
        self.files[f.file_no] = summary;
        f.pending = Some(pending);
        Ok(())
    }
}

/// Counts a frame of the interface of a link type not decoded that has path `path_id`.
fn count_unsupported(unsupported: &mut [UnsupportedLink], path_id: usize) {
    if let Some(u) = unsupported.iter_mut().find(|u| u.path_id == path_id) {
        u.frames += 1;
    }
}

/// A warning when captures (file, first and last packet time) fall into groups that never
/// overlap in time: they cannot be the paths, or the two ends, of one capture, and figures
/// across them (the duration, latency between them, outages) mean nothing. Captures taken one
/// after the other are analysed each on its own.
pub fn disjoint_captures(spans: &[(&str, (u64, u64))]) -> Option<String> {
    let mut sorted: Vec<&(&str, (u64, u64))> = spans.iter().collect();
    sorted.sort_by_key(|(_, (start, _))| *start);
    let (first, rest) = sorted.split_first()?;
    let mut end = first.1 .1;
    let mut earlier = first.0;
    for (name, (start, last)) in rest {
        if *start > end {
            let gap_s = (start - end) as f64 / 1e9;
            let gap = if gap_s >= 2.0 * 86_400.0 {
                format!("{:.1} days", gap_s / 86_400.0)
            } else if gap_s >= 2.0 * 3600.0 {
                format!("{:.1} hours", gap_s / 3600.0)
            } else {
                format!("{gap_s:.1} s")
            };
            return Some(format!(
                "the captures do not overlap in time: {name} starts at {} and {earlier} ends at \
                 {}, {gap} before; they cannot be paths of one capture, and figures across \
                 them (duration, latency, copies, outages) mean nothing: analyze each alone",
                crate::output::jsonl::format_ts(*start),
                crate::output::jsonl::format_ts(end),
            ));
        }
        if *last > end {
            end = *last;
            earlier = name;
        }
    }
    None
}

/// A file being read by [`Analyzer::run_files`], with its next packet copied out.
struct MergedFile {
    file_no: usize,
    name: String,
    file_name: String,
    reader: CaptureFile,
    iface_paths: Vec<(usize, Option<LinkType>)>,
    secrets_loaded: usize,
    pending: Option<PendingPacket>,
    /// The pending packet's bytes.
    data: Vec<u8>,
}

/// Where a copied-out packet came from.
#[derive(Clone, Copy)]
struct PendingPacket {
    frame: u64,
    interface: usize,
    ts_ns: u64,
    orig_len: u32,
}

/// The JSON line of one record: `frame`, `file`, `path`, `src`, `dst`, then the decoded fields.
#[derive(Serialize)]
struct PacketLine<'a, T: Serialize> {
    frame: u64,
    file: &'a str,
    path: &'a str,
    src: SocketAddr,
    dst: SocketAddr,
    #[serde(flatten)]
    fields: &'a T,
}

/// Where a frame was read, and its bytes: what every record of the frame shares.
pub struct FrameAt<'a> {
    /// The file, as given.
    pub file: &'a str,
    /// 1-based frame number in that file.
    pub frame: u64,
    /// The path label.
    pub path: &'a str,
    /// Where `path` is in `paths`.
    pub path_index: usize,
    /// Every path label known so far.
    pub paths: &'a [String],
    /// The link layer (`None`: unsupported).
    pub link: Option<LinkType>,
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The frame's length on the wire as the capture file gives it.
    pub orig_len: u32,
    /// The captured bytes (link header first).
    pub data: &'a [u8],
}

impl FrameAt<'_> {
    /// The frame's length on the wire: at least what was captured.
    pub fn wire_len(&self) -> u32 {
        self.orig_len
            .max(u32::try_from(self.data.len()).unwrap_or(u32::MAX))
    }
}

/// Decodes one frame and hands each decoded unit to `emit` as a [`Record`]; after the first
/// error of `emit`, the frame's other units are dropped and that error is returned.
fn dissect_and_emit<E>(
    dissector: &mut Dissector,
    at: &FrameAt<'_>,
    emit: &mut dyn RecordSink<E>,
) -> Result<(), E> {
    let mut units = Emitting {
        at,
        emit,
        failed: None,
    };
    dissector.dissect_each(at.link, at.path, at.data, at.ts_ns, &mut units);
    units.failed.map_or(Ok(()), Err)
}

/// Where [`Analyzer::run_files_to`] hands what it decodes.
pub trait RecordSink<E> {
    /// One decoded unit; its first error stops decoding.
    fn record(&mut self, r: Record<'_>) -> Result<(), E>;

    /// A TCP segment of a stream not cut into messages, read from frame `at`, offered before
    /// its [`Record`] is made: `None` to have the record made and handed to
    /// [`RecordSink::record`], else what taking it as it is gave.
    #[inline]
    fn tcp_segment(&mut self, at: &FrameAt<'_>, segment: &TcpSegment<'_>) -> Option<Result<(), E>> {
        let _ = (at, segment);
        None
    }
}

/// A closure as a [`RecordSink`] (every unit as a [`Record`]).
struct EachRecord<'f, E>(&'f mut dyn FnMut(Record<'_>) -> Result<(), E>);

impl<E> RecordSink<E> for EachRecord<'_, E> {
    fn record(&mut self, r: Record<'_>) -> Result<(), E> {
        (self.0)(r)
    }
}

/// One frame's units handed on as records: after the first error, the others are dropped.
struct Emitting<'a, 'e, E> {
    at: &'a FrameAt<'a>,
    emit: &'e mut dyn RecordSink<E>,
    failed: Option<E>,
}

impl<E> UnitSink for &mut Emitting<'_, '_, E> {
    fn unit(&mut self, packet: DecodedPacket) {
        if self.failed.is_none() {
            let at = self.at;
            self.failed = self
                .emit
                .record(Record {
                    file: at.file,
                    frame: at.frame,
                    path: at.path,
                    path_index: at.path_index,
                    paths: at.paths,
                    data: at.data,
                    wire_len: at.wire_len(),
                    packet: &packet,
                })
                .err();
        }
    }

    #[inline]
    fn tcp_segment(&mut self, _ts_ns: u64, segment: &TcpSegment<'_>) -> bool {
        if self.failed.is_some() {
            return true;
        }
        match self.emit.tcp_segment(self.at, segment) {
            Some(result) => {
                self.failed = result.err();
                true
            }
            None => false,
        }
    }
}

/// Writes one record as a JSON line (`kcp_segment`, `quic_packet`, `udp_datagram`,
/// `tcp_segment`, `path_mtu`).
pub fn write_record<W: std::io::Write>(
    out: &mut JsonLinesWriter<W>,
    r: &Record<'_>,
) -> Result<(), OutputError> {
    let p = r.packet;
    let kind = p.decoded.record_type();
    match &p.decoded {
        Decoded::KcpSegment(f) => out.write(kind, p.ts_ns, &line(r, f)),
        Decoded::QuicPacket(f) => out.write(kind, p.ts_ns, &line(r, f.as_ref())),
        Decoded::UdpDatagram(f) => out.write(kind, p.ts_ns, &line(r, f)),
        Decoded::TcpSegment(f) => out.write(kind, p.ts_ns, &line(r, f)),
        Decoded::PathMtu(f) => out.write(kind, p.ts_ns, &line(r, f)),
    }
}

fn line<'a, T: Serialize>(r: &Record<'a>, fields: &'a T) -> PacketLine<'a, T> {
    PacketLine {
        frame: r.frame,
        file: r.file,
        path: r.path,
        src: r.packet.src,
        dst: r.packet.dst,
        fields,
    }
}

/// Paths of the files, for headers.
pub fn file_list(files: &[PathBuf]) -> Vec<String> {
    files.iter().map(|p| p.display().to_string()).collect()
}
