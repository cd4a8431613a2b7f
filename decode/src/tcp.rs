//! TCP segments (RFC 9293): a header validated once by [`TcpView::new`], after which every
//! accessor is infallible; the options a retransmission analysis needs (MSS, window scale,
//! SACK permitted, SACK blocks, timestamps) are read from the validated option bytes when
//! asked for ([`TcpView::options`]; reading them cannot fail).
//!
//! Options are read as Linux reads them (`tcp_parse_options`): a malformed option ends the
//! option list and is flagged ([`TcpOptions::malformed`]), the segment itself stays usable.

use serde::{Deserialize, Serialize};

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// At most this many SACK blocks fit in the 40 bytes of options (RFC 2018).
pub const MAX_SACK_BLOCKS: usize = 4;

/// Why bytes (or a frame) yielded no TCP segment. Every rejection is counted under one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpReject {
    /// IP carrying something other than TCP (or no IP at all).
    NotTcp,
    /// The bytes ended inside the TCP header or its options (often a short snap length).
    Truncated,
    /// The data offset is below 5 words: no header can be that short.
    BadDataOffset,
    /// A TCP segment inside an IP fragment (not reassembled: TCP is not fragmented on paths
    /// with a known MTU).
    Fragment,
}

impl TcpReject {
    /// All reasons, in a stable order (for reports).
    pub const ALL: [TcpReject; 4] = [
        Self::NotTcp,
        Self::Truncated,
        Self::BadDataOffset,
        Self::Fragment,
    ];

    /// The reason's name as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotTcp => "not_tcp",
            Self::Truncated => "truncated",
            Self::BadDataOffset => "bad_data_offset",
            Self::Fragment => "fragment",
        }
    }
}

/// A structured validation error of [`TcpView::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TcpError {
    /// Fewer bytes than the header (or the length its data offset announces).
    #[error("TCP header needs {required} bytes, {actual} present")]
    Truncated {
        /// Bytes the header needs.
        required: usize,
        /// Bytes present.
        actual: usize,
    },
    /// A data offset below 5 words.
    #[error("TCP data offset {words} words is below the minimum of 5")]
    BadDataOffset {
        /// The data offset field (32-bit words).
        words: u8,
    },
}

impl TcpError {
    /// The counted reason.
    pub fn reject(self) -> TcpReject {
        match self {
            Self::Truncated { .. } => TcpReject::Truncated,
            Self::BadDataOffset { .. } => TcpReject::BadDataOffset,
        }
    }
}

/// The control bits of a TCP header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN: no more data from the sender.
    pub fn fin(self) -> bool {
        self.0 & 0x01 != 0
    }
    /// SYN: synchronize sequence numbers.
    pub fn syn(self) -> bool {
        self.0 & 0x02 != 0
    }
    /// RST: reset the connection.
    pub fn rst(self) -> bool {
        self.0 & 0x04 != 0
    }
    /// PSH: push function.
    pub fn psh(self) -> bool {
        self.0 & 0x08 != 0
    }
    /// ACK: the acknowledgment number is significant.
    pub fn ack(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// URG: the urgent pointer is significant.
    pub fn urg(self) -> bool {
        self.0 & 0x20 != 0
    }
    /// ECE: ECN echo.
    pub fn ece(self) -> bool {
        self.0 & 0x40 != 0
    }
    /// CWR: congestion window reduced.
    pub fn cwr(self) -> bool {
        self.0 & 0x80 != 0
    }
}

/// The options of a TCP header that matter for loss and RTT analysis, owned and `Copy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2; SYN only).
    pub mss: Option<u16>,
    /// Window scale shift (kind 3; SYN only).
    pub window_scale: Option<u8>,
    /// SACK permitted (kind 4; SYN only).
    pub sack_permitted: bool,
    /// SACK blocks (kind 5): `[left, right)` sequence edges; the first `sack_count` are set.
    pub sack: [(u32, u32); MAX_SACK_BLOCKS],
    /// How many of `sack` are set.
    pub sack_count: u8,
    /// Timestamps (kind 8): TSval and TSecr.
    pub timestamps: Option<(u32, u32)>,
    /// An option had an impossible length; the options after it were not read.
    pub malformed: bool,
}

