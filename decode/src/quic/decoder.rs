//! The stateful, sans-IO QUIC decoder: feed it datagrams, get decoded packets.

use super::conn::{
    AppKeys, CidEntry, Connection, Undecrypted, CLIENT, MAX_CIDS_PER_CONNECTION, SERVER,
};
use super::frame::{Frame, Frames};
use super::header::{parse_header, PacketHeader, PacketType, ParseOptions, Version};
use super::hunt::{Found, HuntConfig, Hunter};
use super::keylog::Keylog;
use super::keys::{CipherSuite, CryptoError, PacketKeys};
use super::multipath::{self, MultipathMode};
use super::protection::{decode_packet_number, decrypt_into, unprotect_header, Unprotected};
use super::retry;
use super::summary::{hex, summarize_frames, PacketSummary, QuicStats};
use super::tls::{parse_hello, HandshakeMessage};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// What the caller knows about a datagram besides its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramInfo {
    /// Source address and port.
    pub src: Option<SocketAddr>,
    /// Destination address and port.
    pub dst: Option<SocketAddr>,
    /// Direction hint when addresses are unknown: true if sent by the client.
    pub from_client: Option<bool>,
}

/// Decoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// Most connections kept; the oldest is evicted (and counted) beyond this.
    pub max_connections: usize,
    /// Header parsing options.
    pub parse: ParseOptions,
    /// Bounds of the search for connections whose handshake was not captured.
    pub hunt: HuntConfig,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            parse: ParseOptions::default(),
            hunt: HuntConfig::default(),
        }
    }
}

/// One decoded packet, borrowed from the datagram and the decoder's decryption buffer.
#[derive(Debug, Clone)]
pub struct DecodedPacket<'a> {
    /// The validated header.
    pub header: PacketHeader<'a>,
    /// Full packet number.
    pub pn: Option<u64>,
    /// Key phase bit (1-RTT).
    pub key_phase: Option<bool>,
    /// Multipath path identifier used for the nonce and PN space.
    pub path_id: Option<u64>,
    /// Multipath: the packet-number space (of the other endpoint's packets) that this packet's
    /// plain ACK frames acknowledge ([`super::multipath::plain_ack_space`]).
    pub ack_space: Option<u64>,
    /// Decoder connection number.
    pub connection: Option<u64>,
    /// True when sent by the client.
    pub from_client: Option<bool>,
    /// Decrypted payload (frames).
    pub payload: Option<&'a [u8]>,
    /// Why there is no payload.
    pub undecrypted: Option<Undecrypted>,
    /// A Version Negotiation that answers, with the connection IDs swapped back, a long header
    /// of an unknown version sent the other way just before: a version-negotiation exchange.
    pub answers_probe: bool,
}

impl DecodedPacket<'_> {
    /// Frames of the decrypted payload (none if not decrypted).
    pub fn frames(&self) -> Frames<'_> {
        Frames::new(self.payload.unwrap_or(&[]))
    }

    /// True when the packet counts as QUIC: of a known version and either of a connection the
    /// decoder follows (its handshake, a Version Negotiation answering it, or a key that
    /// authenticated it) or itself an Initial (whose header parsed in full); or a Version
    /// Negotiation answering a probe ([`DecodedPacket::answers_probe`]). Anything else is
    /// indistinguishable from other UDP that happens to parse as a header.
    pub fn is_quic(&self) -> bool {
        self.answers_probe
            || (self.undecrypted != Some(Undecrypted::UnknownVersion)
                && (self.connection.is_some() || self.header.packet_type == PacketType::Initial))
    }

    /// Owned summary for JSON.
    pub fn summary(&self) -> PacketSummary {
        let h = &self.header;
        let (frames, err) = self.payload.map(summarize_frames).unwrap_or_default();
        PacketSummary {
            packet_type: h.packet_type,
            version: h.version.map(|v| format!("{v:#010x}")),
            pn: self.pn,
            dcid: hex(h.dcid),
            scid: h.is_long().then(|| hex(h.scid)),
            length: h.length,
            size: h.packet_len(),
            spin_bit: h.spin_bit(),
            key_phase: self.key_phase,
            path_id: self.path_id,
            ack_space: self.ack_space,
            connection: self.connection,
            from_client: self.from_client,
            decrypted: self.payload.is_some(),
            undecrypted_reason: self.undecrypted.map(|u| u.to_string()),
            frames,
            frame_error: err.map(|e| e.to_string()),
        }
    }
}

