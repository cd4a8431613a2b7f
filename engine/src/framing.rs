//! How an application cuts its byte stream into messages (`--framing`), and the delimiter that
//! cuts one stream's bytes as they are captured: a QUIC stream's STREAM frames here, a TCP
//! byte stream's segments alike (offsets are the stream's, pieces may come twice, late or
//! past a hole). Sans-IO: bytes and offsets in, message ranges out.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;

/// The length field of a length-prefixed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LenField {
    /// 16-bit big-endian.
    U16Be,
    /// 16-bit little-endian.
    U16Le,
    /// 32-bit big-endian.
    U32Be,
    /// 32-bit little-endian.
    U32Le,
}

impl LenField {
    fn width(self) -> u64 {
        match self {
            LenField::U16Be | LenField::U16Le => 2,
            LenField::U32Be | LenField::U32Le => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LenField::U16Be => "u16be",
            LenField::U16Le => "u16le",
            LenField::U32Be => "u32be",
            LenField::U32Le => "u32le",
        }
    }

    /// The value of the field at the start of `b` (`b` holds at least its width).
    fn read(self, b: &[u8]) -> Option<u64> {
        Some(match self {
            LenField::U16Be => u64::from(u16::from_be_bytes(b.get(..2)?.try_into().ok()?)),
            LenField::U16Le => u64::from(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
            LenField::U32Be => u64::from(u32::from_be_bytes(b.get(..4)?.try_into().ok()?)),
            LenField::U32Le => u64::from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        })
    }
}

/// How messages follow each other in a byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Framing {
    /// Each piece the sender wrote at once (a QUIC STREAM frame) is a message: the default.
    #[default]
    Frames,
    /// Every message is this many bytes.
    Fixed(u32),
    /// A length field at byte `at` of each message gives the bytes that follow the field.
    Len {
        /// The field's offset in the message.
        at: u32,
        /// Its width and byte order.
        field: LenField,
    },
    /// Each message ends with a newline (`\n`).
    Line,
}

/// Why a `--framing` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FramingError(String);

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FramingError {}

impl FromStr for Framing {
    type Err = FramingError;

    /// `frames`, `fixed:N`, `len:u16be@K` (`u16be`, `u16le`, `u32be`, `u32le`), or `line`.
    fn from_str(s: &str) -> Result<Self, FramingError> {
        let bad = |why: &str| {
            FramingError(format!(
                "{why} in {s:?}: expected fixed:N, len:u16be@K, len:u16le@K, len:u32be@K, \
                 len:u32le@K, line or frames"
            ))
        };
        let t = s.trim();
        match t.split_once(':') {
            None if t == "line" => Ok(Framing::Line),
            None if t == "frames" => Ok(Framing::Frames),
            None => Err(bad("unknown framing")),
            Some(("fixed", n)) => match n.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Framing::Fixed(n)),
                Ok(_) => Err(bad("a fixed message size must be at least 1 byte")),
                Err(_) => Err(bad("the fixed message size is not a number")),
            },
            Some(("len", spec)) => {
                let (field, at) = spec.split_once('@').unwrap_or((spec, "0"));
                let field = match field {
                    "u16be" => LenField::U16Be,
                    "u16le" => LenField::U16Le,
                    "u32be" => LenField::U32Be,
                    "u32le" => LenField::U32Le,
                    _ => return Err(bad("unknown length field")),
                };
                let at = at
                    .parse::<u32>()
                    .map_err(|_| bad("the length field's offset is not a number"))?;
                Ok(Framing::Len { at, field })
            }
            Some(_) => Err(bad("unknown framing")),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Framing::Frames => f.write_str("frames"),
            Framing::Fixed(n) => write!(f, "fixed:{n}"),
            Framing::Len { at, field } => write!(f, "len:{}@{at}", field.name()),
            Framing::Line => f.write_str("line"),
        }
    }
}

/// One message the delimiter cut: its stream range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delimited {
    /// Stream offset of its first byte.
    pub start: u64,
    /// Stream offset past its last byte.
    pub end: u64,
}

