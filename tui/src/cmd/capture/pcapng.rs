//! `capture --pcap DIR`: the raw packets of each interface written through to
//! `DIR/LABEL.pcapng` (nanosecond timestamps, the interface named by its path label so that
//! `analyze` labels it alike), with the QUIC key log embedded as Decryption Secrets Blocks as
//! it grows, so that the files decrypt alone. Blocks are built whole and reach the file at
//! least once per second; a file cut by SIGKILL or a full disk ends at its last whole block.
use std::io;
use std::path::{Path, PathBuf};

use probe_user::source::pcap::live::LivePacket;
use probe_user::source::pcap::SECRETS_TLS_KEY_LOG;

use super::out::{LineOut, Rotation};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const DSB: u32 = 0x0A;
const OPT_END: u16 = 0;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;
/// The snapshot length written in interface blocks without `--pcap-snaplen` (libpcap's
/// default capture length).
const SNAPLEN: u32 = 65_535;

/// One interface's pcapng file.
pub struct PcapngFile {
    path: PathBuf,
    label: String,
    out: LineOut,
    /// Link types with an interface block in the file, by interface id.
    links: Vec<u32>,
    block: Vec<u8>,
    /// Bytes of each packet kept (`--pcap-snaplen`), its length on the wire written beside.
    snaplen: Option<u32>,
    /// Packets written (or collected to be written).
    pub packets: u64,
}

impl PcapngFile {
    /// Creates `dir/LABEL.pcapng` with its section header, rotated as `rotation` says (each
    /// new file starts with the section header and every key log line so far), keeping the
    /// first `snaplen` bytes of each packet if given.
    pub fn create(
        dir: &Path,
        label: &str,
        rotation: Option<Rotation>,
        snaplen: Option<u32>,
    ) -> io::Result<Self> {
        let path = dir.join(format!("{label}.pcapng"));
        let file = super::out::create(&path, rotation)?;
        let mut out = LineOut::file(file);
        if let Some(r) = rotation {
            out.rotate_as(&path, r);
        }
        let mut f = Self {
            path,
            label: label.to_owned(),
            out,
            links: Vec::new(),
            block: Vec::with_capacity(2048),
            snaplen,
            packets: 0,
        };
        let mut body = Vec::with_capacity(16);
        body.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        f.push(SHB, &body);
        f.out.keep_pending_as_preamble();
        Ok(f)
    }

    /// Starts a new file when the current one is big or old enough.
    pub fn rotate_if_due(&mut self) {
        if self.out.rotate_if_due() {
            // The new file describes its interfaces again, before its first packet.
            self.links.clear();
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The write that failed, if one did (nothing is written after it).
    pub fn failure(&self) -> Option<&io::Error> {
        self.out.failure()
    }

    /// Blocks not written because a write failed.
    pub fn lost(&self) -> u64 {
        self.out.lost()
    }

    /// Appends one packet (an interface block first when its link type is new in the file).
    pub fn packet(&mut self, p: &LivePacket) {
        let linktype = p.link.linktype();
        let iface = match self.links.iter().position(|l| *l == linktype) {
            Some(i) => i,
            None => {
                self.interface(linktype);
                self.links.len() - 1
            }
        };
        let data = match self.snaplen {
            Some(n) => p.data.get(..n as usize).unwrap_or(&p.data),
            None => &p.data,
        };
        let caplen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let wire_len = p
            .orig_len
            .max(u32::try_from(p.data.len()).unwrap_or(u32::MAX));
        let mut body = Vec::with_capacity(20 + data.len() + 3);
        body.extend_from_slice(&u32::try_from(iface).unwrap_or(0).to_le_bytes());
        body.extend_from_slice(&((p.ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(p.ts_ns as u32).to_le_bytes());
        body.extend_from_slice(&caplen.to_le_bytes());
        body.extend_from_slice(&wire_len.to_le_bytes());
        body.extend_from_slice(data);
        pad(&mut body);
        self.push(EPB, &body);
        self.packets += 1;
    }

    /// Appends a Decryption Secrets Block holding key log `text` (whole lines).
    pub fn secrets(&mut self, text: &[u8]) {
        let mut body = Vec::with_capacity(8 + text.len() + 3);
        body.extend_from_slice(&SECRETS_TLS_KEY_LOG.to_le_bytes());
        body.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_le_bytes());
        body.extend_from_slice(text);
        pad(&mut body);
        self.push(DSB, &body);
        // Every later file decrypts alone: it starts with the key log so far.
        self.out.add_preamble(&self.block, 1);
    }

    /// Writes the collected blocks to the file.
    pub fn flush(&mut self) {
        self.out.write_out();
    }

    fn interface(&mut self, linktype: u32) {
        let mut body = Vec::with_capacity(32);
        body.extend_from_slice(&u16::try_from(linktype).unwrap_or(0).to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&self.snaplen.unwrap_or(SNAPLEN).to_le_bytes());
        option(&mut body, IF_NAME, self.label.as_bytes());
        option(&mut body, IF_TSRESOL, &[9]);
        option(&mut body, OPT_END, &[]);
        self.push(IDB, &body);
        self.links.push(linktype);
    }

    /// Frames `body` (already padded to 4 bytes) as a block of `kind` and collects it.
    fn push(&mut self, kind: u32, body: &[u8]) {
        let total = u32::try_from(12 + body.len()).unwrap_or(u32::MAX);
        self.block.clear();
        self.block.extend_from_slice(&kind.to_le_bytes());
        self.block.extend_from_slice(&total.to_le_bytes());
        self.block.extend_from_slice(body);
        self.block.extend_from_slice(&total.to_le_bytes());
        self.out.push(&self.block, 1);
    }
}

fn pad(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
}

fn option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&u16::try_from(value.len()).unwrap_or(0).to_le_bytes());
    body.extend_from_slice(value);
    pad(body);
}

/// The lines appended to a key log since the last look, for the pcapng files: only whole
/// lines (a client may be half-way through writing one).
#[derive(Debug)]
pub struct KeylogTail {
    path: PathBuf,
    offset: u64,
}

impl KeylogTail {
    /// Follows `path` from its start.
    pub fn new(path: PathBuf) -> Self {
        Self { path, offset: 0 }
    }