/// Public facts about a tracked connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionInfo {
    /// Decoder connection number.
    pub id: u64,
    /// Server name from the ClientHello.
    pub sni: Option<String>,
    /// ALPN protocols offered.
    pub alpn: Vec<String>,
    /// Client random, hex.
    pub client_random: Option<String>,
    /// Cipher suite from the ServerHello.
    pub cipher_suite: Option<CipherSuite>,
    /// Version family.
    pub version: Version,
    /// Multipath rules in use.
    pub multipath: MultipathMode,
}

struct Outcome {
    conn: Option<u64>,
    sender: Option<usize>,
    pn: Option<u64>,
    key_phase: Option<bool>,
    path_id: Option<u64>,
    plaintext: Option<(usize, usize)>,
    undecrypted: Option<Undecrypted>,
    space: usize,
    /// The DCID length a short header turned out to have (found by trial).
    dcid_len: Option<usize>,
    /// A Version Negotiation answering a long header of an unknown version seen just before.
    answers_probe: bool,
}

impl Outcome {
    fn fail(conn: Option<u64>, sender: Option<usize>, why: Undecrypted) -> Self {
        Self {
            conn,
            sender,
            pn: None,
            key_phase: None,
            path_id: None,
            plaintext: None,
            undecrypted: Some(why),
            space: 0,
            dcid_len: None,
            answers_probe: false,
        }
    }
}

/// Long headers of unknown versions remembered for the Version Negotiation that may answer.
const MAX_PROBES: usize = 64;

/// Stateful QUIC decoder (sans-IO): connection table, CID index, keys, packet-number spaces.
#[derive(Debug, Default)]
pub struct QuicDecoder {
    cfg: DecoderConfig,
    keylog: Option<Keylog>,
    conns: HashMap<u64, Connection>,
    order: VecDeque<u64>,
    cids: HashMap<Vec<u8>, CidEntry>,
    cid_lens: HashMap<usize, usize>,
    addrs: HashMap<(SocketAddr, SocketAddr), u64>,
    next_id: u64,
    scratch: Vec<u8>,
    hunter: Hunter,
    /// Recent long headers of unknown versions: (source, destination, DCID, SCID).
    probes: VecDeque<(SocketAddr, SocketAddr, Vec<u8>, Vec<u8>)>,
    /// Counters.
    pub stats: QuicStats,
}

impl QuicDecoder {
    /// A decoder with `cfg` and an optional keylog.
    pub fn new(cfg: DecoderConfig, keylog: Option<Keylog>) -> Self {
        Self {
            cfg,
            keylog,
            hunter: Hunter::new(cfg.hunt),
            ..Self::default()
        }
    }

    /// Adds `log`, already parsed from `text` (kept for callers that validate first).
    pub fn add_keylog(
        &mut self,
        log: &Keylog,
        text: &[u8],
    ) -> Result<(), super::keylog::KeylogError> {
        match self.keylog.as_mut() {
            None => self.keylog = Some(log.clone()),
            Some(k) => k.extend(text, "decryption secrets block")?,
        }
        for c in self.conns.values_mut() {
            c.tls_keys_tried = false;
        }
        Ok(())
    }

    /// Adds keylog text (e.g. a later Decryption Secrets Block); connections retry key lookup.
    pub fn add_keylog_text(
        &mut self,
        text: &[u8],
        source_name: &str,
    ) -> Result<(), super::keylog::KeylogError> {
        let mut merged = self.keylog.take().unwrap_or_default();
        let r = merged.extend(text, source_name);
        self.keylog = Some(merged);
        for c in self.conns.values_mut() {
            c.tls_keys_tried = false;
        }
        r
    }

    /// Replaces the keylog.
    pub fn set_keylog(&mut self, log: Keylog) {
        self.keylog = Some(log);
        for c in self.conns.values_mut() {
            c.tls_keys_tried = false;
        }
    }

    /// Facts about connection `id`.
    pub fn connection_info(&self, id: u64) -> Option<ConnectionInfo> {
        let c = self.conns.get(&id)?;
        Some(ConnectionInfo {
            id,
            sni: c.client_hello.as_ref().and_then(|h| h.sni.clone()),
            alpn: c
                .client_hello
                .as_ref()
                .map(|h| h.alpn.clone())
                .unwrap_or_default(),
            client_random: c.client_hello.as_ref().map(|h| hex(&h.random)),
            cipher_suite: c.suite,
            version: c.version,
            multipath: c.multipath,
        })
    }

