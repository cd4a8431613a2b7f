//! Deciding whether a UDP payload is KCP, without port configuration and without false positives.
//!
//! # Rules
//! A payload is **raw KCP** only if all of these hold:
//! 1. it is at least one 24-byte header long;
//! 2. the segments tile the payload exactly: every `cmd` is 81..=84, every `len` fits, and no
//!    byte is left over (ikcp senders never pad; ikcp's own receiver tolerates a short tail, we
//!    do not);
//! 3. ACK, WASK and WINS segments have `len == 0` and `frg == 0` (ikcp's `flush` builds them so);
//! 4. a PUSH with `frg > 0` carries payload (only the last fragment of a message can be short,
//!    and a message split into fragments is longer than one MSS);
//! 5. every segment has the same `conv` (one KCP object writes one datagram);
//! 6. every segment has the same `una` and `wnd` (`flush` computes both once and stamps them on
//!    every ACK, probe and PUSH it packs into the datagram) — can be switched off with
//!    [`DetectorConfig::require_uniform_una_wnd`] for implementations that do otherwise.
//!
//! For a random payload rule 2 alone passes with probability about 2⁻³⁴ per try (cmd 4/256 ×
//! an exact 32-bit length); the other rules make structured non-KCP payloads (DNS, QUIC, RTP)
//! fail on the first header, because their byte 4 is never 81..=84 together with an exact length.
//!
//! A payload is **kcp-go** if either
//! - its first 20 bytes are a `crypt none` header whose CRC-32 (IEEE, over the rest) matches
//!   (false-positive rate 2⁻³²), and the rest is an FEC packet or KCP segments that tile exactly;
//! - or it is an FEC data shard (type 0xf1, size field exact) whose segments pass the raw rules;
//!   an out-of-band packet (seqid 0xffffffff, type 0xf3, size exact); or an FEC parity shard
//!   (type 0xf2) on a port pair that already carried validated FEC data shards (a parity shard
//!   alone is random-looking bytes behind a 6-byte header: not enough evidence).
//!
//! **Forced ports** ([`DetectorConfig::forced_ports`], the CLI's `--kcp-port`): payloads to or
//! from these ports are KCP by configuration. Rules 3–6 are not applied there (only the wire
//! structure is), and a payload that is neither raw KCP nor `crypt none` kcp-go is reported as
//! [`Detection::EncryptedOrUnknown`] — encrypted kcp-go looks exactly like random bytes, so it can
//! be recognised only where the user says KCP runs.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::kcpgo::{self, CryptHeader, FecKind, FecPacket, KcpGoError, KcpGoPacket};
use super::segment::{Cmd, Segment, SegmentError, Segments, HEADER_LEN};

/// Detector settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetectorConfig {
    /// UDP ports (source or destination) whose payloads are KCP by configuration.
    pub forced_ports: Vec<u16>,
    /// Apply rule 6 (uniform `una`/`wnd` within a datagram) outside forced ports.
    pub require_uniform_una_wnd: bool,
    /// Most port pairs remembered as carrying kcp-go FEC (for parity shards); when full, the
    /// memory is cleared and the clearing counted.
    pub max_fec_flows: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            forced_ports: Vec::new(),
            require_uniform_una_wnd: true,
            max_fec_flows: 4096,
        }
    }
}

/// Why a payload was not taken as KCP (or, on a forced port, not decoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// Empty payload.
    Empty,
    /// Shorter than one 24-byte KCP header.
    TooShort,
    /// A `cmd` byte outside 81..=84.
    UnknownCmd,
    /// A segment's `len` runs past the payload, or bytes are left over after the last segment.
    TruncatedSegment,
    /// An ACK, WASK or WINS with payload.
    ControlWithPayload,
    /// An ACK, WASK or WINS with `frg != 0`.
    ControlWithFragment,
    /// A PUSH with `frg > 0` and no payload.
    FragmentWithoutPayload,
    /// Segments of one datagram with different `conv`.
    ConvMismatch,
    /// Segments of one datagram with different `una`.
    UnaMismatch,
    /// Segments of one datagram with different `wnd`.
    WndMismatch,
    /// kcp-go FEC header malformed (unknown type, size field wrong, out-of-band seqid wrong).
    FecInvalid,
    /// kcp-go FEC parity shard on a port pair with no validated FEC data shard yet.
    FecParityUnconfirmed,
    /// kcp-go framing verified (CRC or FEC) but the KCP segments inside are malformed.
    KcpGoInnerInvalid,
}