/// Bytes of each message a delimiter keeps (the rest is counted, not kept): the message's head,
/// enough to name it by content or application id.
pub const MAX_HEAD: usize = 256;
/// Bytes a delimiter holds past a hole, waiting for the hole to fill (a retransmission);
/// beyond, it gives up on the hole (counted) and starts again at the next piece.
pub const MAX_AHEAD: usize = 16 << 10;
/// Ranges a [`Framing::Frames`] delimiter remembers as cut (older ones are forgotten).
const MAX_CUT_RANGES: usize = 256;

/// Cuts one byte stream into messages by a [`Framing`], from pieces seen in any order.
#[derive(Debug)]
pub struct Delimiter {
    framing: Framing,
    /// Bytes it holds past a hole before giving up on the hole ([`MAX_AHEAD`] unless set).
    max_ahead: usize,
    /// The first piece was seen (where the stream is joined: at its start, or mid-stream when
    /// the capture began after it).
    started: bool,
    /// Start of the message being gathered.
    cursor: u64,
    /// Offset past the contiguous bytes received from `cursor` on.
    known: u64,
    /// The gathered message's first bytes (at most [`MAX_HEAD`]).
    head: Vec<u8>,
    /// End of the gathered message, once known.
    end: Option<u64>,
    /// Pieces past a hole, by offset.
    ahead: BTreeMap<u64, Vec<u8>>,
    /// Bytes held in `ahead`.
    ahead_bytes: usize,
    /// [`Framing::Frames`]: the ranges already cut, disjoint, sorted.
    cut: VecDeque<(u64, u64)>,
    /// Holes given up on (their bytes never came within [`MAX_AHEAD`]).
    pub holes_given_up: u64,
    /// Pieces held past a hole that were dropped when it was given up on.
    pub evicted_pieces: u64,
    /// The stream's final size, once its end (a FIN) was seen.
    final_size: Option<u64>,
}

impl Default for Delimiter {
    fn default() -> Self {
        Self::new(Framing::default())
    }
}

impl Delimiter {
    /// A delimiter for one stream cut by `framing`.
    pub fn new(framing: Framing) -> Self {
        Self {
            framing,
            max_ahead: MAX_AHEAD,
            started: false,
            cursor: 0,
            known: 0,
            head: Vec::new(),
            end: None,
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            cut: VecDeque::new(),
            holes_given_up: 0,
            evicted_pieces: 0,
            final_size: None,
        }
    }

    /// The same delimiter holding up to `max_ahead` bytes past a hole (a TCP receiver holds
    /// out-of-order data up to its receive window, far more than [`MAX_AHEAD`]).
    pub fn holding(mut self, max_ahead: usize) -> Self {
        self.max_ahead = max_ahead;
        self
    }

    /// Bytes held past a hole now.
    pub fn held(&self) -> usize {
        self.ahead_bytes
    }

    /// The piece `data` at stream offset `offset`: `emit` is called with each message it
    /// completes (its range and its first bytes, at most [`MAX_HEAD`]). Bytes seen before are
    /// ignored; a capture joined mid-stream starts at the first piece seen (for `fixed:N`, at
    /// the next multiple of N).
    pub fn push(&mut self, offset: u64, data: &[u8], mut emit: impl FnMut(Delimited, &[u8])) {
        if data.is_empty() {
            return;
        }
        if self.framing == Framing::Frames {
            self.push_frame(offset, data, &mut emit);
            return;
        }
        if !self.started {
            self.started = true;
            self.restart(offset);
        }
        let end = offset.saturating_add(data.len() as u64);
        if end <= self.known {
            return;
        }
        if offset > self.known {
            self.hold(offset, data, &mut emit);
            return;
        }
        let from = usize::try_from(self.known - offset).unwrap_or(usize::MAX);
        self.feed(data.get(from..).unwrap_or_default(), &mut emit);
        self.drain_ahead(&mut emit);
    }

    /// A delimiter for one stream cut by `framing` that is known to begin in the capture: a
    /// later piece seen first (the first one lost, or reordered) waits for the bytes before
    /// it instead of being taken for the point where the capture joined the stream.
    pub fn from_start(framing: Framing) -> Self {
        Self {
            started: true,
            ..Self::new(framing)
        }
    }

    /// The stream ends at `final_size` (its sender said so: a FIN).
    pub fn end_at(&mut self, final_size: u64) {
        self.final_size = Some(final_size);
    }

