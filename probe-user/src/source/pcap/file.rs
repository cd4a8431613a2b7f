//! Offline capture files: classic `.pcap` (µs and ns, either byte order) and `.pcapng`
//! (sections, interfaces, EPB/SPB/OPB packets, Decryption Secrets Blocks), streamed through one
//! fixed buffer: the file is never loaded whole, and packets are handed out as borrowed slices.
//! A file that must come from disk is read ahead on a second thread ([`ReadAhead`]) so the
//! disk wait overlaps decoding; one already in the page cache is read on the decoding thread
//! (see [`FileReading`]).
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use tboxscope_decode::net::LinkType;

use super::readahead::{ReadAhead, HEADROOM};
/// Largest record or block accepted; bigger means a corrupt length field (tshark's packet limit
/// is 256 KiB; secrets blocks can be larger).
pub const MAX_RECORD: usize = 16 << 20;
/// pcapng Decryption Secrets Block type for a TLS key log (SSLKEYLOGFILE text).
pub const SECRETS_TLS_KEY_LOG: u32 = 0x544c_534b;

/// What is wrong with a capture file, always with the file's name and the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be opened.
    #[error("{name}: cannot open: {cause}")]
    Open {
        /// The file.
        name: String,
        /// Why.
        cause: io::Error,
    },
    /// Reading failed.
    #[error("{name}: read error at offset {offset}: {cause}")]
    Io {
        /// The file.
        name: String,
        /// Where reading stopped.
        offset: u64,
        /// Why.
        cause: io::Error,
    },
    /// The bytes are not a valid capture file at this point.
    #[error("{name}: offset {offset}: {why}")]
    Format {
        /// The file.
        name: String,
        /// Offset of the record or block at fault.
        offset: u64,
        /// What is wrong.
        why: FormatIssue,
    },
}

/// The ways a capture file can be malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatIssue {
    /// The first four bytes are neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (magic {0:#010x})")]
    UnknownMagic(u32),
    /// The file is shorter than the magic number.
    #[error("file too short to be a capture ({0} bytes)")]
    TooShort(usize),
    /// The file ends inside a header, record or block.
    #[error("truncated {what}: {needed} bytes needed, {available} present")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes the structure needs from its start.
        needed: usize,
        /// Bytes the file still had.
        available: usize,
    },
    /// A record or block longer than [`MAX_RECORD`].
    #[error("{what} of {len} bytes exceeds the {MAX_RECORD}-byte limit (corrupt length?)")]
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// Its announced length.
        len: u64,
    },
    /// A pcapng block length that is not a multiple of 4, too small, or does not match its copy
    /// at the block's end.
    #[error("pcapng block {block_type:#x}: bad block length {len}")]
    BadBlockLength {
        /// The block type.
        block_type: u32,
        /// The length found.
        len: u32,
    },
    /// A pcapng block whose body is shorter than its own fields say.
    #[error("pcapng block {block_type:#x}: {what}")]
    BadBlockBody {
        /// The block type.
        block_type: u32,
        /// What does not fit.
        what: &'static str,
    },
    /// The section header's byte-order magic is neither 0x1A2B3C4D nor swapped.
    #[error("pcapng section header: bad byte-order magic {0:#010x}")]
    BadByteOrder(u32),
    /// A major version this reader does not know.
    #[error("unsupported {format} version {major}.{minor}")]
    Version {
        /// pcap or pcapng.
        format: &'static str,
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// A packet names an interface that no Interface Description Block declared.
    #[error("packet on interface {0}, which this section does not declare")]
    UnknownInterface(u32),
    /// A block before the first section header.
    #[error("pcapng block {0:#x} before any section header")]
    NoSection(u32),
    /// The captured length exceeds the original length or the record.
    #[error("captured length {caplen} is larger than the {limit}-byte {of}")]
    CaplenTooLarge {
        /// Captured length.
        caplen: u32,
        /// The bound it exceeds.
        limit: u32,
        /// What the bound is.
        of: &'static str,
    },
}

/// The file's container format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Classic pcap, microsecond timestamps.
    PcapMicro,
    /// Classic pcap, nanosecond timestamps.
    PcapNano,
    /// pcapng.
    Pcapng,
}