    /// Number of connections in the table.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Decodes a datagram and returns owned summaries of its packets.
    pub fn decode(&mut self, datagram: &[u8], info: &DatagramInfo) -> Vec<PacketSummary> {
        let mut out = Vec::new();
        self.decode_with(datagram, info, |p| out.push(p.summary()));
        out
    }

    /// Decodes a datagram, calling `f` for each packet whose header parsed. Header rejections
    /// and decryption failures are counted in [`QuicDecoder::stats`].
    pub fn decode_with<F: FnMut(&DecodedPacket<'_>)>(
        &mut self,
        datagram: &[u8],
        info: &DatagramInfo,
        mut f: F,
    ) {
        self.stats.datagrams += 1;
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut rest = datagram;
        let mut first = true;
        while let Some(&b0) = rest.first() {
            if !first && rest.iter().all(|&b| b == 0) {
                self.stats.padding_bytes += rest.len() as u64;
                break;
            }
            first = false;
            let short = if b0 & 0x80 == 0 {
                self.lookup_short(rest, info)
            } else {
                None
            };
            let dcid_len = short.map_or(0, |(len, _)| len);
            let at = rest;
            let mut hdr = match parse_header(rest, dcid_len, self.cfg.parse) {
                Ok(h) => h,
                Err(e) => {
                    QuicStats::bump(&mut self.stats.rejected, e.reason());
                    break;
                }
            };
            rest = rest.get(hdr.packet_len()..).unwrap_or(&[]);
            let entry = short.and_then(|(_, e)| e);
            let mut out = self.process(&hdr, entry, info, &mut scratch);
            // A 1-RTT packet of a known connection that fails to open may be the first of
            // several sent with UDP segmentation offload (GSO) and captured before the kernel
            // or the NIC cut them into datagrams: open it as one segment, the rest after it.
            if out.undecrypted == Some(Undecrypted::Authentication) && entry.is_some() {
                if let Some(seg) = gso_segment(at, dcid_len) {
                    if let Ok(h) = parse_header(&at[..seg], dcid_len, self.cfg.parse) {
                        let again = self.process(&h, entry, info, &mut scratch);
                        if again.undecrypted.is_none() {
                            self.stats.gso_segments += 1;
                            (hdr, out, rest) = (h, again, &at[seg..]);
                        }
                    }
                }
            }
            if let Some(h) = out
                .dcid_len
                .and_then(|len| parse_header(at, len, self.cfg.parse).ok())
            {
                // Found by trial: the header's DCID is as long as the key proved.
                hdr = h;
            }
            self.stats.hunt = self.hunter.stats;
            let payload = out.plaintext.and_then(|(a, n)| scratch.get(a..a + n));
            let ack_space = self.ack_space(&out, info);
            let pkt = DecodedPacket {
                header: hdr,
                pn: out.pn,
                key_phase: out.key_phase,
                path_id: out.path_id,
                ack_space,
                connection: out.conn,
                from_client: out.sender.map(|s| s == CLIENT),
                payload,
                undecrypted: out.undecrypted,
                answers_probe: out.answers_probe,
            };
            if !pkt.is_quic() {
                let why = match out.undecrypted {
                    Some(Undecrypted::UnknownVersion) => "unknown_version",
                    _ => "unknown_connection",
                };
                QuicStats::bump(&mut self.stats.not_quic, why);
                f(&pkt);
                continue;
            }
            self.stats.packets += 1;
            match (&out.undecrypted, payload) {
                (Some(u), _) => QuicStats::bump(&mut self.stats.not_decrypted, u.reason()),
                (None, Some(p)) => {
                    self.stats.decrypted += 1;
                    if let (Some(c), Some(s)) = (out.conn, out.sender) {
                        self.apply_frames(c, s, out.space, p);
                    }
                }
                (None, None) => {}
            }
            f(&pkt);
        }
        self.scratch = scratch;
    }