    /// The whole lines appended since the last call (empty when none, or the file is absent).
    pub fn new_lines(&mut self) -> Vec<u8> {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return Vec::new();
        };
        if meta.len() <= self.offset {
            return Vec::new();
        }
        let Ok(text) = std::fs::read(&self.path) else {
            return Vec::new();
        };
        let start = usize::try_from(self.offset).unwrap_or(usize::MAX);
        let Some(fresh) = text.get(start..) else {
            return Vec::new();
        };
        let Some(end) = fresh.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        self.offset += end as u64 + 1;
        fresh[..=end].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_user::analyze::Analyzer;
    use probe_user::dissect::DissectConfig;
    use tboxscope_decode::net::LinkType;

    #[test]
    fn written_files_read_back_with_their_label_and_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = PcapngFile::create(dir.path(), "eth1", None, None).unwrap();
        let frame = tboxscope_test_support::pcap::eth_udp(&[], false, 4000, 7000, b"hello");
        for i in 0..3u64 {
            f.packet(&LivePacket {
                path: 0,
                ts_ns: 1_796_000_000_123_456_789 + i,
                orig_len: u32::try_from(frame.len()).unwrap(),
                link: LinkType::Ethernet,
                data: frame.clone(),
            });
            if i == 0 {
                f.secrets(tboxscope_test_support::quic::rfc9001_keylog().as_bytes());
            }
        }
        f.flush();
        let mut analyzer = Analyzer::new(DissectConfig {
            unknown_udp: true,
            ..DissectConfig::default()
        });
        let mut ts = Vec::new();
        let errors = analyzer
            .run_files(&[f.path().to_path_buf()], &mut |r| {
                ts.push((r.path.to_owned(), r.packet.ts_ns));
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        // The embedded key log was read and its lines taken.
        assert!(analyzer.warnings().is_empty(), "{:?}", analyzer.warnings());
        assert_eq!(analyzer.files()[0].frames, 3);
        assert_eq!(ts.len(), 3);
        assert_eq!(ts[2], ("eth1".to_owned(), 1_796_000_000_123_456_791));
    }

    #[test]
    fn the_key_log_is_followed_by_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.txt");
        let mut tail = KeylogTail::new(path.clone());
        assert!(tail.new_lines().is_empty());
        std::fs::write(&path, b"A 1 2\nB 3").unwrap();
        assert_eq!(tail.new_lines(), b"A 1 2\n");
        std::fs::write(&path, b"A 1 2\nB 3 4\n").unwrap();
        assert_eq!(tail.new_lines(), b"B 3 4\n");
        assert!(tail.new_lines().is_empty());
    }
}