/// The capture format a file starting with `magic` has (`None`: not a pcap or pcapng file).
pub fn format_of_magic(magic: [u8; 4]) -> Option<Format> {
    format_and_endian(magic).map(|(format, _)| format)
}

fn format_and_endian(magic: [u8; 4]) -> Option<(Format, Endian)> {
    // pcapng's section header type reads the same in both byte orders; its byte-order magic
    // comes later in the block.
    match u32::from_le_bytes(magic) {
        0xa1b2_c3d4 => Some((Format::PcapMicro, Endian::Little)),
        0xd4c3_b2a1 => Some((Format::PcapMicro, Endian::Big)),
        0xa1b2_3c4d => Some((Format::PcapNano, Endian::Little)),
        0x4d3c_b2a1 => Some((Format::PcapNano, Endian::Big)),
        0x0a0d_0d0a => Some((Format::Pcapng, Endian::Little)),
        _ => None,
    }
}

/// One capture interface of a file (for classic pcap: the only one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Interface {
    /// pcapng section number (0 for the first, and for classic pcap).
    pub section: u32,
    /// The interface id within its section.
    pub id: u32,
    /// The `LINKTYPE_*` number.
    pub linktype: u32,
    /// The link layer, if tboxscope decodes it.
    #[serde(skip)]
    pub link: Option<LinkType>,
    /// Name from `if_name`, if the file gives one.
    pub name: Option<String>,
    /// Snap length (0 = unlimited).
    pub snaplen: u32,
    /// The path label: `if_name`, else the file stem (suffixed `#id` past the first interface).
    pub label: String,
    /// Timestamp units: for 10^-n, `(false, n)`; for 2^-n, `(true, n)`.
    #[serde(skip)]
    tsresol: (bool, u8),
    /// `if_tsoffset` seconds.
    #[serde(skip)]
    tsoffset: i64,
}

/// One packet: borrowed from the reader's buffer until the next call.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// 1-based frame number in the file, as tshark counts.
    pub frame: u64,
    /// Index into [`CaptureReader::interfaces`].
    pub interface: usize,
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed `data.len()` when cut by the snap length).
    pub orig_len: u32,
    /// File offset of the record or block.
    pub offset: u64,
    /// True when Decryption Secrets Blocks were read since the previous packet (see
    /// [`CaptureReader::secrets`]): load them before decoding this packet.
    pub secrets_changed: bool,
    /// The captured bytes, starting with the link header.
    pub data: &'a [u8],
}

/// Secrets embedded in a pcapng Decryption Secrets Block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secrets {
    /// The secrets type ([`SECRETS_TLS_KEY_LOG`] for a TLS key log).
    pub kind: u32,
    /// The secrets as stored (key log text for TLS).
    pub data: Vec<u8>,
    /// File offset of the block.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        match self {
            Endian::Little => u16::from_le_bytes(v),
            Endian::Big => u16::from_be_bytes(v),
        }
    }
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            Endian::Little => u32::from_le_bytes(v),
            Endian::Big => u32::from_be_bytes(v),
        }
    }
}

/// Where a reader's bytes come from.
enum Input<R> {
    /// Any byte stream, read into the reader's own buffer.
    Stream(R),
    /// A file read ahead on another thread; its chunks become the buffer.
    Chunks(ReadAhead),
}