    /// DCID length and index entry of a short-header packet.
    fn lookup_short(&self, rest: &[u8], info: &DatagramInfo) -> Option<(usize, Option<CidEntry>)> {
        for &len in self.cid_lens.keys() {
            if let Some(e) = rest.get(1..1 + len).and_then(|cid| self.cids.get(cid)) {
                return Some((len, Some(*e)));
            }
        }
        // Zero-length CIDs: find the connection by addresses.
        let (id, sender) = self.lookup_addr(info)?;
        let c = self.conns.get(&id)?;
        c.empty_dcid_from[sender].then_some((
            0,
            Some(CidEntry {
                conn: id,
                sender,
                path_id: 0,
                seq: 0,
            }),
        ))
    }

    fn lookup_addr(&self, info: &DatagramInfo) -> Option<(u64, usize)> {
        let (src, dst) = (info.src?, info.dst?);
        if let Some(&id) = self.addrs.get(&(src, dst)) {
            return Some((id, CLIENT));
        }
        self.addrs.get(&(dst, src)).map(|&id| (id, SERVER))
    }

    fn index_cid(&mut self, cid: &[u8], entry: CidEntry) {
        if cid.is_empty() || self.cids.contains_key(cid) {
            return;
        }
        let Some(c) = self.conns.get_mut(&entry.conn) else {
            return;
        };
        if c.cids.len() >= MAX_CIDS_PER_CONNECTION {
            return;
        }
        c.cids.push(cid.to_vec());
        self.cids.insert(cid.to_vec(), entry);
        *self.cid_lens.entry(cid.len()).or_insert(0) += 1;
    }