    /// Whether every byte up to the stream's end was cut: nothing more can come but copies
    /// of bytes seen.
    pub fn is_finished(&self) -> bool {
        let Some(f) = self.final_size else {
            return false;
        };
        match self.framing {
            // Every frame's bytes, from the first.
            Framing::Frames => {
                self.cut.len() == 1 && self.cut.front().is_some_and(|r| r.0 == 0 && r.1 >= f)
            }
            _ => self.started && self.known >= f && self.ahead.is_empty(),
        }
    }

    /// Starts cutting at `offset` (aligned up for fixed-size messages), dropping what was
    /// gathered.
    fn restart(&mut self, offset: u64) {
        let at = match self.framing {
            Framing::Fixed(n) => offset.div_ceil(u64::from(n)).saturating_mul(u64::from(n)),
            _ => offset,
        };
        self.cursor = at;
        self.known = at;
        self.head.clear();
        self.end = None;
    }

    /// Holds a piece past a hole; past its bound, gives up on the hole.
    fn hold(&mut self, offset: u64, data: &[u8], emit: &mut impl FnMut(Delimited, &[u8])) {
        let e = self.ahead.entry(offset).or_default();
        if data.len() > e.len() {
            self.ahead_bytes += data.len() - e.len();
            *e = data.to_vec();
        }
        if self.ahead_bytes > self.max_ahead {
            self.give_up(emit);
        }
    }

    /// The bytes from `offset` back to those cut so far will never be seen (the receiver
    /// acknowledged them before this capture saw them: sent before it began): cutting starts
    /// again at the first piece held from `offset` on, or else at the next piece, as where the
    /// capture joined the stream. False, with nothing done, when no byte below `offset` is
    /// missing.
    pub fn skip_unseen(&mut self, offset: u64, emit: &mut impl FnMut(Delimited, &[u8])) -> bool {
        if !self.started || self.framing == Framing::Frames || self.known >= offset {
            return false;
        }
        let kept = self.ahead.split_off(&offset);
        self.evicted_pieces += self.ahead.len() as u64;
        self.ahead = kept;
        self.ahead_bytes = self.ahead.values().map(Vec::len).sum();
        match self.ahead.keys().next() {
            Some(&first) => {
                self.restart(first);
                self.drain_ahead(emit);
            }
            None => self.started = false,
        }
        true
    }

    /// Gives up on the hole before the pieces held (counted): cutting starts again at the
    /// first of them, and those that cannot follow it are dropped (counted).
    pub fn give_up(&mut self, emit: &mut impl FnMut(Delimited, &[u8])) {
        let Some(&first) = self.ahead.keys().next() else {
            return;
        };
        self.holes_given_up += 1;
        self.restart(first);
        self.drain_ahead(emit);
        self.evicted_pieces += self.ahead.len() as u64;
        self.ahead.clear();
        self.ahead_bytes = 0;
    }

    /// Feeds the pieces held past the hole that now follow the contiguous bytes.
    fn drain_ahead(&mut self, emit: &mut impl FnMut(Delimited, &[u8])) {
        while let Some((&off, _)) = self.ahead.first_key_value() {
            if off > self.known {
                break;
            }
            let Some((_, piece)) = self.ahead.pop_first() else {
                break;
            };
            self.ahead_bytes -= piece.len();
            let end = off.saturating_add(piece.len() as u64);
            if end > self.known {
                let from = usize::try_from(self.known - off).unwrap_or(usize::MAX);
                self.feed(piece.get(from..).unwrap_or_default(), emit);
            }
        }
    }