/// Streams packets from a pcap or pcapng byte stream.
pub struct CaptureReader<R: Read> {
    name: String,
    stem: String,
    input: Input<R>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`, modulo 2^64: a read-ahead chunk's headroom lies before offset 0
    /// (so `base` wraps), while `base + pos` is always the true offset.
    base: u64,
    eof: bool,
    format: Format,
    endian: Endian,
    frame: u64,
    interfaces: Vec<Interface>,
    /// Global interface index of each id of the current pcapng section.
    section_ifaces: Vec<usize>,
    section: u32,
    in_section: bool,
    last_ts: u64,
    secrets: Vec<Secrets>,
    fresh_secrets: bool,
}

/// A capture file on disk.
pub type CaptureFile = CaptureReader<File>;

/// How a capture file's bytes reach the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileReading {
    /// [`FileReading::SameThread`] when the file is already in the page cache (or small),
    /// [`FileReading::ReadAhead`] when it must come from disk.
    #[default]
    Auto,
    /// Large reads on the decoding thread: no hand-over between threads, one copy out of the
    /// page cache per byte.
    SameThread,
    /// A second thread reads ahead into fixed chunks ([`ReadAhead`]).
    ReadAhead,
}

/// Reads of this size on the decoding thread ([`FileReading::SameThread`]).
const SAME_THREAD_BUFFER: usize = 256 << 10;
/// Files up to this size are read on the decoding thread whatever their page-cache state.
const SMALL_FILE: u64 = 8 << 20;

impl FileReading {
    /// What [`FileReading::Auto`] chooses for `file`.
    fn resolve(self, file: &File) -> Self {
        match self {
            Self::Auto => {
                let len = file.metadata().map_or(0, |m| m.len());
                if len <= SMALL_FILE || page_cache_share(file, len).is_some_and(|s| s >= 0.9) {
                    Self::SameThread
                } else {
                    Self::ReadAhead
                }
            }
            other => other,
        }
    }
}

/// Files of more pages than `SHARE_WINDOWS * SHARE_WINDOW_PAGES` have their page-cache share
/// measured on this many windows spread evenly over the file (a full `mincore` of a 1 GB file
/// looks up 250 000 pages: milliseconds, a few % of decoding it)...
const SHARE_WINDOWS: usize = 256;
/// ...of this many pages each.
const SHARE_WINDOW_PAGES: usize = 8;

/// The share of the pages of `file` (`len` bytes) that are in the page cache (`mincore` on a
/// read-only mapping; sampled on large files); `None` when it cannot be told (empty file,
/// mapping refused).
fn page_cache_share(file: &File, len: u64) -> Option<f64> {
    use std::os::fd::AsRawFd;
    let len = usize::try_from(len).ok()?;
    if len == 0 {
        return None;
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    // SAFETY: a fresh shared read-only mapping of an open file; nothing reads through it (only
    // mincore looks at it) and it is unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let pages = len.div_ceil(page);
    let (windows, window) = if pages <= SHARE_WINDOWS * SHARE_WINDOW_PAGES {
        (1, pages)
    } else {
        (SHARE_WINDOWS, SHARE_WINDOW_PAGES)
    };
    let mut resident = vec![0u8; windows * window];
    let mut rc = 0;
    for (w, out) in resident.chunks_exact_mut(window).enumerate() {
        // The first window starts the file, the last one ends it.
        let first = if windows == 1 {
            0
        } else {
            w * (pages - window) / (windows - 1)
        };
        let bytes = (window * page).min(len - first * page);
        // SAFETY: `first * page + bytes <= len`: the range lies within the mapping, and `out`
        // has one byte for each of its `window` pages.
        rc = unsafe {
            libc::mincore(
                map.cast::<u8>().add(first * page).cast(),
                bytes,
                out.as_mut_ptr(),
            )
        };
        if rc != 0 {
            break;
        }
    }
    // SAFETY: `map`/`len` are the mapping created above, unmapped once.
    unsafe { libc::munmap(map, len) };
    if rc != 0 {
        return None;
    }
    let in_cache = resident.iter().filter(|b| **b & 1 == 1).count();
    Some(in_cache as f64 / resident.len() as f64)
}

impl CaptureReader<File> {
    /// Opens `path` and reads its file header ([`FileReading::Auto`]).
    pub fn open(path: &Path) -> Result<Self, FileError> {
        Self::open_with(path, FileReading::Auto)
    }

    /// [`CaptureReader::open`] with the file read as `reading` says.
    pub fn open_with(path: &Path, reading: FileReading) -> Result<Self, FileError> {
        let name = path.display().to_string();
        let open_err = |cause| FileError::Open {
            name: name.clone(),
            cause,
        };
        let file = File::open(path).map_err(open_err)?;
        let stem = stem_of(path);
        match reading.resolve(&file) {
            FileReading::ReadAhead => {
                let chunks = ReadAhead::new(file).map_err(open_err)?;
                Self::with_input(Input::Chunks(chunks), name, stem, 0)
            }
            _ => Self::with_input(Input::Stream(file), name, stem, SAME_THREAD_BUFFER),
        }
    }

    /// How this file is being read ([`FileReading::SameThread`] or [`FileReading::ReadAhead`]).
    pub fn reading(&self) -> FileReading {
        match self.input {
            Input::Stream(_) => FileReading::SameThread,
            Input::Chunks(_) => FileReading::ReadAhead,
        }
    }
}

/// The buffer's cursor: read position, end of the valid bytes, file offset of `buf[0]`, end of
/// input seen.
type Cursor<'a> = (&'a mut usize, &'a mut usize, &'a mut u64, &'a mut bool);

/// `fill` for a byte stream: moves the unread bytes to the front, then reads after them.
fn fill_stream<R: Read>(
    input: &mut R,
    buf: &mut Vec<u8>,
    (pos, end, base, eof): Cursor<'_>,
    n: usize,
) -> io::Result<()> {
    if *pos > 0 {
        buf.copy_within(*pos..*end, 0);
        *base += *pos as u64;
        *end -= *pos;
        *pos = 0;
    }
    if buf.len() < n {
        buf.resize(n.next_power_of_two(), 0);
    }
    while *end < n && !*eof {
        match input.read(&mut buf[*end..]) {
            Ok(0) => *eof = true,
            Ok(k) => *end += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `fill` for read-ahead chunks: the next chunk becomes the buffer, with the unread bytes of the
/// current one copied into its headroom (a record longer than the headroom is instead assembled
/// in the current buffer).
fn fill_chunks(
    input: &mut ReadAhead,
    buf: &mut Vec<u8>,
    (pos, end, base, eof): Cursor<'_>,
    n: usize,
) -> io::Result<()> {
    while *end - *pos < n && !*eof {
        let Some(mut chunk) = input.next_chunk()? else {
            *eof = true;
            break;
        };
        let left = *end - *pos;
        if left <= HEADROOM {
            let start = HEADROOM - left;
            chunk[start..HEADROOM].copy_from_slice(&buf[*pos..*end]);
            *base = base.wrapping_add(*pos as u64).wrapping_sub(start as u64);
            let spent = std::mem::replace(buf, chunk);
            input.recycle(spent);
            *pos = start;
        } else {
            buf.copy_within(*pos..*end, 0);
            *base = base.wrapping_add(*pos as u64);
            buf.truncate(left);
            *pos = 0;
            buf.extend_from_slice(&chunk[HEADROOM..]);
            input.recycle(chunk);
        }
        *end = buf.len();
    }
    Ok(())
}

fn stem_of(path: &Path) -> String {
    path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

impl<R: Read> CaptureReader<R> {
    /// Reads a capture from any byte stream; `name` is used in errors, `stem` as the default path
    /// label.
    pub fn new(input: R, name: &str, stem: &str) -> Result<Self, FileError> {
        Self::with_input(
            Input::Stream(input),
            name.to_owned(),
            stem.to_owned(),
            64 << 10,
        )
    }

    fn with_input(
        input: Input<R>,
        name: String,
        stem: String,
        capacity: usize,
    ) -> Result<Self, FileError> {
        let mut reader = Self {
            name,
            stem,
            input,
            buf: vec![0; capacity],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            format: Format::Pcapng,
            endian: Endian::Little,
            frame: 0,
            interfaces: Vec::new(),
            section_ifaces: Vec::new(),
            section: 0,
            in_section: false,
            last_ts: 0,
            secrets: Vec::new(),
            fresh_secrets: false,
        };
        reader.start()?;
        Ok(reader)
    }

    /// The name used in errors (the path for files).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The container format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Interfaces declared so far (grows as pcapng sections and IDBs are read).
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Frames read so far.
    pub fn frames(&self) -> u64 {
        self.frame
    }

    /// Every Decryption Secrets Block read so far.
    pub fn secrets(&self) -> &[Secrets] {
        &self.secrets
    }

    fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }

    fn format_err(&self, offset: u64, why: FormatIssue) -> FileError {
        FileError::Format {
            name: self.name.clone(),
            offset,
            why,
        }
    }

    /// Makes at least `n` bytes available at `pos`; false if the input ends first.
    fn fill(&mut self, n: usize) -> Result<bool, FileError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        let result = match &mut self.input {
            Input::Stream(input) => fill_stream(
                input,
                &mut self.buf,
                (&mut self.pos, &mut self.end, &mut self.base, &mut self.eof),
                n,
            ),
            Input::Chunks(input) => fill_chunks(
                input,
                &mut self.buf,
                (&mut self.pos, &mut self.end, &mut self.base, &mut self.eof),
                n,
            ),
        };
        result.map_err(|cause| FileError::Io {
            name: self.name.clone(),
            offset: self.base.wrapping_add(self.end as u64),
            cause,
        })?;
        Ok(self.end - self.pos >= n)
    }

    /// Like `fill`, but running out is a truncation error (unless nothing at all is left and
    /// `clean_eof` allows it, which returns false).
    #[inline]
    fn need(&mut self, n: usize, what: &'static str, clean_eof: bool) -> Result<bool, FileError> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        self.need_more(n, what, clean_eof)
    }

    /// [`CaptureReader::need`] when the buffer holds fewer than `n` bytes (once per buffer).
    #[cold]
    #[inline(never)]
    fn need_more(
        &mut self,
        n: usize,
        what: &'static str,
        clean_eof: bool,
    ) -> Result<bool, FileError> {
        if self.fill(n)? {
            return Ok(true);
        }
        let available = self.end - self.pos;
        if clean_eof && available == 0 {
            return Ok(false);
        }
        Err(self.format_err(
            self.offset(),
            FormatIssue::Truncated {
                what,
                needed: n,
                available,
            },
        ))
    }

    fn start(&mut self) -> Result<(), FileError> {
        if !self.fill(4)? {
            return Err(self.format_err(0, FormatIssue::TooShort(self.end)));
        }
        let b = &self.buf[self.pos..self.pos + 4];
        let magic = [b[0], b[1], b[2], b[3]];
        let Some((format, endian)) = format_and_endian(magic) else {
            let other = u32::from_le_bytes(magic);
            return Err(self.format_err(0, FormatIssue::UnknownMagic(other)));
        };
        self.format = format;
        self.endian = endian;
        if format == Format::Pcapng {
            return Ok(());
        }
        self.need(24, "pcap file header", false)?;
        let h = &self.buf[self.pos..self.pos + 24];
        let (major, minor) = (endian.u16(h, 4), endian.u16(h, 6));
        if major != 2 {
            return Err(self.format_err(
                0,
                FormatIssue::Version {
                    format: "pcap",
                    major,
                    minor,
                },
            ));
        }
        let snaplen = endian.u32(h, 16);
        // The upper bits carry the FCS length; the link type is the low 16 bits.
        let linktype = endian.u32(h, 20) & 0xffff;
        let nano = format == Format::PcapNano;
        self.interfaces.push(Interface {
            section: 0,
            id: 0,
            linktype,
            link: LinkType::from_linktype(linktype),
            name: None,
            snaplen,
            label: self.stem.clone(),
            tsresol: (false, if nano { 9 } else { 6 }),
            tsoffset: 0,
        });
        self.pos += 24;
        Ok(())
    }

    /// The next packet, `None` at the end of the file.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FileError> {
        match self.format {
            Format::PcapMicro | Format::PcapNano => self.next_pcap(),
            Format::Pcapng => self.next_pcapng(),
        }
    }

    fn next_pcap(&mut self) -> Result<Option<Packet<'_>>, FileError> {
        if !self.need(16, "pcap record header", true)? {
            return Ok(None);
        }
        let offset = self.offset();
        let e = self.endian;
        let h = &self.buf[self.pos..self.pos + 16];
        let (sec, frac, caplen, orig_len) = (e.u32(h, 0), e.u32(h, 4), e.u32(h, 8), e.u32(h, 12));
        if caplen as usize > MAX_RECORD {
            return Err(self.format_err(
                offset,
                FormatIssue::TooLarge {
                    what: "pcap record",
                    len: u64::from(caplen),
                },
            ));
        }
        let total = 16 + caplen as usize;
        self.need(total, "pcap record", false)?;
        let unit = if self.format == Format::PcapNano {
            1
        } else {
            1_000
        };
        let ts_ns = u64::from(sec)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(frac).saturating_mul(unit));
        self.frame += 1;
        let start = self.pos + 16;
        self.pos += total;
        Ok(Some(Packet {
            frame: self.frame,
            interface: 0,
            ts_ns,
            orig_len,
            offset,
            secrets_changed: false,
            data: &self.buf[start..start + caplen as usize],
        }))
    }

    fn next_pcapng(&mut self) -> Result<Option<Packet<'_>>, FileError> {
        loop {
            if !self.need(12, "pcapng block header", true)? {
                return Ok(None);
            }
            let offset = self.offset();
            let head = &self.buf[self.pos..self.pos + 12];
            let raw_type = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            if raw_type == 0x0a0d_0d0a {
                self.section_header(offset)?;
                continue;
            }
            if !self.in_section {
                return Err(self.format_err(offset, FormatIssue::NoSection(raw_type)));
            }
            let e = self.endian;
            let block_type = e.u32(head, 0);
            let len = e.u32(head, 4);
            if len & 3 != 0 || len < 12 {
                return Err(
                    self.format_err(offset, FormatIssue::BadBlockLength { block_type, len })
                );
            }
            if len as usize > MAX_RECORD {
                return Err(self.format_err(
                    offset,
                    FormatIssue::TooLarge {
                        what: "pcapng block",
                        len: u64::from(len),
                    },
                ));
            }
            let len = len as usize;
            self.need(len, "pcapng block", false)?;
            let block = &self.buf[self.pos..self.pos + len];
            if e.u32(block, len - 4) as usize != len {
                return Err(self.format_err(
                    offset,
                    FormatIssue::BadBlockLength {
                        block_type,
                        len: len as u32,
                    },
                ));
            }
            let body = (self.pos + 8, self.pos + len - 4);
            match block_type {
                1 => {
                    self.interface_block(offset, body)?;
                    self.pos += len;
                }
                0x0a => {
                    self.secrets_block(offset, body)?;
                    self.pos += len;
                }
                2 | 3 | 6 => {
                    let (iface, ts_ns, orig_len, data) =
                        self.packet_block(offset, block_type, body)?;
                    self.frame += 1;
                    self.pos += len;
                    let secrets_changed = std::mem::take(&mut self.fresh_secrets);
                    return Ok(Some(Packet {
                        frame: self.frame,
                        interface: iface,
                        ts_ns,
                        orig_len,
                        offset,
                        secrets_changed,
                        data: &self.buf[data.0..data.1],
                    }));
                }
                // Name resolution, statistics, custom and unknown blocks: skipped.
                _ => self.pos += len,
            }
        }
    }

    fn section_header(&mut self, offset: u64) -> Result<(), FileError> {
        self.need(28, "pcapng section header", false)?;
        let h = &self.buf[self.pos..self.pos + 28];
        let magic = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        let e = match magic {
            0x1a2b_3c4d => Endian::Little,
            0x4d3c_2b1a => Endian::Big,
            other => return Err(self.format_err(offset, FormatIssue::BadByteOrder(other))),
        };
        let len = e.u32(h, 4);
        let (major, minor) = (e.u16(h, 12), e.u16(h, 14));
        if len & 3 != 0 || len < 28 {
            return Err(self.format_err(
                offset,
                FormatIssue::BadBlockLength {
                    block_type: 0x0a0d_0d0a,
                    len,
                },
            ));
        }
        if major != 1 {
            return Err(self.format_err(
                offset,
                FormatIssue::Version {
                    format: "pcapng",
                    major,
                    minor,
                },
            ));
        }
        if len as usize > MAX_RECORD {
            return Err(self.format_err(
                offset,
                FormatIssue::TooLarge {
                    what: "pcapng section header",
                    len: u64::from(len),
                },
            ));
        }
        self.need(len as usize, "pcapng section header", false)?;
        let tail = e.u32(&self.buf[self.pos..], len as usize - 4);
        if tail != len {
            return Err(self.format_err(
                offset,
                FormatIssue::BadBlockLength {
                    block_type: 0x0a0d_0d0a,
                    len,
                },
            ));
        }
        if self.in_section {
            self.section += 1;
        }
        self.in_section = true;
        self.endian = e;
        self.section_ifaces.clear();
        self.pos += len as usize;
        Ok(())
    }

    fn interface_block(&mut self, offset: u64, body: (usize, usize)) -> Result<(), FileError> {
        let e = self.endian;
        let b = &self.buf[body.0..body.1];
        if b.len() < 8 {
            return Err(self.format_err(
                offset,
                FormatIssue::BadBlockBody {
                    block_type: 1,
                    what: "interface description shorter than 8 bytes",
                },
            ));
        }
        let linktype = u32::from(e.u16(b, 0));
        let snaplen = e.u32(b, 4);
        let mut name = None;
        let mut tsresol = (false, 6u8);
        let mut tsoffset = 0i64;
        for (code, value) in options(e, &b[8..]) {
            match code {
                2 => {
                    let text = String::from_utf8_lossy(value);
                    let text = text.trim_end_matches('\0');
                    if !text.is_empty() {
                        name = Some(text.to_owned());
                    }
                }
                9 => {
                    if let Some(&r) = value.first() {
                        tsresol = (r & 0x80 != 0, r & 0x7f);
                    }
                }
                14 => {
                    if let Some(v) = value.get(..8) {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(v);
                        tsoffset = match e {
                            Endian::Little => i64::from_le_bytes(a),
                            Endian::Big => i64::from_be_bytes(a),
                        };
                    }
                }
                _ => {}
            }
        }
        let id = self.section_ifaces.len() as u32;
        let label = match &name {
            Some(n) => n.clone(),
            None if self.interfaces.is_empty() => self.stem.clone(),
            None => format!("{}#{}", self.stem, self.interfaces.len()),
        };
        self.section_ifaces.push(self.interfaces.len());
        self.interfaces.push(Interface {
            section: self.section,
            id,
            linktype,
            link: LinkType::from_linktype(linktype),
            name,
            snaplen,
            label,
            tsresol,
            tsoffset,
        });
        Ok(())
    }

    fn secrets_block(&mut self, offset: u64, body: (usize, usize)) -> Result<(), FileError> {
        let e = self.endian;
        let b = &self.buf[body.0..body.1];
        let bad = |what| FormatIssue::BadBlockBody {
            block_type: 0x0a,
            what,
        };
        if b.len() < 8 {
            return Err(self.format_err(offset, bad("secrets block shorter than 8 bytes")));
        }
        let kind = e.u32(b, 0);
        let len = e.u32(b, 4) as usize;
        let Some(data) = b.get(8..).and_then(|d| d.get(..len)) else {
            return Err(self.format_err(offset, bad("secrets longer than the block")));
        };
        self.secrets.push(Secrets {
            kind,
            data: data.to_vec(),
            offset,
        });
        self.fresh_secrets = true;
        Ok(())
    }

    /// Parses EPB (6), SPB (3) or OPB (2): (global interface, ts, orig_len, data range in buf).
    fn packet_block(
        &mut self,
        offset: u64,
        block_type: u32,
        body: (usize, usize),
    ) -> Result<(usize, u64, u32, (usize, usize)), FileError> {
        let e = self.endian;
        let b = &self.buf[body.0..body.1];
        let short = FormatIssue::BadBlockBody {
            block_type,
            what: "packet block shorter than its fixed fields",
        };
        let (local_if, ts, caplen, orig_len, data_at) = match block_type {
            6 => {
                if b.len() < 20 {
                    return Err(self.format_err(offset, short));
                }
                let ts = (u64::from(e.u32(b, 4)) << 32) | u64::from(e.u32(b, 8));
                (e.u32(b, 0), Some(ts), e.u32(b, 12), e.u32(b, 16), 20)
            }
            2 => {
                if b.len() < 20 {
                    return Err(self.format_err(offset, short));
                }
                let ts = (u64::from(e.u32(b, 4)) << 32) | u64::from(e.u32(b, 8));
                (
                    u32::from(e.u16(b, 0)),
                    Some(ts),
                    e.u32(b, 12),
                    e.u32(b, 16),
                    20,
                )
            }
            _ => {
                // Simple Packet Block: interface 0, no timestamp; captured length implied.
                if b.len() < 4 {
                    return Err(self.format_err(offset, short));
                }
                let orig = e.u32(b, 0);
                let room = (b.len() - 4) as u32;
                let snap = self
                    .section_ifaces
                    .first()
                    .map_or(0, |&g| self.interfaces[g].snaplen);
                let mut caplen = orig.min(room);
                if snap != 0 {
                    caplen = caplen.min(snap);
                }
                (0, None, caplen, orig, 4)
            }
        };
        let Some(&global) = self.section_ifaces.get(local_if as usize) else {
            return Err(self.format_err(offset, FormatIssue::UnknownInterface(local_if)));
        };
        let room = b.len() - data_at;
        if caplen as usize > room {
            return Err(self.format_err(
                offset,
                FormatIssue::CaplenTooLarge {
                    caplen,
                    limit: room as u32,
                    of: "block body",
                },
            ));
        }
        let ts_ns = match ts {
            Some(raw) => {
                let iface = &self.interfaces[global];
                let ns = to_ns(raw, iface.tsresol);
                let ns = ns.saturating_add_signed(iface.tsoffset.saturating_mul(1_000_000_000));
                self.last_ts = ns;
                ns
            }
            // SPBs carry no time: use the previous packet's, the closest thing known.
            None => self.last_ts,
        };
        let start = body.0 + data_at;
        Ok((global, ts_ns, orig_len, (start, start + caplen as usize)))
    }
}

/// Converts a timestamp in `if_tsresol` units to nanoseconds (saturating).
fn to_ns(raw: u64, (binary, exp): (bool, u8)) -> u64 {
    if binary {
        let ns = (u128::from(raw) * 1_000_000_000) >> exp.min(127);
        u64::try_from(ns).unwrap_or(u64::MAX)
    } else if exp <= 9 {
        raw.saturating_mul(10u64.pow(u32::from(9 - exp)))
    } else if exp < 29 {
        raw / 10u64.pow(u32::from(exp - 9))
    } else {
        0
    }
}

/// Iterates pcapng options `(code, value)` until `opt_endofopt` or the end; a malformed option
/// ends the list (options are advisory).
fn options(e: Endian, mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let code = e.u16(b, 0);
        let len = usize::from(e.u16(b, 2));
        if code == 0 {
            return None;
        }
        let value = b.get(4..4 + len)?;
        let padded = (len + 3) & !3;
        b = b.get(4 + padded..).unwrap_or(&[]);
        Some((code, value))
    })
}

/// A file's path-label stem, for callers that build their own labels.
pub fn file_stem(path: &Path) -> String {
    stem_of(path)
}

/// Owned copy of a file's description, for summaries.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileInfo {
    /// The path.
    pub path: PathBuf,
    /// The container format.
    pub format: Format,
    /// Its interfaces.
    pub interfaces: Vec<Interface>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolutions() {
        assert_eq!(to_ns(5, (false, 6)), 5_000);
        assert_eq!(to_ns(5, (false, 9)), 5);
        assert_eq!(to_ns(5_000, (false, 12)), 5);
        assert_eq!(to_ns(1 << 20, (true, 20)), 1_000_000_000);
        assert_eq!(to_ns(u64::MAX, (false, 0)), u64::MAX);
    }

    #[test]
    fn auto_reads_cached_files_on_this_thread_and_disk_files_ahead() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.pcap");
        std::fs::write(&small, [0u8; 4096]).unwrap();
        let small = File::open(&small).unwrap();
        assert_eq!(FileReading::Auto.resolve(&small), FileReading::SameThread);
        // A large file just written is in the page cache...
        let path = dir.path().join("large.pcap");
        let mut f = File::create(&path).unwrap();
        let block = vec![0x5au8; 1 << 20];
        for _ in 0..(SMALL_FILE >> 20) + 4 {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        let f = File::open(&path).unwrap();
        assert!(page_cache_share(&f, f.metadata().unwrap().len()).unwrap() > 0.9);
        assert_eq!(FileReading::Auto.resolve(&f), FileReading::SameThread);
        // Its second half dropped: the share (sampled, 3072 pages) is about half...
        let len = f.metadata().unwrap().len();
        let half = i64::try_from(len / 2).unwrap();
        // SAFETY: plain advice on an open descriptor.
        let rc =
            unsafe { libc::posix_fadvise(f.as_raw_fd(), half, half, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let half_share = page_cache_share(&f, len).unwrap();
        // ...and once all its clean pages are dropped it must come from disk.
        // SAFETY: plain advice on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let share = page_cache_share(&f, len).unwrap();
        if share < 0.9 {
            assert!(
                (0.4..=0.6).contains(&half_share),
                "half dropped: {half_share}"
            );
            assert_eq!(FileReading::Auto.resolve(&f), FileReading::ReadAhead);
        } else {
            // A file system that keeps files in memory (tmpfs) cannot drop them: nothing to
            // read ahead from disk there.
            eprintln!("page cache kept {share:.2} of the file (tmpfs?)");
        }
        assert_eq!(
            FileReading::ReadAhead.resolve(&small),
            FileReading::ReadAhead
        );
    }
}