    fn new_connection(&mut self, version: Version, dcid: &[u8], info: &DatagramInfo) -> u64 {
        while self.conns.len() >= self.cfg.max_connections.max(1) {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(c) = self.conns.remove(&old) {
                self.stats.evictions += 1;
                for cid in &c.cids {
                    if self.cids.remove(cid).is_some() {
                        if let Some(n) = self.cid_lens.get_mut(&cid.len()) {
                            *n = n.saturating_sub(1);
                            if *n == 0 {
                                self.cid_lens.remove(&cid.len());
                            }
                        }
                    }
                }
                if let (Some(a), Some(b)) = (c.client_addr, c.server_addr) {
                    if self.addrs.get(&(a, b)) == Some(&old) {
                        self.addrs.remove(&(a, b));
                    }
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stats.connections += 1;
        let mut c = Connection::new(id, version, dcid);
        c.client_addr = info.src;
        c.server_addr = info.dst;
        if let (Some(a), Some(b)) = (info.src, info.dst) {
            self.addrs.insert((a, b), id);
        }
        self.conns.insert(id, c);
        self.order.push_back(id);
        id
    }

    fn process(
        &mut self,
        h: &PacketHeader<'_>,
        short: Option<CidEntry>,
        info: &DatagramInfo,
        scratch: &mut Vec<u8>,
    ) -> Outcome {
        match h.packet_type {
            PacketType::OneRtt => self.process_short(h, short, info, scratch),
            PacketType::Initial | PacketType::Handshake | PacketType::ZeroRtt => {
                self.process_long(h, info, scratch)
            }
            PacketType::Retry => {
                let found = self.find_long(h, info);
                // A client discards a Retry whose integrity tag does not verify against the DCID
                // of its first Initial (RFC 9001 §5.8): so does the decoder.
                let conn = found.and_then(|(id, _)| self.conns.get(&id));
                if let (Some(c), Some(version)) = (conn, h.version_family()) {
                    if !retry::verify(version, &c.original_dcid, h.packet) {
                        return Outcome::fail(
                            found.map(|f| f.0),
                            Some(SERVER),
                            Undecrypted::RetryIntegrity,
                        );
                    }
                }
                if let (Some((id, _)), false) = (found, h.scid.is_empty()) {
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.retry_scid = Some(h.scid.to_vec());
                    }
                    self.index_cid(
                        h.scid,
                        CidEntry {
                            conn: id,
                            sender: CLIENT,
                            path_id: 0,
                            seq: 0,
                        },
                    );
                }
                Outcome::fail(
                    found.map(|f| f.0),
                    found.map(|f| f.1).or(Some(SERVER)),
                    Undecrypted::NoPayload,
                )
            }
            PacketType::VersionNegotiation => {
                let found = self.find_long(h, info);
                let mut out =
                    Outcome::fail(found.map(|f| f.0), Some(SERVER), Undecrypted::NoPayload);
                out.answers_probe = found.is_none()
                    && self.probes.iter().any(|p| {
                        Some(p.0) == info.dst
                            && Some(p.1) == info.src
                            && p.2 == h.scid
                            && p.3 == h.dcid
                    });
                out
            }
            PacketType::UnknownVersion => {
                let found = self.find_long(h, info);
                if let (None, Some(src), Some(dst), true) =
                    (found, info.src, info.dst, h.dcid.len() >= 8)
                {
                    // A client's first packet of a version this decoder does not know: a
                    // Version Negotiation may answer it.
                    if self.probes.len() >= MAX_PROBES {
                        self.probes.pop_front();
                    }
                    self.probes
                        .push_back((src, dst, h.dcid.to_vec(), h.scid.to_vec()));
                }
                Outcome::fail(
                    found.map(|f| f.0),
                    found.map(|f| f.1),
                    Undecrypted::UnknownVersion,
                )
            }
        }
    }

    fn find_long(&self, h: &PacketHeader<'_>, info: &DatagramInfo) -> Option<(u64, usize)> {
        if let Some(e) = (!h.dcid.is_empty())
            .then(|| self.cids.get(h.dcid))
            .flatten()
        {
            return Some((e.conn, e.sender));
        }
        self.lookup_addr(info)
    }

    fn process_long(
        &mut self,
        h: &PacketHeader<'_>,
        info: &DatagramInfo,
        scratch: &mut Vec<u8>,
    ) -> Outcome {
        let Some(version) = h.version_family() else {
            return Outcome::fail(None, None, Undecrypted::UnknownVersion);
        };
        let (id, sender) = match self.find_long(h, info) {
            Some(f) => f,
            None if h.packet_type == PacketType::Initial && h.dcid.len() >= 8 => {
                let sender = if info.from_client == Some(false) {
                    SERVER
                } else {
                    CLIENT
                };
                let id = self.new_connection(version, h.dcid, info);
                if sender == CLIENT {
                    self.index_cid(
                        h.dcid,
                        CidEntry {
                            conn: id,
                            sender: CLIENT,
                            path_id: 0,
                            seq: 0,
                        },
                    );
                }
                (id, sender)
            }
            None => return Outcome::fail(None, None, Undecrypted::UnknownConnection),
        };
        // The peer's SCID becomes the DCID of packets towards it.
        let toward = if sender == CLIENT { SERVER } else { CLIENT };
        self.index_cid(
            h.scid,
            CidEntry {
                conn: id,
                sender: toward,
                path_id: 0,
                seq: 0,
            },
        );
        if let Some(c) = self.conns.get_mut(&id) {
            c.empty_dcid_from[toward] = h.scid.is_empty();
        }
        if h.truncated {
            return Outcome::fail(Some(id), Some(sender), Undecrypted::Truncated);
        }
        let keylog = self.keylog.as_ref();
        let Some(c) = self.conns.get_mut(&id) else {
            return Outcome::fail(None, None, Undecrypted::UnknownConnection);
        };
        if sender == SERVER && version != c.version {
            // Compatible version negotiation (e.g. v1 to v2): the server's version decides the
            // labels of every later key.
            c.version = version;
            c.tls_keys_tried = false;
        }
        let space = match h.packet_type {
            PacketType::Initial => 0,
            PacketType::Handshake => 1,
            _ => 2,
        };
        let largest = if space < 2 {
            c.largest[space][sender]
        } else {
            c.app_largest.get((CLIENT, 0))
        };
        let prepared = match space {
            0 => {
                let dcid = if sender == CLIENT && c.retry_scid.as_deref() == Some(h.dcid) {
                    h.dcid.to_vec()
                } else {
                    c.initial
                        .as_ref()
                        .map_or_else(|| c.original_dcid.clone(), |(_, d, _)| d.clone())
                };
                c.initial_keys(version, &dcid)
                    .err()
                    .map(|_| Undecrypted::BadSecret)
            }
            1 => {
                let label = if sender == CLIENT {
                    "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
                } else {
                    "SERVER_HANDSHAKE_TRAFFIC_SECRET"
                };
                c.ensure_tls_keys(keylog, label)
            }
            _ => c.ensure_tls_keys(keylog, "CLIENT_EARLY_TRAFFIC_SECRET"),
        };
        if let Some(u) = prepared {
            return Outcome::fail(Some(id), Some(sender), u);
        }
        let keys = match space {
            0 => c.initial.as_ref().map(|(_, _, k)| &k[sender]),
            1 => c.handshake[sender].as_ref(),
            _ => c.early.as_ref(),
        };
        let Some(keys) = keys else {
            return Outcome::fail(Some(id), Some(sender), Undecrypted::BadSecret);
        };
        let Ok(un) = unprotect_header(h.packet, h.pn_offset, keys) else {
            return Outcome::fail(Some(id), Some(sender), Undecrypted::TooShort);
        };
        let pn = decode_packet_number(largest, un.truncated_pn, un.pn_len);
        let nonce = super::keys::nonce(&keys.iv(), pn);
        match decrypt_into(h.packet, h.pn_offset, &un, keys, nonce, scratch) {
            Ok((start, n)) => {
                if space < 2 {
                    c.largest[space][sender] = Some(largest.map_or(pn, |l| l.max(pn)));
                } else {
                    c.app_largest.record((CLIENT, 0), pn);
                }
                Outcome {
                    conn: Some(id),
                    sender: Some(sender),
                    pn: Some(pn),
                    key_phase: None,
                    path_id: None,
                    plaintext: Some((start, n)),
                    undecrypted: None,
                    space,
                    dcid_len: None,
                    answers_probe: false,
                }
            }
            Err(e) => Outcome::fail(Some(id), Some(sender), crypto_reason(e)),
        }
    }

    fn process_short(
        &mut self,
        h: &PacketHeader<'_>,
        entry: Option<CidEntry>,
        info: &DatagramInfo,
        scratch: &mut Vec<u8>,
    ) -> Outcome {
        let Some(entry) = entry else {
            if let Some(out) = self.hunt(h, info, scratch) {
                return out;
            }
            let sender = info.from_client.map(|c| if c { CLIENT } else { SERVER });
            return Outcome::fail(None, sender, Undecrypted::UnknownConnection);
        };
        let (id, sender) = (entry.conn, entry.sender);
        let keylog = self.keylog.as_ref();
        let Some(c) = self.conns.get_mut(&id) else {
            return Outcome::fail(None, Some(sender), Undecrypted::UnknownConnection);
        };
        let label = if sender == CLIENT {
            "CLIENT_TRAFFIC_SECRET_0"
        } else {
            "SERVER_TRAFFIC_SECRET_0"
        };
        if let Some(u) = c.ensure_tls_keys(keylog, label) {
            return Outcome::fail(Some(id), Some(sender), u);
        }
        let mode = c.multipath;
        let Some(app) = c.app[sender].as_mut() else {
            return Outcome::fail(Some(id), Some(sender), Undecrypted::BadSecret);
        };
        let Ok(un) = unprotect_header(h.packet, h.pn_offset, &app.hp) else {
            return Outcome::fail(Some(id), Some(sender), Undecrypted::TooShort);
        };
        let phase = un.key_phase();
        // Candidate (path identifier for the nonce, PN space, mode it proves).
        let mut cands: [Option<(u64, MultipathMode)>; 3] = [None; 3];
        match mode {
            MultipathMode::None => {
                cands[0] = Some((0, MultipathMode::None));
                if entry.path_id != 0 {
                    cands[1] = Some((entry.path_id, MultipathMode::PathId));
                }
                if entry.seq != 0 {
                    cands[2] = Some((entry.seq, MultipathMode::CidSequence));
                }
            }
            MultipathMode::PathId => cands[0] = Some((entry.path_id, mode)),
            MultipathMode::CidSequence => cands[0] = Some((entry.seq, mode)),
        }
        let mut last_err = Undecrypted::Authentication;
        for (path, cand_mode) in cands.into_iter().flatten() {
            let largest = c.app_largest.get((sender, path));
            let pn = decode_packet_number(largest, un.truncated_pn, un.pn_len);
            let path32 = u32::try_from(path).unwrap_or(u32::MAX);
            let r = try_app_keys(app, phase, &un, h, path32, pn, scratch);
            match r {
                Ok((start, n, advanced)) => {
                    if advanced {
                        self.stats.key_updates += 1;
                    }
                    if cand_mode != MultipathMode::None {
                        c.multipath = cand_mode;
                    }
                    c.app_largest.record((sender, path), pn);
                    return Outcome {
                        conn: Some(id),
                        sender: Some(sender),
                        pn: Some(pn),
                        key_phase: Some(phase),
                        path_id: (c.multipath != MultipathMode::None).then_some(path),
                        plaintext: Some((start, n)),
                        undecrypted: None,
                        space: 2,
                        dcid_len: None,
                        answers_probe: false,
                    };
                }
                Err(e) => last_err = crypto_reason(e),
            }
        }
        Outcome::fail(Some(id), Some(sender), last_err)
    }

    /// The space a decrypted 1-RTT packet's plain ACK frames acknowledge, in a multipath
    /// connection; the packet's addresses are noted with its path for the packets after it.
    fn ack_space(&mut self, out: &Outcome, info: &DatagramInfo) -> Option<u64> {
        let (id, sender, path) = (out.conn?, out.sender?, out.path_id.unwrap_or(0));
        if out.space != 2 || out.plaintext.is_none() {
            return None;
        }
        let c = self.conns.get_mut(&id)?;
        let addrs = info.src.zip(info.dst);
        if let Some(a) = addrs {
            c.path_addrs.record(a, sender, path);
        }
        let other = if sender == CLIENT { SERVER } else { CLIENT };
        let opposite = addrs.and_then(|(src, dst)| c.path_addrs.get((dst, src), other));
        super::multipath::plain_ack_space(c.multipath, path, opposite)
    }

    /// Tries a short header of no known connection against the key log ([`Hunter`]); when it
    /// authenticates, binds its DCID (or, for an empty one, its addresses) to the connection of
    /// that key-log entry (one followed already, e.g. from another path, or a new one).
    fn hunt(
        &mut self,
        h: &PacketHeader<'_>,
        info: &DatagramInfo,
        scratch: &mut Vec<u8>,
    ) -> Option<Outcome> {
        let (keylog, src, dst) = (self.keylog.as_ref()?, info.src?, info.dst?);
        let found = self
            .hunter
            .try_packet(keylog, h.packet, src, dst, scratch)?;
        let Found {
            client_random,
            sender,
            version,
            ref secrets,
            generation,
            dcid_len,
            path,
            pn,
            key_phase,
            plaintext,
        } = found;
        let existing = self.conns.iter().find_map(|(&id, c)| {
            let random = c.client_hello.as_ref().map(|ch| ch.random);
            (random == Some(client_random) || c.hunted_random == Some(client_random)).then_some(id)
        });
        let dcid = h.packet.get(1..1 + dcid_len).unwrap_or(&[]);
        let id = match existing {
            Some(id) => id,
            None => {
                let (client, server) = if sender == CLIENT {
                    (src, dst)
                } else {
                    (dst, src)
                };
                let conn_info = DatagramInfo {
                    src: Some(client),
                    dst: Some(server),
                    from_client: Some(true),
                };
                let id = self.new_connection(version, dcid, &conn_info);
                let c = self.conns.get_mut(&id)?;
                c.hunted_random = Some(client_random);
                c.tls_keys_tried = true;
                for (dir, secret) in secrets.iter().enumerate() {
                    c.app[dir] = secret
                        .as_ref()
                        .and_then(|s| AppKeys::at_generation(s.clone(), generation).ok());
                }
                c.suite = secrets
                    .iter()
                    .flatten()
                    .next()
                    .map(super::keys::Secret::suite);
                id
            }
        };
        let mode = if path != 0 {
            MultipathMode::CidSequence
        } else {
            MultipathMode::None
        };
        if let Some(c) = self.conns.get_mut(&id) {
            if mode != MultipathMode::None {
                c.multipath = mode;
            }
            c.app_largest.record((sender, u64::from(path)), pn);
            if dcid.is_empty() {
                c.empty_dcid_from[sender] = true;
            }
        }
        if dcid.is_empty() {
            let key = if sender == CLIENT {
                (src, dst)
            } else {
                (dst, src)
            };
            self.addrs.entry(key).or_insert(id);
        } else {
            self.index_cid(
                dcid,
                CidEntry {
                    conn: id,
                    sender,
                    path_id: 0,
                    seq: u64::from(path),
                },
            );
        }
        Some(Outcome {
            conn: Some(id),
            sender: Some(sender),
            pn: Some(pn),
            key_phase: Some(key_phase),
            path_id: (mode != MultipathMode::None).then_some(u64::from(path)),
            plaintext: Some(plaintext),
            undecrypted: None,
            space: 2,
            dcid_len: Some(dcid_len),
            answers_probe: false,
        })
    }

    /// Applies what the decoder must learn from frames: CRYPTO data (ClientHello, ServerHello)
    /// and new connection IDs.
    fn apply_frames(&mut self, id: u64, sender: usize, space: usize, payload: &[u8]) {
        for f in Frames::new(payload) {
            let f = match f {
                Ok(f) => f,
                Err(e) => {
                    QuicStats::bump(&mut self.stats.frame_errors, e.reason());
                    break;
                }
            };
            match f {
                Frame::Ack(a) => QuicStats::bump(&mut self.stats.ack_frames, a.kind()),
                Frame::Crypto { offset, data } if space < 2 => {
                    let Some(c) = self.conns.get_mut(&id) else {
                        return;
                    };
                    let stream = &mut c.crypto[space][sender];
                    if stream.insert(offset, data) && space == 0 {
                        match parse_hello(stream.contiguous()) {
                            Ok(Some(HandshakeMessage::ClientHello(ch)))
                                if c.client_hello.is_none() =>
                            {
                                c.client_hello = Some(ch);
                                c.tls_keys_tried = false;
                            }
                            Ok(Some(HandshakeMessage::ServerHello(sh))) if c.suite.is_none() => {
                                c.suite = CipherSuite::from_u16(sh.cipher_suite);
                                c.tls_keys_tried = false;
                            }
                            _ => {}
                        }
                    }
                }
                Frame::NewConnectionId {
                    path_id, seq, cid, ..
                } => {
                    // CIDs announced by one endpoint are used by the other to reach it.
                    let toward = if sender == CLIENT { SERVER } else { CLIENT };
                    let entry = CidEntry {
                        conn: id,
                        sender: toward,
                        path_id: path_id.unwrap_or(0),
                        seq,
                    };
                    self.index_cid(cid, entry);
                }
                _ => {}
            }
        }
    }
}

/// The segment size of `datagram`, if it is several short-header packets of one destination
/// connection ID (`dcid_len` bytes, at least 4) back to back in equal segments, the last one
/// no longer — what a capture shows of a UDP GSO send taken before segmentation.
fn gso_segment(datagram: &[u8], dcid_len: usize) -> Option<usize> {
    /// First byte, packet number and AEAD tag: the least a segment holds besides its DCID.
    const MIN_OVERHEAD: usize = 1 + 1 + 16;
    if dcid_len < 4 {
        return None;
    }
    let dcid = datagram.get(1..1 + dcid_len)?;
    let starts_packet = |at: usize| {
        datagram.get(at).is_some_and(|b| b & 0x80 == 0)
            && datagram.get(at + 1..at + 1 + dcid_len) == Some(dcid)
    };
    let min = dcid_len + MIN_OVERHEAD;
    (min..datagram.len())
        .filter(|&seg| starts_packet(seg))
        .find(|&seg| (seg..datagram.len()).step_by(seg).all(starts_packet))
}

fn crypto_reason(e: CryptoError) -> Undecrypted {
    match e {
        CryptoError::SampleTooShort => Undecrypted::TooShort,
        CryptoError::SecretLength { .. } => Undecrypted::BadSecret,
        CryptoError::Derivation | CryptoError::Authentication => Undecrypted::Authentication,
    }
}

/// Tries the current, next and previous phase keys as the key phase bit says; returns the
/// plaintext range and whether the keys advanced to the next phase.
fn try_app_keys(
    app: &mut AppKeys,
    phase: bool,
    un: &Unprotected,
    h: &PacketHeader<'_>,
    path: u32,
    pn: u64,
    scratch: &mut Vec<u8>,
) -> Result<(usize, usize, bool), CryptoError> {
    let open = |k: &PacketKeys, scratch: &mut Vec<u8>| {
        decrypt_into(
            h.packet,
            h.pn_offset,
            un,
            k,
            multipath::nonce(&k.iv(), path, pn),
            scratch,
        )
    };
    if phase == app.phase {
        return open(&app.current, scratch).map(|(a, n)| (a, n, false));
    }
    let next = app.next_keys()?;
    match open(next, scratch) {
        Ok((a, n)) => {
            app.advance();
            Ok((a, n, true))
        }
        Err(e) => match &app.previous {
            Some(prev) => open(prev, scratch).map(|(a, n)| (a, n, false)),
            None => Err(e),
        },
    }
}