    /// Contiguous new bytes (starting at `known`).
    fn feed(&mut self, mut d: &[u8], emit: &mut impl FnMut(Delimited, &[u8])) {
        while !d.is_empty() {
            let end = match (self.end, self.framing) {
                (Some(e), _) => Some(e),
                (None, Framing::Fixed(n)) => Some(self.cursor.saturating_add(u64::from(n))),
                (None, Framing::Len { at, field }) => {
                    let need = u64::from(at) + field.width();
                    let have = self.known - self.cursor;
                    if have < need {
                        let take = usize::try_from(need - have)
                            .unwrap_or(usize::MAX)
                            .min(d.len());
                        self.take(&d[..take]);
                        d = &d[take..];
                        continue;
                    }
                    let len = self
                        .head
                        .get(usize::try_from(at).unwrap_or(usize::MAX)..)
                        .and_then(|b| field.read(b))
                        .unwrap_or(0);
                    Some(self.cursor.saturating_add(need).saturating_add(len))
                }
                (None, Framing::Line) => d
                    .iter()
                    .position(|b| *b == b'\n')
                    .map(|i| self.known + i as u64 + 1),
                (None, Framing::Frames) => None,
            };
            self.end = end;
            let take = match end {
                Some(e) => usize::try_from(e - self.known)
                    .unwrap_or(usize::MAX)
                    .min(d.len()),
                None => d.len(),
            };
            self.take(&d[..take]);
            d = &d[take..];
            if let Some(e) = end.filter(|e| *e == self.known) {
                emit(
                    Delimited {
                        start: self.cursor,
                        end: e,
                    },
                    &self.head,
                );
                self.cursor = e;
                self.head.clear();
                self.end = None;
            }
        }
    }

    /// Bytes of the gathered message received: kept up to [`MAX_HEAD`], counted all.
    fn take(&mut self, b: &[u8]) {
        let room = MAX_HEAD.saturating_sub(self.head.len()).min(b.len());
        self.head.extend_from_slice(&b[..room]);
        self.known += b.len() as u64;
    }