impl TcpOptions {
    /// The SACK blocks present, `[left, right)`.
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack[..usize::from(self.sack_count).min(MAX_SACK_BLOCKS)]
    }

    /// Reads an option list (the bytes after the fixed header, up to the data offset).
    #[inline]
    pub fn parse(bytes: &[u8]) -> Self {
        let mut o = Self::default();
        o.read(bytes);
        o
    }

    /// [`TcpOptions::parse`] into `self`, a default value (the options found are set): where
    /// the options are kept, without a copy.
    #[inline]
    pub fn read(&mut self, mut bytes: &[u8]) {
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        // Linux starts nearly every segment's options with NOP, NOP, timestamps: read those
        // twelve bytes at once, as the loop below would.
        if let Some((head, rest)) = bytes.split_first_chunk::<12>() {
            if head[..4] == [1, 1, 8, 10] {
                self.timestamps = Some((be32(&head[4..8]), be32(&head[8..])));
                bytes = rest;
            }
        }
        while let Some((&kind, rest)) = bytes.split_first() {
            match kind {
                0 => break,
                1 => {
                    bytes = rest;
                    continue;
                }
                _ => {}
            }
            let Some(&len) = rest.first() else {
                self.malformed = true;
                break;
            };
            let len = usize::from(len);
            let Some(body) = bytes.get(2..len).filter(|_| len >= 2) else {
                self.malformed = true;
                break;
            };
            match (kind, body.len()) {
                (2, 2) => self.mss = Some(u16::from_be_bytes([body[0], body[1]])),
                (3, 1) => self.window_scale = Some(body[0]),
                (4, 0) => self.sack_permitted = true,
                (5, n) if n > 0 && n.is_multiple_of(8) && n / 8 <= MAX_SACK_BLOCKS => {
                    for (i, block) in body.chunks_exact(8).enumerate() {
                        self.sack[i] = (be32(&block[..4]), be32(&block[4..]));
                    }
                    self.sack_count = (n / 8) as u8;
                }
                (8, 8) => self.timestamps = Some((be32(&body[..4]), be32(&body[4..]))),
                // A known option with the wrong length: Linux skips it; say so.
                (2..=5 | 8, _) => self.malformed = true,
                _ => {}
            }
            bytes = &bytes[len..];
        }
    }
}

/// A TCP segment (header and payload) validated once; accessors cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpView<'a> {
    header: &'a [u8],
    payload: &'a [u8],
}

impl<'a> TcpView<'a> {
    /// Validates `segment` (the TCP header, its options and the payload, cut to the IP length):
    /// the fixed header is present, the data offset is at least 5 words and within the bytes.
    pub fn new(segment: &'a [u8]) -> Result<Self, TcpError> {
        let Some(fixed) = segment.get(..MIN_HEADER_LEN) else {
            return Err(TcpError::Truncated {
                required: MIN_HEADER_LEN,
                actual: segment.len(),
            });
        };
        let words = fixed[12] >> 4;
        if words < 5 {
            return Err(TcpError::BadDataOffset { words });
        }
        let header_len = usize::from(words) * 4;
        let (Some(header), Some(payload)) = (segment.get(..header_len), segment.get(header_len..))
        else {
            return Err(TcpError::Truncated {
                required: header_len,
                actual: segment.len(),
            });
        };
        // The options are read when asked for: a view is copied on its way out of the decoder,
        // and a small one copies cheaply.
        Ok(Self { header, payload })
    }