impl RejectReason {
    /// Every reason, in counter order.
    pub const ALL: [Self; 13] = [
        Self::Empty,
        Self::TooShort,
        Self::UnknownCmd,
        Self::TruncatedSegment,
        Self::ControlWithPayload,
        Self::ControlWithFragment,
        Self::FragmentWithoutPayload,
        Self::ConvMismatch,
        Self::UnaMismatch,
        Self::WndMismatch,
        Self::FecInvalid,
        Self::FecParityUnconfirmed,
        Self::KcpGoInnerInvalid,
    ];

    /// Snake-case name (as in JSON).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooShort => "too_short",
            Self::UnknownCmd => "unknown_cmd",
            Self::TruncatedSegment => "truncated_segment",
            Self::ControlWithPayload => "control_with_payload",
            Self::ControlWithFragment => "control_with_fragment",
            Self::FragmentWithoutPayload => "fragment_without_payload",
            Self::ConvMismatch => "conv_mismatch",
            Self::UnaMismatch => "una_mismatch",
            Self::WndMismatch => "wnd_mismatch",
            Self::FecInvalid => "fec_invalid",
            Self::FecParityUnconfirmed => "fec_parity_unconfirmed",
            Self::KcpGoInnerInvalid => "kcpgo_inner_invalid",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The KCP segments of a detected payload (all validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KcpDatagram<'a> {
    bytes: &'a [u8],
    count: usize,
    /// The capture cut the datagram: its last segment may be cut ([`Segment::is_cut`]).
    cut: bool,
    /// Of a cut datagram, the bytes past the last segment seen (whole or cut).
    unseen: usize,
}

impl<'a> KcpDatagram<'a> {
    /// The segment bytes (header of the first segment to the end of the last).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.count
    }
    /// The segments (validated at detection, so no errors).
    pub fn segments(&self) -> ValidSegments<'a> {
        ValidSegments(if self.cut {
            Segments::new_cut(self.bytes)
        } else {
            Segments::new(self.bytes)
        })
    }
    /// Whether the capture cut the datagram ([`Detector::classify_cut`]).
    pub fn is_cut(&self) -> bool {
        self.cut
    }
    /// Of a datagram the capture cut, the bytes past the last segment seen (whole or cut):
    /// segments whose headers the cut took (0 when the last segment seen ends the datagram).
    pub fn unseen_bytes(&self) -> usize {
        self.unseen
    }
}

/// Iterator over already validated segments.
#[derive(Clone, Debug)]
pub struct ValidSegments<'a>(Segments<'a>);

impl<'a> Iterator for ValidSegments<'a> {
    type Item = Segment<'a>;
    #[inline]
    fn next(&mut self) -> Option<Segment<'a>> {
        self.0.next().and_then(Result::ok)
    }
}

/// What a UDP payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detection<'a> {
    /// Raw ikcp segments.
    Raw(KcpDatagram<'a>),
    /// kcp-go framed packet (segments empty for parity shards and out-of-band packets).
    KcpGo {
        /// The framing.
        packet: KcpGoPacket<'a>,
        /// Its KCP segments.
        datagram: KcpDatagram<'a>,
    },
    /// On a forced port, but neither raw KCP nor `crypt none` kcp-go: encrypted kcp-go or
    /// something unknown. `reason` is why raw decoding failed.
    EncryptedOrUnknown {
        /// Why the raw KCP decode failed.
        reason: RejectReason,
    },
    /// Not KCP.
    NotKcp(RejectReason),
}