    /// [`Framing::Frames`]: the piece's bytes not cut before are a message (one per stretch
    /// between ranges already cut).
    fn push_frame(&mut self, offset: u64, data: &[u8], emit: &mut impl FnMut(Delimited, &[u8])) {
        let end = offset.saturating_add(data.len() as u64);
        // The common case first: the frame goes on where the stream's cut bytes end.
        if let Some(last) = self.cut.back_mut().filter(|r| r.1 == offset) {
            last.1 = end;
            emit(
                Delimited { start: offset, end },
                &data[..data.len().min(MAX_HEAD)],
            );
            return;
        }
        let mut fresh: smallvec::SmallVec<[(u64, u64); 2]> = smallvec::SmallVec::new();
        let mut cursor = offset;
        let from = self.cut.partition_point(|r| r.1 <= offset);
        for &(s, e) in self.cut.range(from..) {
            if s >= end {
                break;
            }
            if cursor < s {
                fresh.push((cursor, s));
            }
            cursor = cursor.max(e);
        }
        if cursor < end {
            fresh.push((cursor, end));
        }
        for &(s, e) in &fresh {
            let a = usize::try_from(s - offset).unwrap_or(usize::MAX);
            let b = usize::try_from(e - offset).unwrap_or(usize::MAX);
            let bytes = data.get(a..b).unwrap_or_default();
            emit(
                Delimited { start: s, end: e },
                &bytes[..bytes.len().min(MAX_HEAD)],
            );
            let at = self.cut.partition_point(|r| r.0 < s);
            self.cut.insert(at, (s, e));
        }
        // Merge touching ranges, then forget the oldest past the bound.
        let mut i = 1;
        while i < self.cut.len() {
            if self.cut[i - 1].1 >= self.cut[i].0 {
                self.cut[i - 1].1 = self.cut[i - 1].1.max(self.cut[i].1);
                self.cut.remove(i);
            } else {
                i += 1;
            }
        }
        while self.cut.len() > MAX_CUT_RANGES {
            self.cut.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_all(framing: Framing, pieces: &[(u64, &[u8])]) -> Vec<(u64, u64, Vec<u8>)> {
        let mut d = Delimiter::new(framing);
        let mut out = Vec::new();
        for (off, data) in pieces {
            d.push(*off, data, |m, head| {
                out.push((m.start, m.end, head.to_vec()));
            });
        }
        out
    }

    /// Length-prefixed messages of sizes 1..=n, back to back.
    fn len_stream(n: usize) -> (Vec<u8>, Vec<(u64, u64)>) {
        let (mut s, mut ranges) = (Vec::new(), Vec::new());
        for i in 1..=n {
            let start = s.len() as u64;
            s.extend_from_slice(&(i as u16).to_be_bytes());
            s.extend((0..i).map(|j| (i * 7 + j) as u8));
            ranges.push((start, s.len() as u64));
        }
        (s, ranges)
    }

    #[test]
    fn parses_and_names_every_framing() {
        for (text, f) in [
            ("fixed:600", Framing::Fixed(600)),
            (
                "len:u16be@0",
                Framing::Len {
                    at: 0,
                    field: LenField::U16Be,
                },
            ),
            (
                "len:u32le@4",
                Framing::Len {
                    at: 4,
                    field: LenField::U32Le,
                },
            ),
            ("line", Framing::Line),
            ("frames", Framing::Frames),
        ] {
            assert_eq!(text.parse::<Framing>(), Ok(f));
            assert_eq!(f.to_string(), text);
        }
        assert_eq!(
            "len:u16be".parse::<Framing>(),
            Ok(Framing::Len {
                at: 0,
                field: LenField::U16Be
            })
        );
        for bad in [
            "",
            "fixed",
            "fixed:0",
            "fixed:x",
            "len:u24@0",
            "len:u16be@x",
            "lines",
            "tlv:3",
        ] {
            let e = bad.parse::<Framing>().expect_err(bad);
            assert!(e.to_string().contains("expected fixed:N"), "{e}");
        }
    }

    /// A length-prefixed stream cut into pieces at every offset: in order, and with the piece
    /// after the cut arriving before the one it follows (a hole, filled later).
    #[test]
    fn length_prefixed_at_every_cut() {
        let (s, ranges) = len_stream(12);
        let framing = "len:u16be@0".parse().unwrap_or_default();
        let want: Vec<_> = ranges
            .iter()
            .map(|&(x, y)| (x, y, s[x as usize..y as usize].to_vec()))
            .collect();
        for cut in 1..s.len() {
            let in_order = [(0u64, &s[..cut]), (cut as u64, &s[cut..])];
            assert_eq!(cut_all(framing, &in_order), want, "cut at {cut}");
            if cut > 1 {
                let hole = [(0u64, &s[..1]), (cut as u64, &s[cut..]), (1, &s[1..cut])];
                assert_eq!(cut_all(framing, &hole), want, "hole 1..{cut}");
            }
        }
    }

    /// Three-way cuts, a repeated piece, fixed-size and line framing.
    #[test]
    fn fixed_and_line_at_every_pair_of_cuts() {
        let fixed: Vec<u8> = (0..60u8).collect();
        let mut line = Vec::new();
        for i in 0..8 {
            line.extend(std::iter::repeat_n(b'a' + i, usize::from(i) + 1));
            line.push(b'\n');
        }
        for (framing, s) in [(Framing::Fixed(7), &fixed), (Framing::Line, &line)] {
            let whole = cut_all(framing, &[(0, s)]);
            assert!(whole.len() >= 8, "{framing}: {}", whole.len());
            for c1 in 1..s.len() {
                for c2 in c1..s.len() {
                    let pieces = [
                        (0u64, &s[..c1]),
                        (c2 as u64, &s[c2..]),
                        (0u64, &s[..c1]),
                        (c1 as u64, &s[c1..c2]),
                    ];
                    assert_eq!(cut_all(framing, &pieces), whole, "{framing} cuts {c1} {c2}");
                }
            }
        }
    }

    /// Joined mid-stream: length framing starts at the first piece, fixed at the next multiple.
    #[test]
    fn joins_mid_stream() {
        let (s, ranges) = len_stream(5);
        let (from, _) = ranges[2];
        let got = cut_all(
            "len:u16be@0".parse().unwrap_or_default(),
            &[(from, &s[from as usize..])],
        );
        assert_eq!(
            got.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>(),
            ranges[2..]
        );
        let got = cut_all(Framing::Fixed(10), &[(15, &[0u8; 30][..])]);
        assert_eq!(
            got.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>(),
            [(20, 30), (30, 40)]
        );
    }

    /// A hole that never fills is given up on past the bound (counted), and cutting goes on.
    #[test]
    fn gives_up_a_hole_past_the_bound() {
        let mut d = Delimiter::new(Framing::Fixed(1000));
        let mut out = Vec::new();
        d.push(0, &[1u8; 500], |m, _| out.push(m));
        let piece = vec![2u8; 1000];
        let mut off = 1000;
        while d.holes_given_up == 0 {
            d.push(off, &piece, |m, _| out.push(m));
            off += 1000;
        }
        assert_eq!(d.holes_given_up, 1);
        assert!(!out.is_empty());
        assert!(out
            .iter()
            .all(|m| m.start >= 1000 && m.end - m.start == 1000));
    }

    /// A delimiter set to hold more (TCP's) waits through a burst far past [`MAX_AHEAD`] and
    /// cuts every message when the hole fills; given up on by its owner, it cuts what follows
    /// the held pieces' start and holds nothing more.
    #[test]
    fn a_larger_bound_holds_a_long_burst_and_give_up_restarts_at_the_held_pieces() {
        let burst = 100 << 10;
        let mut d = Delimiter::from_start(Framing::Fixed(600)).holding(256 << 10);
        let mut out = Vec::new();
        let piece = vec![3u8; 1448];
        let mut off = 1448u64;
        while off < burst {
            d.push(off, &piece, |m, _| out.push(m));
            off += 1448;
        }
        assert!(out.is_empty());
        assert!(d.held() > MAX_AHEAD);
        d.push(0, &piece, |m, _| out.push(m));
        assert_eq!(d.holes_given_up, 0);
        assert_eq!(d.held(), 0);
        let whole = (off / 600) as usize;
        assert_eq!(out.len(), whole);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, m)| m.start == 600 * i as u64));