    fn be16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.header[at], self.header[at + 1]])
    }

    fn be32(&self, at: usize) -> u32 {
        u32::from_be_bytes([
            self.header[at],
            self.header[at + 1],
            self.header[at + 2],
            self.header[at + 3],
        ])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.be16(0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.be16(2)
    }
    /// Sequence number of the first byte (of the SYN or FIN when flagged).
    pub fn seq(&self) -> u32 {
        self.be32(4)
    }
    /// Acknowledgment number (meaningful when [`TcpFlags::ack`]).
    pub fn ack(&self) -> u32 {
        self.be32(8)
    }
    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        self.header.len()
    }
    /// Control bits.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.header[13])
    }
    /// The window field as sent (unscaled).
    pub fn window(&self) -> u16 {
        self.be16(14)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        self.be16(18)
    }
    /// The header's options, read from its option bytes.
    // Inline (with `TcpOptions::parse`): returned from a call, the options were written field
    // by field and at once read back in wider pieces, a store-forwarding stall per segment.
    #[inline]
    pub fn options(&self) -> TcpOptions {
        TcpOptions::parse(&self.header[MIN_HEADER_LEN..])
    }
    /// The raw option bytes.
    pub fn option_bytes(&self) -> &'a [u8] {
        &self.header[MIN_HEADER_LEN..]
    }
    /// The payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// Sequence space the segment occupies: payload bytes, plus one each for SYN and FIN.
    pub fn seq_len(&self) -> u32 {
        let f = self.flags();
        // The payload is within an IP packet: < 2^32.
        (self.payload.len() as u32)
            .wrapping_add(u32::from(f.syn()))
            .wrapping_add(u32::from(f.fin()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A header with these options (padded with EOL to a multiple of 4) and payload.
    fn segment(options: &[u8], flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut opts = options.to_vec();
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
        }
        let words = u8::try_from(5 + opts.len() / 4).expect("options fit");
        let mut s = vec![
            0x9c,
            0x40,
            0x1b,
            0x59, // ports 40000 → 7001
            0,
            0,
            0x03,
            0xe8, // seq 1000
            0,
            0,
            0,
            77, // ack 77
            words << 4,
            flags,
            0xfa,
            0xf0, // window 64240
            0,
            0,
            0,
            0, // checksum, urgent
        ];
        s.extend_from_slice(&opts);
        s.extend_from_slice(payload);
        s
    }

    const SYN_OPTIONS: [u8; 20] = [
        2, 4, 0x05, 0xb4, // MSS 1460
        4, 2, // SACK permitted
        8, 10, 0, 0, 0, 9, 0, 0, 0, 0, // TS 9, 0
        1, // NOP
        3, 3, 7, // WS 7
    ];

    #[test]
    fn fields_and_syn_options() {
        let s = segment(&SYN_OPTIONS, 0x02, b"");
        let v = TcpView::new(&s).unwrap();
        assert_eq!((v.src_port(), v.dst_port()), (40_000, 7001));
        assert_eq!((v.seq(), v.ack(), v.window()), (1000, 77, 64_240));
        assert!(v.flags().syn() && !v.flags().ack());
        assert_eq!(v.header_len(), 40);
        assert_eq!(v.seq_len(), 1);
        let o = v.options();
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.window_scale, Some(7));
        assert!(o.sack_permitted && !o.malformed);
        assert_eq!(o.timestamps, Some((9, 0)));
    }

    #[test]
    fn sack_blocks_and_timestamps() {
        let mut opts = vec![1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6, 1, 1, 5, 18];
        for (l, r) in [(2000u32, 3000u32), (4000, 4500)] {
            opts.extend(l.to_be_bytes());
            opts.extend(r.to_be_bytes());
        }
        let s = segment(&opts, 0x10, b"data");
        let v = TcpView::new(&s).unwrap();
        assert_eq!(v.options().sack_blocks(), &[(2000, 3000), (4000, 4500)]);
        assert_eq!(v.options().timestamps, Some((5, 6)));
        assert_eq!(v.payload(), b"data");
        assert_eq!(v.seq_len(), 4);
    }

    #[test]
    fn malformed_option_keeps_the_segment() {
        // Option length 1 is impossible; a SACK of 7 bytes is the wrong length.
        for opts in [
            &[8u8, 1, 0, 0][..],
            &[5, 7, 0, 0, 0, 0, 0, 1, 0, 0][..],
            &[3][..],
        ] {
            let s = segment(opts, 0x10, b"x");
            let v = TcpView::new(&s).unwrap();
            assert!(v.options().malformed, "{opts:?}");
            assert_eq!(v.payload(), b"x");
        }
    }

    #[test]
    fn every_truncation_is_named() {
        let s = segment(&SYN_OPTIONS, 0x12, b"");
        for n in 0..s.len() {
            let e = TcpView::new(&s[..n]).unwrap_err();
            assert_eq!(e.reject(), TcpReject::Truncated, "at {n}");
        }
        let mut bad = s.clone();
        bad[12] = 0x40;
        assert_eq!(
            TcpView::new(&bad).unwrap_err(),
            TcpError::BadDataOffset { words: 4 }
        );
        assert_eq!(
            TcpReject::ALL.map(TcpReject::as_str),
            ["not_tcp", "truncated", "bad_data_offset", "fragment"]
        );
    }

    proptest! {
        /// Random bytes never panic; what validates has a consistent header and payload.
        #[test]
        fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(v) = TcpView::new(&bytes) {
                prop_assert!(v.header_len() >= MIN_HEADER_LEN);
                prop_assert_eq!(v.header_len() + v.payload().len(), bytes.len());
                prop_assert!(v.options().sack_blocks().len() <= MAX_SACK_BLOCKS);
            }
        }

        /// Every cut of a valid segment with random options is truncated or a shorter payload.
        #[test]
        fn every_cut(opts in proptest::collection::vec(any::<u8>(), 0..40),
                     payload in proptest::collection::vec(any::<u8>(), 0..32)) {
            let s = segment(&opts, 0x18, &payload);
            let whole = TcpView::new(&s).unwrap();
            prop_assert_eq!(whole.payload(), &payload[..]);
            for n in 0..s.len() {
                match TcpView::new(&s[..n]) {
                    Ok(v) => {
                        prop_assert_eq!(v.options(), whole.options());
                        prop_assert!(v.payload().len() < payload.len());
                    }
                    Err(e) => prop_assert_eq!(e.reject(), TcpReject::Truncated),
                }
            }
        }

        /// Options led by NOP, NOP, timestamps (read at once) read as the option loop reads
        /// them with one NOP less in front, whatever follows.
        #[test]
        fn timestamps_first(ts in proptest::collection::vec(any::<u8>(), 8..=8),
                            rest in proptest::collection::vec(any::<u8>(), 0..28),
                            cut in 0usize..40) {
            let mut opts = vec![1, 1, 8, 10];
            opts.extend(&ts);
            opts.extend(&rest);
            let opts = &opts[..cut.min(opts.len())];
            let o = TcpOptions::parse(opts);
            if let Some(one_nop_less) = opts.get(1..) {
                prop_assert_eq!(o, TcpOptions::parse(one_nop_less));
            }
        }
    }
}