impl<'a> Detection<'a> {
    /// The KCP segments, if any were decoded.
    pub fn segments(&self) -> Option<ValidSegments<'a>> {
        match self {
            Self::Raw(d) | Self::KcpGo { datagram: d, .. } => Some(d.segments()),
            _ => None,
        }
    }
    /// True for raw KCP and kcp-go.
    pub fn is_kcp(&self) -> bool {
        matches!(self, Self::Raw(_) | Self::KcpGo { .. })
    }
}

/// Counters of a [`Detector`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetectorStats {
    /// Payloads decoded as raw KCP.
    pub raw: u64,
    /// Payloads decoded as kcp-go carrying KCP segments.
    pub kcpgo: u64,
    /// kcp-go FEC parity shards.
    pub kcpgo_parity: u64,
    /// kcp-go out-of-band packets.
    pub kcpgo_oob: u64,
    /// Payloads on forced ports that are encrypted kcp-go or unknown.
    pub encrypted_or_unknown: u64,
    /// KCP segments decoded (raw and kcp-go).
    pub segments: u64,
    /// Times the memory of kcp-go FEC port pairs was full and cleared.
    pub fec_flows_cleared: u64,
    /// Payloads rejected, by reason (indexed like [`RejectReason::ALL`]).
    pub rejected: [u64; 13],
}

impl DetectorStats {
    /// Rejections by reason, with their counts (zero counts included).
    pub fn rejections(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL
            .iter()
            .map(|r| (*r, self.rejected.get(r.index()).copied().unwrap_or(0)))
    }
    /// Count for one reason.
    pub fn rejected_for(&self, reason: RejectReason) -> u64 {
        self.rejected.get(reason.index()).copied().unwrap_or(0)
    }
    /// Total payloads rejected.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// Applies the detection rules to UDP payloads and counts the outcome.
#[derive(Clone, Debug, Default)]
pub struct Detector {
    config: DetectorConfig,
    fec_flows: HashSet<(u16, u16)>,
    stats: DetectorStats,
}

/// Which rules to apply to a run of segments.
#[derive(Clone, Copy)]
enum Rules {
    /// Wire structure only (forced ports, CRC-verified kcp-go).
    Structural,
    /// All rules (no other evidence).
    Full { uniform_una_wnd: bool },
}

fn segment_reason(error: SegmentError) -> RejectReason {
    match error {
        SegmentError::UnknownCmd(_) => RejectReason::UnknownCmd,
        SegmentError::Truncated { .. } => RejectReason::TruncatedSegment,
    }
}

/// Checks that `bytes` are one or more KCP segments that tile it exactly under `rules`.
/// Checks that `bytes` tile into KCP segments under `rules`. The fast path evaluates the rules
/// without a data-dependent branch per rule (a real mix of PUSH and ACK datagrams defeats branch
/// prediction); only a datagram that fails runs [`check_exact`] to name the reason.
#[inline]
fn check(bytes: &[u8], rules: Rules) -> Result<KcpDatagram<'_>, RejectReason> {
    let uniform = match rules {
        Rules::Structural => return check_exact(bytes, rules),
        Rules::Full { uniform_una_wnd } => uniform_una_wnd,
    };
    let Some((first, _)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return check_exact(bytes, rules);
    };
    let conv0 = &first[0..4];
    let wnd0 = &first[6..8];
    let una0 = &first[16..20];
    let mut rest = bytes;
    let mut count = 0usize;
    let mut bad = false;
    while let Some((h, after)) = rest.split_first_chunk::<HEADER_LEN>() {
        let cmd = h[4];
        let frg = h[5];
        let len = u32::from_le_bytes([h[20], h[21], h[22], h[23]]);
        if cmd.wrapping_sub(81) > 3 || len as usize > after.len() {
            return check_exact(bytes, rules);
        }
        let push = cmd == 81;
        let empty = len == 0;
        bad |= (!push & (!empty | (frg != 0)))
            | (push & (frg != 0) & empty)
            | (&h[0..4] != conv0)
            | (uniform & ((&h[16..20] != una0) | (&h[6..8] != wnd0)));
        count += 1;
        rest = after.get(len as usize..).unwrap_or(&[]);
    }
    if bad || !rest.is_empty() {
        return check_exact(bytes, rules);
    }
    Ok(KcpDatagram {
        bytes,
        count,
        cut: false,
        unseen: 0,
    })
}