        let mut d = Delimiter::new(Framing::Fixed(600)).holding(256 << 10);
        let mut out = Vec::new();
        d.push(0, &[1u8; 600], |m, _| out.push(m));
        d.push(1800, &[2u8; 1200], |m, _| out.push(m));
        d.give_up(&mut |m, _| out.push(m));
        assert_eq!((d.holes_given_up, d.held()), (1, 0));
        let got: Vec<(u64, u64)> = out.iter().map(|m| (m.start, m.end)).collect();
        assert_eq!(got, [(0, 600), (1800, 2400), (2400, 3000)]);
    }

    /// Frames: each frame's new bytes are a message; repeats name nothing; a retransmission
    /// cut differently names only the bytes not cut before.
    #[test]
    fn frames_cut_at_frame_boundaries() {
        let s = [7u8; 100];
        let got = cut_all(
            Framing::Frames,
            &[
                (0, &s[..30]),
                (60, &s[60..]),
                (0, &s[..30]),
                (20, &s[20..70]),
            ],
        );
        assert_eq!(
            got.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>(),
            [(0, 30), (60, 100), (30, 60)]
        );
    }

    /// A stream known to begin in the capture is finished once its FIN was seen and every
    /// byte before it arrived, in any order, whatever the framing; not before. Its later piece
    /// seen first waits for the bytes before it: the message they make is cut whole.
    #[test]
    fn finished_when_every_byte_up_to_the_fin_arrived() {
        for framing in [Framing::Fixed(4), Framing::Line, Framing::Frames] {
            let mut d = Delimiter::from_start(framing);
            d.push(4, b"efgh", |_, _| {});
            d.end_at(8);
            assert!(!d.is_finished(), "{framing}: a hole before the end");
            d.push(0, b"abc\n", |_, _| {});
            assert!(d.is_finished(), "{framing}");
        }
        let mut d = Delimiter::new(Framing::Fixed(4));
        d.push(0, b"abcd", |_, _| {});
        assert!(!d.is_finished(), "no FIN seen");
        let mut d = Delimiter::from_start(Framing::Fixed(6));
        let mut cut = Vec::new();
        d.push(4, b"ef", |m, h| cut.push((m.start, m.end, h.to_vec())));
        d.push(0, b"abcd", |m, h| cut.push((m.start, m.end, h.to_vec())));
        assert_eq!(cut, [(0, 6, b"abcdef".to_vec())]);
        // Joined mid-stream instead, the first piece seen starts the cutting.
        let mut d = Delimiter::new(Framing::Fixed(6));
        let mut cut = Vec::new();
        d.push(4, b"ef", |m, h| cut.push((m.start, m.end, h.to_vec())));
        d.push(0, b"abcd", |m, h| cut.push((m.start, m.end, h.to_vec())));
        assert!(cut.is_empty());
    }
}