/// The rules one by one, in order, naming the first that fails.
fn check_exact(bytes: &[u8], rules: Rules) -> Result<KcpDatagram<'_>, RejectReason> {
    if bytes.is_empty() {
        return Err(RejectReason::Empty);
    }
    if bytes.len() < HEADER_LEN {
        return Err(RejectReason::TooShort);
    }
    let mut count = 0usize;
    let mut first: Option<(u32, u32, u16)> = None;
    for item in Segments::new(bytes) {
        let segment = item.map_err(|e| segment_reason(e.error))?;
        segment_rules(&segment, rules, &mut first)?;
        count = count.saturating_add(1);
    }
    Ok(KcpDatagram {
        bytes,
        count,
        cut: false,
        unseen: 0,
    })
}

/// [`check_exact`] for a datagram the capture cut short: `bytes` are the first of `declared`
/// bytes. The segments as far as captured follow the rules (the one the cut ends judged by
/// its header), and the lengths their headers give fit in `declared`.
fn check_cut(bytes: &[u8], declared: usize, rules: Rules) -> Result<KcpDatagram<'_>, RejectReason> {
    if bytes.is_empty() {
        return Err(RejectReason::Empty);
    }
    if bytes.len() < HEADER_LEN {
        return Err(RejectReason::TooShort);
    }
    let mut count = 0usize;
    let mut end = 0usize;
    let mut first: Option<(u32, u32, u16)> = None;
    for item in Segments::new_cut(bytes) {
        let segment = item.map_err(|e| segment_reason(e.error))?;
        segment_rules(&segment, rules, &mut first)?;
        let len = usize::try_from(segment.len()).unwrap_or(usize::MAX);
        end = end.saturating_add(HEADER_LEN).saturating_add(len);
        count = count.saturating_add(1);
    }
    if end > declared {
        return Err(RejectReason::TruncatedSegment);
    }
    Ok(KcpDatagram {
        bytes,
        count,
        cut: true,
        unseen: declared - end,
    })
}

/// The rules on one segment (all but structure with [`Rules::Full`]), `first` the conv, una
/// and wnd of the datagram's first segment (set by it). Payload presence is the header's
/// `len`, so a segment the capture cut is judged as sent.
fn segment_rules(
    segment: &Segment<'_>,
    rules: Rules,
    first: &mut Option<(u32, u32, u16)>,
) -> Result<(), RejectReason> {
    let Rules::Full { uniform_una_wnd } = rules else {
        return Ok(());
    };
    let empty = segment.is_empty();
    if segment.cmd() == Cmd::Push {
        if segment.frg() > 0 && empty {
            return Err(RejectReason::FragmentWithoutPayload);
        }
    } else {
        if !empty {
            return Err(RejectReason::ControlWithPayload);
        }
        if segment.frg() != 0 {
            return Err(RejectReason::ControlWithFragment);
        }
    }
    match *first {
        None => *first = Some((segment.conv(), segment.una(), segment.wnd())),
        Some((conv, una, wnd)) => {
            if segment.conv() != conv {
                return Err(RejectReason::ConvMismatch);
            }
            if uniform_una_wnd && segment.una() != una {
                return Err(RejectReason::UnaMismatch);
            }
            if uniform_una_wnd && segment.wnd() != wnd {
                return Err(RejectReason::WndMismatch);
            }
        }
    }
    Ok(())
}

fn fec_reason(error: KcpGoError) -> RejectReason {
    match error {
        KcpGoError::Kcp(_) => RejectReason::KcpGoInnerInvalid,
        _ => RejectReason::FecInvalid,
    }
}

impl Detector {
    /// A detector with `config`.
    pub fn new(config: DetectorConfig) -> Self {
        Self {
            config,
            fec_flows: HashSet::new(),
            stats: DetectorStats::default(),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> &DetectorStats {
        &self.stats
    }

    /// True if `port` is a forced KCP port.
    #[inline]
    pub fn is_forced(&self, port: u16) -> bool {
        !self.config.forced_ports.is_empty() && self.config.forced_ports.contains(&port)
    }

    /// Classifies one UDP payload sent from `src_port` to `dst_port`, and counts the outcome.
    pub fn classify<'a>(
        &mut self,
        src_port: u16,
        dst_port: u16,
        payload: &'a [u8],
    ) -> Detection<'a> {
        let forced = self.is_forced(src_port) || self.is_forced(dst_port);
        let detection = self.classify_inner(forced, (src_port, dst_port), payload);
        self.count(&detection);
        detection
    }

    /// [`Detector::classify`] for a payload the capture cut short: `captured` of the
    /// `declared` bytes its UDP header gives. Raw KCP whose segments as far as captured follow
    /// the rules is detected, the segment the cut ends included with its captured payload;
    /// kcp-go is not (its checksum and FEC cover the whole datagram): on a forced port it is
    /// [`Detection::EncryptedOrUnknown`], as are encrypted packets. [`Detection::NotKcp`] is
    /// not counted in [`DetectorStats`] (the caller counts the frame as cut).
    pub fn classify_cut<'a>(
        &mut self,
        src_port: u16,
        dst_port: u16,
        captured: &'a [u8],
        declared: usize,
    ) -> Detection<'a> {
        let forced = self.is_forced(src_port) || self.is_forced(dst_port);
        let rules = if forced {
            Rules::Structural
        } else {
            self.full_rules()
        };
        let detection = match check_cut(captured, declared, rules) {
            Ok(datagram) => Detection::Raw(datagram),
            Err(reason) if forced => Detection::EncryptedOrUnknown { reason },
            // The caller counts it (a cut datagram of no known kind is a truncated frame).
            Err(reason) => return Detection::NotKcp(reason),
        };
        self.count(&detection);
        detection
    }

    fn count(&mut self, detection: &Detection<'_>) {
        let s = &mut self.stats;
        match detection {
            Detection::Raw(d) => {
                s.raw = s.raw.saturating_add(1);
                s.segments = s.segments.saturating_add(d.count as u64);
            }
            Detection::KcpGo { packet, datagram } => {
                match packet.fec.map(|f| f.kind()) {
                    Some(FecKind::Parity) => s.kcpgo_parity = s.kcpgo_parity.saturating_add(1),
                    Some(FecKind::Oob) => s.kcpgo_oob = s.kcpgo_oob.saturating_add(1),
                    _ => s.kcpgo = s.kcpgo.saturating_add(1),
                }
                s.segments = s.segments.saturating_add(datagram.count as u64);
            }
            Detection::EncryptedOrUnknown { .. } => {
                s.encrypted_or_unknown = s.encrypted_or_unknown.saturating_add(1);
            }
            Detection::NotKcp(reason) => {
                if let Some(c) = s.rejected.get_mut(reason.index()) {
                    *c = c.saturating_add(1);
                }
            }
        }
    }

    fn full_rules(&self) -> Rules {
        Rules::Full {
            uniform_una_wnd: self.config.require_uniform_una_wnd,
        }
    }

    fn classify_inner<'a>(
        &mut self,
        forced: bool,
        ports: (u16, u16),
        payload: &'a [u8],
    ) -> Detection<'a> {
        let rules = if forced {
            Rules::Structural
        } else {
            self.full_rules()
        };
        // 1. Raw KCP.
        let raw_reason = match check(payload, rules) {
            Ok(datagram) => return Detection::Raw(datagram),
            Err(reason) => reason,
        };
        // 2. kcp-go with the `crypt none` header: cheap pre-check before computing the CRC.
        if let Some(body) = payload.get(kcpgo::CRYPT_HEADER_LEN..) {
            let plausible = FecPacket::looks_like_fec(body)
                || body.get(4).is_some_and(|&c| Cmd::from_u8(c).is_some());
            if plausible {
                if let Ok(crypt) = CryptHeader::from_slice(payload) {
                    return self.after_crypt(Some(crypt), crypt.body(), Rules::Structural, ports);
                }
            }
        }
        // 3. kcp-go FEC without the crypto header.
        if FecPacket::looks_like_fec(payload) {
            let detection = self.after_crypt(None, payload, rules, ports);
            if detection.is_kcp() || !forced {
                return detection;
            }
        }
        if forced {
            Detection::EncryptedOrUnknown { reason: raw_reason }
        } else {
            Detection::NotKcp(raw_reason)
        }
    }

    /// Decodes what follows the (optional, verified) crypto header.
    fn after_crypt<'a>(
        &mut self,
        crypt: Option<CryptHeader<'a>>,
        body: &'a [u8],
        rules: Rules,
        ports: (u16, u16),
    ) -> Detection<'a> {
        let empty = KcpDatagram {
            bytes: &[],
            count: 0,
            cut: false,
            unseen: 0,
        };
        if !FecPacket::looks_like_fec(body) {
            return match check(body, rules) {
                Ok(datagram) => Detection::KcpGo {
                    packet: KcpGoPacket {
                        crypt,
                        fec: None,
                        segments: datagram.bytes,
                    },
                    datagram,
                },
                Err(_) => Detection::NotKcp(RejectReason::KcpGoInnerInvalid),
            };
        }
        let fec = match FecPacket::from_slice(body) {
            Ok(fec) => fec,
            Err(e) => return Detection::NotKcp(fec_reason(e)),
        };
        let pair = (ports.0.min(ports.1), ports.0.max(ports.1));
        match fec.kind() {
            FecKind::Data => match check(fec.payload(), rules) {
                Ok(datagram) => {
                    self.learn_fec_flow(pair);
                    Detection::KcpGo {
                        packet: KcpGoPacket {
                            crypt,
                            fec: Some(fec),
                            segments: datagram.bytes,
                        },
                        datagram,
                    }
                }
                Err(_) => Detection::NotKcp(RejectReason::KcpGoInnerInvalid),
            },
            FecKind::Parity => {
                let confirmed = crypt.is_some()
                    || matches!(rules, Rules::Structural)
                    || self.fec_flows.contains(&pair);
                if confirmed {
                    Detection::KcpGo {
                        packet: KcpGoPacket {
                            crypt,
                            fec: Some(fec),
                            segments: &[],
                        },
                        datagram: empty,
                    }
                } else {
                    Detection::NotKcp(RejectReason::FecParityUnconfirmed)
                }
            }
            FecKind::Oob => Detection::KcpGo {
                packet: KcpGoPacket {
                    crypt,
                    fec: Some(fec),
                    segments: &[],
                },
                datagram: empty,
            },
        }
    }

    fn learn_fec_flow(&mut self, pair: (u16, u16)) {
        if self.fec_flows.contains(&pair) {
            return;
        }
        if self.fec_flows.len() >= self.config.max_fec_flows {
            self.fec_flows.clear();
            self.stats.fec_flows_cleared = self.stats.fec_flows_cleared.saturating_add(1);
        }
        self.fec_flows.insert(pair);
    }
}

/// Classifies a payload with default settings and no forced ports (stateless convenience).
pub fn is_kcp(payload: &[u8]) -> bool {
    Detector::default().classify(0, 0, payload).is_kcp()
}
