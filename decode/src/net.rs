//! Link, network and transport layers (L2–L4) with `etherparse`: from a captured frame of a
//! given link type to the UDP datagram it carries, with IPv4/IPv6 fragments counted and
//! reassembled, or to the TCP segment it carries ([`tcp_segment`], read by [`crate::tcp`]).
//!
//! Link types are the pcap `LINKTYPE_*` numbers, so the same code serves files and libpcap.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::tcp::{TcpError, TcpReject, TcpView};
use etherparse::{
    defrag::IpDefragPool, err, EtherPayloadSlice, EtherType, Ethernet2Slice, IpNumber,
    IpPayloadSlice, IpSlice, LenSource, NetSlice, SingleVlanSlice, SlicedPacket, TransportSlice,
    UdpSlice,
};

/// A capture's link layer: what precedes the IP header in every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkType {
    /// Ethernet II, with optional 802.1Q / QinQ VLAN tags (LINKTYPE_ETHERNET, 1).
    Ethernet,
    /// Linux "cooked" capture v1, 16-byte header (LINKTYPE_LINUX_SLL, 113).
    LinuxSll,
    /// Linux "cooked" capture v2, 20-byte header (LINKTYPE_LINUX_SLL2, 276).
    LinuxSll2,
    /// IPv4 or IPv6 with no link header (LINKTYPE_RAW 101, DLT_RAW 12 and 14).
    RawIp,
    /// IPv4 only, no link header (LINKTYPE_IPV4, 228).
    Ipv4,
    /// IPv6 only, no link header (LINKTYPE_IPV6, 229).
    Ipv6,
    /// BSD loopback: a 4-byte address family in the capturing host's byte order (LINKTYPE_NULL, 0).
    Null,
    /// OpenBSD loopback: a 4-byte address family in network byte order (LINKTYPE_LOOP, 108).
    Loop,
    /// PPP, with or without the HDLC-like address and control bytes (LINKTYPE_PPP, 9).
    Ppp,
    /// PPP in HDLC-like framing, or Cisco HDLC (LINKTYPE_PPP_HDLC, 50).
    PppHdlc,
    /// PPPoE session frames without their Ethernet header (LINKTYPE_PPP_ETHER, 51).
    PppEther,
    /// Linux netfilter log: a 4-byte header, then type-length-value attributes, the packet in
    /// one of them (LINKTYPE_NFLOG, 239; `tcpdump -i nflog:N`).
    Nflog,
}

impl LinkType {
    /// The link layers decoded, in words (for messages about a link type that is not).
    pub const SUPPORTED: &'static str = "Ethernet (VLAN, PPPoE), Linux cooked v1 and v2, raw IP, \
        PPP, PPP in HDLC framing, PPPoE, BSD loopback and NFLOG";

    /// The link type for a pcap/pcapng `LINKTYPE_*` (or libpcap `DLT_*`) number, if supported.
    pub fn from_linktype(value: u32) -> Option<Self> {
        Some(match value {
            1 => Self::Ethernet,
            113 => Self::LinuxSll,
            276 => Self::LinuxSll2,
            101 | 12 | 14 => Self::RawIp,
            228 => Self::Ipv4,
            229 => Self::Ipv6,
            0 => Self::Null,
            108 => Self::Loop,
            9 => Self::Ppp,
            50 => Self::PppHdlc,
            51 => Self::PppEther,
            239 => Self::Nflog,
            _ => return None,
        })
    }

    /// The `LINKTYPE_*` number to write in a capture file.
    pub fn linktype(self) -> u32 {
        match self {
            Self::Ethernet => 1,
            Self::LinuxSll => 113,
            Self::LinuxSll2 => 276,
            Self::RawIp => 101,
            Self::Ipv4 => 228,
            Self::Ipv6 => 229,
            Self::Null => 0,
            Self::Loop => 108,
            Self::Ppp => 9,
            Self::PppHdlc => 50,
            Self::PppEther => 51,
            Self::Nflog => 239,
        }
    }
}

/// Why a frame yielded no UDP datagram. Every frame is counted under exactly one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetReject {
    /// The frame ended inside a link, IP or UDP header (or before the length a header announced;
    /// often a snap length shorter than the packet).
    Truncated,
    /// A header field has an impossible value (IP version, header length, ...).
    Malformed,
    /// The link layer carries something other than IP (ARP, LLDP, ...).
    NotIp,
    /// IP carrying something other than UDP (TCP, ICMP, ...).
    NotUdp,
    /// One fragment of a fragmented IP datagram, kept for reassembly.
    Fragment,
    /// A fragment that contradicts the others of its datagram (overlap, beyond 64 KiB).
    BadFragment,
}

impl NetReject {
    /// All reasons, in a stable order (for reports).
    pub const ALL: [NetReject; 6] = [
        Self::Truncated,
        Self::Malformed,
        Self::NotIp,
        Self::NotUdp,
        Self::Fragment,
        Self::BadFragment,
    ];

    /// The reason's name as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Malformed => "malformed",
            Self::NotIp => "not_ip",
            Self::NotUdp => "not_udp",
            Self::Fragment => "fragment",
            Self::BadFragment => "bad_fragment",
        }
    }
}

/// One UDP datagram found in a frame; `payload` borrows the frame (or the reassembly buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// Sender address and port.
    pub src: SocketAddr,
    /// Receiver address and port.
    pub dst: SocketAddr,
    /// The UDP payload, cut to the UDP length field when the frame is longer (Ethernet padding).
    pub payload: &'a [u8],
    /// True when the datagram was reassembled from IP fragments.
    pub reassembled: bool,
    /// Payload bytes the UDP header says the datagram carries: more than `payload` holds when
    /// the capture's snap length cut the frame ([`cut_udp`]).
    pub payload_len: u32,
    /// The IP packet's TTL (IPv6: hop limit) as captured (of the last fragment, reassembled).
    pub ttl: u8,
}

impl UdpDatagram<'_> {
    /// Whether the capture cut the frame short of the payload the UDP header declares.
    pub fn cut(&self) -> bool {
        self.payload_len as usize > self.payload.len()
    }
}

/// Counters of IP fragmentation seen by a [`NetParser`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FragmentStats {
    /// IP fragments seen.
    pub fragments: u64,
    /// Datagrams completed by reassembly.
    pub reassembled: u64,
    /// Fragments refused by reassembly (overlaps, too long).
    pub refused: u64,
}

/// Parses frames down to UDP, reassembling IP fragments (per link, as the kernel would).
pub struct NetParser {
    defrag: IpDefragPool<u64, ()>,
    reassembled: Vec<u8>,
    stats: FragmentStats,
}

impl Default for NetParser {
    fn default() -> Self {
        Self::new()
    }
}

impl NetParser {
    /// Incomplete fragmented datagrams are dropped after this much capture time (RFC 791's 15 s
    /// upper bound doubled).
    pub const FRAGMENT_TIMEOUT_NS: u64 = 30_000_000_000;

    /// A parser with an empty fragment table.
    pub fn new() -> Self {
        Self {
            defrag: IpDefragPool::new(),
            reassembled: Vec::new(),
            stats: FragmentStats::default(),
        }
    }

    /// Fragmentation counters so far.
    pub fn fragment_stats(&self) -> FragmentStats {
        self.stats
    }

    /// The UDP datagram in `frame` (link layer `link`, captured at `ts_ns`), or why there is none.
    ///
    /// A fragment returns [`NetReject::Fragment`] until the last piece of its datagram arrives;
    /// then the whole datagram is returned, borrowed from the parser.
    pub fn udp<'a>(
        &'a mut self,
        link: LinkType,
        frame: &'a [u8],
        ts_ns: u64,
    ) -> Result<UdpDatagram<'a>, NetReject> {
        match transport_direct(link, frame) {
            Some(Transport::Udp(udp)) => return Ok(udp),
            // A well-formed TCP segment, which `slice` would also find: not UDP.
            Some(Transport::Tcp(_)) => return Err(NetReject::NotUdp),
            None => {}
        }
        let sliced = slice(link, frame)?;
        let Some(net) = &sliced.net else {
            return Err(NetReject::NotIp);
        };
        let Some((src_ip, dst_ip, ttl, ip_payload)) = ip_ends(net) else {
            return Err(NetReject::NotIp);
        };
        if ip_payload.fragmented {
            return self.fragment(&sliced, (src_ip, dst_ip, ttl), ts_ns);
        }
        match &sliced.transport {
            Some(TransportSlice::Udp(udp)) => Ok(UdpDatagram {
                src: SocketAddr::new(src_ip, udp.source_port()),
                dst: SocketAddr::new(dst_ip, udp.destination_port()),
                payload: udp.payload(),
                reassembled: false,
                payload_len: len_u32(udp.payload()),
                ttl,
            }),
            Some(_) => Err(NetReject::NotUdp),
            None if ip_payload.ip_number == IpNumber::UDP => Err(NetReject::Truncated),
            None => Err(NetReject::NotUdp),
        }
    }

    fn fragment<'a>(
        &'a mut self,
        sliced: &SlicedPacket<'_>,
        (src_ip, dst_ip, ttl): (IpAddr, IpAddr, u8),
        ts_ns: u64,
    ) -> Result<UdpDatagram<'a>, NetReject> {
        self.stats.fragments += 1;
        if self.stats.fragments & 1023 == 0 {
            // Bound the table: forget datagrams whose last fragment is too old.
            let horizon = ts_ns.saturating_sub(Self::FRAGMENT_TIMEOUT_NS);
            self.defrag.retain(|t| *t >= horizon);
        }
        match self.defrag.process_sliced_packet(sliced, ts_ns, ()) {
            Ok(None) => Err(NetReject::Fragment),
            Err(_) => {
                self.stats.refused += 1;
                Err(NetReject::BadFragment)
            }
            Ok(Some(whole)) => {
                self.stats.reassembled += 1;
                if whole.ip_number != IpNumber::UDP {
                    self.defrag.return_buf(whole);
                    return Err(NetReject::NotUdp);
                }
                self.reassembled.clear();
                self.reassembled.extend_from_slice(&whole.payload);
                self.defrag.return_buf(whole);
                let udp =
                    UdpSlice::from_slice(&self.reassembled).map_err(|_| NetReject::Truncated)?;
                Ok(UdpDatagram {
                    src: SocketAddr::new(src_ip, udp.source_port()),
                    dst: SocketAddr::new(dst_ip, udp.destination_port()),
                    payload: udp.payload(),
                    reassembled: true,
                    payload_len: len_u32(udp.payload()),
                    ttl,
                })
            }
        }
    }
}

/// One TCP segment found in a frame: its endpoints and the validated header; the payload
/// borrows the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Sender address and port.
    pub src: SocketAddr,
    /// Receiver address and port.
    pub dst: SocketAddr,
    /// The header, its options and the payload (cut to the IP length: no Ethernet padding).
    pub tcp: TcpView<'a>,
    /// Payload bytes the IP header says the segment carries: more than the captured payload
    /// when the capture's snap length cut the frame (the captured bytes when the IP header
    /// gives no length, as for the giant segments of TCP segmentation offload).
    pub payload_len: u32,
    /// The IP packet's TTL (IPv6: hop limit) as captured: its sender's initial value (64, 128,
    /// 255) when captured at the sender's host, less by each router it passed.
    pub ttl: u8,
}

impl TcpSegment<'_> {
    /// Whether the capture cut the frame short of the payload the IP header declares.
    pub fn cut(&self) -> bool {
        self.payload_len as usize > self.tcp.payload().len()
    }
}

/// An IP packet's source and destination, its TTL (IPv6: hop limit) as captured, and its
/// payload.
pub(crate) type IpParts<'a> = (Addr, Addr, u8, IpPayloadSlice<'a>);

/// An IP address as one number (an IPv4 address in the low 32 bits) and its version. The
/// parts of a packet carry it rather than an `IpAddr`: that enum went through memory where
/// the IPv4 and IPv6 paths meet (a tag byte, the address after it) and was read back at once
/// in wider pieces, a store-forwarding stall on every frame; two numbers stay in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    bits: u128,
    v6: bool,
}

impl Addr {
    /// The address.
    pub(crate) fn ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.bits))
        } else {
            // An IPv4 address is held in the low 32 bits.
            IpAddr::V4(Ipv4Addr::from(self.bits as u32))
        }
    }

    /// The socket address of `port` at this address.
    #[inline(always)]
    fn with_port(self, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip(), port)
    }
}

impl From<IpAddr> for Addr {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self {
                bits: u128::from(u32::from(v4)),
                v6: false,
            },
            IpAddr::V6(v6) => Self {
                bits: u128::from(v6),
                v6: true,
            },
        }
    }
}

fn len_u32(bytes: &[u8]) -> u32 {
    u32::try_from(bytes.len()).unwrap_or(u32::MAX)
}

/// The UDP datagram of a frame the capture's snap length cut short of its payload (any link
/// type, for which [`NetParser::udp`] says [`NetReject::Truncated`]): the header whole, the
/// payload as far as captured, [`UdpDatagram::payload_len`] the UDP header's. `None` without a
/// whole UDP header of an unfragmented datagram longer than captured (a cut fragment cannot be
/// reassembled).
pub fn cut_udp(link: LinkType, frame: &[u8]) -> Option<UdpDatagram<'_>> {
    let (src_ip, dst_ip, ttl, ip) = ip_cut(link, frame)?;
    if ip.ip_number != IpNumber::UDP || ip.fragmented {
        return None;
    }
    let (header, payload) = ip.payload.split_first_chunk::<8>()?;
    let declared = usize::from(u16::from_be_bytes([header[4], header[5]])).checked_sub(8)?;
    if declared <= payload.len() {
        return None;
    }
    Some(UdpDatagram {
        src: src_ip.with_port(u16::from_be_bytes([header[0], header[1]])),
        dst: dst_ip.with_port(u16::from_be_bytes([header[2], header[3]])),
        payload,
        reassembled: false,
        payload_len: u32::try_from(declared).unwrap_or(u32::MAX),
        ttl,
    })
}

/// The TCP segment of a frame cut short of its IP packet (any link type), sliced laxly: the
/// headers whole, the payload as far as captured, its length the IP header's.
fn cut_tcp_segment(link: LinkType, frame: &[u8]) -> Result<TcpSegment<'_>, TcpReject> {
    let ip = ip_packet(link, frame, Cut::AsCaptured).map_err(|r| match r {
        NetReject::Truncated => TcpReject::Truncated,
        _ => TcpReject::NotTcp,
    })?;
    let lax = etherparse::LaxSlicedPacket::from_ip(ip).map_err(|_| TcpReject::Truncated)?;
    let (src_ip, dst_ip, ttl, declared, payload) = match &lax.net {
        Some(etherparse::LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                h.ttl(),
                usize::from(h.total_len()).checked_sub(usize::from(h.ihl()) * 4),
                v4.payload(),
            )
        }
        Some(etherparse::LaxNetSlice::Ipv6(v6)) => (
            IpAddr::V6(v6.header().source_addr()),
            IpAddr::V6(v6.header().destination_addr()),
            v6.header().hop_limit(),
            usize::from(v6.header().payload_length()).checked_sub(v6.extensions().slice().len()),
            v6.payload(),
        ),
        _ => return Err(TcpReject::NotTcp),
    };
    if payload.ip_number != IpNumber::TCP {
        return Err(TcpReject::NotTcp);
    }
    if payload.fragmented {
        return Err(TcpReject::Fragment);
    }
    let Some(TransportSlice::Tcp(tcp)) = &lax.transport else {
        return Err(TcpReject::Truncated);
    };
    let view = TcpView::new(tcp.slice()).map_err(TcpError::reject)?;
    let captured = view.payload().len();
    let declared = declared
        .and_then(|ip| ip.checked_sub(view.header_len()))
        .unwrap_or(captured);
    Ok(TcpSegment {
        src: SocketAddr::new(src_ip, view.src_port()),
        dst: SocketAddr::new(dst_ip, view.dst_port()),
        tcp: view,
        payload_len: u32::try_from(declared.max(captured)).unwrap_or(u32::MAX),
        ttl,
    })
}

/// The bytes from the IP header on of `frame`, its link layer of type `link` taken off:
/// Ethernet (up to three VLAN tags, PPPoE sessions), Linux cooked v1/v2, raw IP, BSD loopback,
/// PPP, Cisco HDLC, PPPoE, NFLOG. A length that runs past the captured bytes (a PPPoE
/// header's, an NFLOG attribute's) reads per `cut`.
fn ip_packet(link: LinkType, frame: &[u8], cut: Cut) -> Result<&[u8], NetReject> {
    let ether = |t: &[u8], rest| {
        ip_after_ether_type(EtherType(u16::from_be_bytes([t[0], t[1]])), rest, cut)
    };
    let version = |v: u8| match frame.first() {
        Some(b) if b >> 4 == v => Ok(frame),
        Some(_) => Err(NetReject::Malformed),
        None => Err(NetReject::Truncated),
    };
    match link {
        LinkType::Ethernet => match (frame.get(12..14), frame.get(14..)) {
            (Some(t), Some(rest)) => ether(t, rest),
            _ => Err(NetReject::Truncated),
        },
        LinkType::LinuxSll | LinkType::LinuxSll2 => {
            let (ether_type, rest) = cooked(link, frame)?;
            ip_after_ether_type(ether_type, rest, cut)
        }
        LinkType::RawIp => Ok(frame),
        LinkType::Ipv4 => version(4),
        LinkType::Ipv6 => version(6),
        LinkType::Null | LinkType::Loop => {
            let (Some(family), Some(rest)) = (frame.get(0..4), frame.get(4..)) else {
                return Err(NetReject::Truncated);
            };
            let family = [family[0], family[1], family[2], family[3]];
            // LINKTYPE_NULL is in the writer's byte order: accept either; families are < 2^16.
            let af = if link == LinkType::Loop {
                u32::from_be_bytes(family)
            } else {
                let le = u32::from_le_bytes(family);
                if le <= 0xffff {
                    le
                } else {
                    u32::from_be_bytes(family)
                }
            };
            match af {
                // AF_INET everywhere; AF_INET6 is 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS),
                // 10 (Linux).
                2 | 10 | 24 | 28 | 30 => Ok(rest),
                _ => Err(NetReject::NotIp),
            }
        }
        LinkType::Ppp => ppp(frame),
        LinkType::PppHdlc => match frame {
            // Cisco HDLC: address, control, then an EtherType.
            [0x0f | 0x8f, _, t0, t1, rest @ ..] => ether(&[*t0, *t1], rest),
            [0x0f | 0x8f, ..] => Err(NetReject::Truncated),
            _ => ppp(frame),
        },
        LinkType::PppEther => pppoe_session(frame, cut),
        LinkType::Nflog => nflog_payload(frame, cut),
    }
}

/// [`ip_packet`] after an EtherType: up to three VLAN tags (as many as [`SlicedPacket`] looks
/// through), then IP or a PPPoE session.
fn ip_after_ether_type(
    mut ether_type: EtherType,
    mut rest: &[u8],
    cut: Cut,
) -> Result<&[u8], NetReject> {
    for _ in 0..=3 {
        match ether_type {
            EtherType::IPV4 | EtherType::IPV6 => return Ok(rest),
            PPPOE_SESSION => return pppoe_session(rest, cut),
            EtherType::VLAN_TAGGED_FRAME
            | EtherType::PROVIDER_BRIDGING
            | EtherType::VLAN_DOUBLE_TAGGED_FRAME => {
                let vlan = SingleVlanSlice::from_slice(rest).map_err(|_| NetReject::Truncated)?;
                ether_type = vlan.ether_type();
                rest = vlan.payload().payload;
            }
            _ => return Err(NetReject::NotIp),
        }
    }
    Err(NetReject::NotIp)
}

/// Bytes after the IP header(s) that the IP header declares (`None` when it gives none).
fn ip_declared_payload(net: &NetSlice<'_>) -> Option<usize> {
    match net {
        NetSlice::Ipv4(v4) => {
            let h = v4.header();
            usize::from(h.total_len()).checked_sub(usize::from(h.ihl()) * 4)
        }
        NetSlice::Ipv6(v6) => usize::from(v6.header().payload_length())
            .checked_sub(v6.extensions().slice().len())
            .filter(|n| *n > 0),
        NetSlice::Arp(_) => None,
    }
}

/// Source and destination addresses of an IP layer, its TTL (hop limit) and its payload;
/// `None` for ARP.
fn ip_ends<'a>(net: &'a NetSlice<'_>) -> Option<(IpAddr, IpAddr, u8, &'a IpPayloadSlice<'a>)> {
    match net {
        NetSlice::Ipv4(v4) => Some((
            IpAddr::V4(v4.header().source_addr()),
            IpAddr::V4(v4.header().destination_addr()),
            v4.header().ttl(),
            v4.payload(),
        )),
        NetSlice::Ipv6(v6) => Some((
            IpAddr::V6(v6.header().source_addr()),
            IpAddr::V6(v6.header().destination_addr()),
            v6.header().hop_limit(),
            v6.payload(),
        )),
        NetSlice::Arp(_) => None,
    }
}

/// The TCP segment in `frame` (link layer `link`), or why there is none: not TCP (including
/// frames [`NetParser::udp`] already counted under another [`NetReject`]), a TCP header cut
/// short or with an impossible data offset, or a segment in an IP fragment.
pub fn tcp_segment(link: LinkType, frame: &[u8]) -> Result<TcpSegment<'_>, TcpReject> {
    if let Some(Transport::Tcp(seg)) = transport_direct(link, frame) {
        return Ok(seg);
    }
    let sliced = match slice_raw(link, frame) {
        Ok(s) => s,
        Err(Sliced::Etherparse(err::packet::SliceError::Tcp(_))) => {
            return Err(TcpReject::BadDataOffset)
        }
        Err(Sliced::Etherparse(err::packet::SliceError::Len(l)))
            if l.layer == err::Layer::TcpHeader =>
        {
            return Err(TcpReject::Truncated)
        }
        // The IP packet is longer than the frame: cut by the capture's snap length.
        Err(Sliced::Etherparse(err::packet::SliceError::Len(l)))
            if matches!(l.layer, err::Layer::Ipv4Packet | err::Layer::Ipv6Packet) =>
        {
            return cut_tcp_segment(link, frame)
        }
        // A PPPoE or NFLOG length past the captured bytes: cut by the snap length too.
        Err(Sliced::Reject(NetReject::Truncated)) => return cut_tcp_segment(link, frame),
        Err(_) => return Err(TcpReject::NotTcp),
    };
    let Some((src_ip, dst_ip, ttl, ip_payload)) = sliced.net.as_ref().and_then(ip_ends) else {
        return Err(TcpReject::NotTcp);
    };
    match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => {
            let view = TcpView::new(tcp.slice()).map_err(TcpError::reject)?;
            let captured = view.payload().len();
            let declared = sliced
                .net
                .as_ref()
                .and_then(ip_declared_payload)
                .and_then(|ip| ip.checked_sub(view.header_len()))
                .unwrap_or(captured);
            Ok(TcpSegment {
                src: SocketAddr::new(src_ip, view.src_port()),
                dst: SocketAddr::new(dst_ip, view.dst_port()),
                tcp: view,
                payload_len: u32::try_from(declared.max(captured)).unwrap_or(u32::MAX),
                ttl,
            })
        }
        _ if ip_payload.ip_number != IpNumber::TCP => Err(TcpReject::NotTcp),
        _ if ip_payload.fragmented => Err(TcpReject::Fragment),
        _ => Err(TcpReject::Truncated),
    }
}

/// What a frame carries above IP, when it is one of the two this crate reads.
#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    /// A UDP datagram.
    Udp(UdpDatagram<'a>),
    /// A TCP segment.
    Tcp(TcpSegment<'a>),
}

/// The UDP datagram or TCP segment of a common frame (an unfragmented IP packet, see
/// [`ip_direct`]), each header read and validated once, without building a [`SlicedPacket`];
/// `None` for anything else, which [`NetParser::udp`] and [`tcp_segment`] then classify (and
/// where this finds a datagram or a segment, they find the same one).
#[inline(always)]
pub fn transport_direct(link: LinkType, frame: &[u8]) -> Option<Transport<'_>> {
    let (src_ip, dst_ip, ttl, ip) = ip_direct(link, frame)?;
    if let Some(udp) = unfragmented_udp(&ip) {
        return Some(Transport::Udp(UdpDatagram {
            src: src_ip.with_port(udp.source_port()),
            dst: dst_ip.with_port(udp.destination_port()),
            payload: udp.payload(),
            reassembled: false,
            payload_len: len_u32(udp.payload()),
            ttl,
        }));
    }
    let view = unfragmented_tcp(&ip)?;
    Some(Transport::Tcp(TcpSegment {
        src: src_ip.with_port(view.src_port()),
        dst: dst_ip.with_port(view.dst_port()),
        // Whole: the IP slice holds as many bytes as its header declares.
        payload_len: len_u32(view.payload()),
        tcp: view,
        ttl,
    }))
}

/// The addresses and payload of an IP packet, found with etherparse's per-layer slices
/// without building a [`SlicedPacket`] (the common frame, at a fraction of the cost). `None`
/// for anything else (errors, MACsec, PPPoE, link types other than Ethernet, Linux cooked and
/// raw IP), which [`slice`] then classifies.
#[inline(always)]
pub(crate) fn ip_direct(link: LinkType, frame: &[u8]) -> Option<IpParts<'_>> {
    // The common frame (Ethernet, then IPv4 or IPv6) read inline, in the caller's frame:
    // through the calls every other frame takes, its parts were copied at each on the way back.
    if link == LinkType::Ethernet {
        if let Some(parts) = ip_in_common_ether(frame) {
            return Some(parts);
        }
    }
    ip_direct_other(link, frame)
}

/// [`ip_direct`] of an Ethernet frame that carries the common IPv4 or IPv6 packet right after
/// its header (no VLAN tag); `None` for anything else, which [`ip_direct_other`] then reads.
#[inline(always)]
fn ip_in_common_ether(frame: &[u8]) -> Option<IpParts<'_>> {
    let p = Ethernet2Slice::from_slice_without_fcs(frame)
        .ok()?
        .payload();
    match p.ether_type {
        EtherType::IPV4 => ipv4_common(p.payload),
        EtherType::IPV6 => ipv6_common(p.payload),
        _ => None,
    }
}

/// [`ip_direct`] of every other frame.
#[inline(never)]
fn ip_direct_other(link: LinkType, frame: &[u8]) -> Option<IpParts<'_>> {
    match link {
        LinkType::Ethernet => ip_in_ether_payload(
            Ethernet2Slice::from_slice_without_fcs(frame)
                .ok()?
                .payload(),
        ),
        LinkType::LinuxSll | LinkType::LinuxSll2 => {
            let (ether_type, rest) = cooked(link, frame).ok()?;
            ip_in_ether_payload(EtherPayloadSlice {
                ether_type,
                len_source: LenSource::Slice,
                payload: rest,
            })
        }
        LinkType::RawIp => ip_in_ip(frame),
        LinkType::Ipv4 if frame.first().is_some_and(|b| b >> 4 == 4) => ip_in_ip(frame),
        LinkType::Ipv6 if frame.first().is_some_and(|b| b >> 4 == 6) => ip_in_ip(frame),
        _ => None,
    }
}

/// [`ip_direct`] of a frame the capture's snap length cut: the IP header whole, its payload
/// as far as captured (`None` when even the header is cut, or the frame is no IP packet).
pub(crate) fn ip_cut(link: LinkType, frame: &[u8]) -> Option<IpParts<'_>> {
    let (ip, _) =
        etherparse::LaxIpSlice::from_slice(ip_packet(link, frame, Cut::AsCaptured).ok()?).ok()?;
    let p = ip.payload();
    let ttl = match &ip {
        etherparse::LaxIpSlice::Ipv4(v4) => v4.header().ttl(),
        etherparse::LaxIpSlice::Ipv6(v6) => v6.header().hop_limit(),
    };
    Some((
        ip.source_addr().into(),
        ip.destination_addr().into(),
        ttl,
        IpPayloadSlice {
            ip_number: p.ip_number,
            fragmented: p.fragmented,
            len_source: p.len_source,
            payload: p.payload,
        },
    ))
}

/// [`ip_direct`] after the link header: up to three VLAN tags (where `SlicedPacket` stops
/// looking), then IPv4 or IPv6.
fn ip_in_ether_payload(mut p: EtherPayloadSlice<'_>) -> Option<IpParts<'_>> {
    let mut tags = 0;
    loop {
        match p.ether_type {
            EtherType::VLAN_TAGGED_FRAME
            | EtherType::PROVIDER_BRIDGING
            | EtherType::VLAN_DOUBLE_TAGGED_FRAME => {
                if tags == 3 {
                    return None;
                }
                tags += 1;
                p = SingleVlanSlice::from_slice(p.payload).ok()?.payload();
            }
            EtherType::IPV4 => return ip(4, p.payload),
            EtherType::IPV6 => return ip(6, p.payload),
            _ => return None,
        }
    }
}

/// [`ip_direct`] for a frame that starts with the IP header (as `SlicedPacket::from_ip`).
fn ip_in_ip(frame: &[u8]) -> Option<IpParts<'_>> {
    ip(frame.first()? >> 4, frame)
}

/// The addresses and payload of an IP packet of `version` (4 or 6): the common packet's read in
/// place ([`ipv4_common`], [`ipv6_common`]), any other by etherparse.
fn ip(version: u8, packet: &[u8]) -> Option<IpParts<'_>> {
    let common = match version {
        4 => ipv4_common(packet),
        6 => ipv6_common(packet),
        _ => return None,
    };
    if common.is_some() {
        return common;
    }
    let ip = IpSlice::from_slice(packet).ok()?;
    if matches!(ip, IpSlice::Ipv4(_)) != (version == 4) {
        return None;
    }
    let ttl = match &ip {
        IpSlice::Ipv4(v4) => v4.header().ttl(),
        IpSlice::Ipv6(v6) => v6.header().hop_limit(),
    };
    Some((
        ip.source_addr().into(),
        ip.destination_addr().into(),
        ttl,
        ip.payload().clone(),
    ))
}

/// The common IPv4 packet (no authentication header), read with the checks and the result of
/// etherparse's `Ipv4Slice` at a fraction of its cost; `None` for anything else.
#[inline(always)]
fn ipv4_common(packet: &[u8]) -> Option<IpParts<'_>> {
    let h: &[u8; 20] = packet.get(..20)?.try_into().ok()?;
    let header_len = usize::from(h[0] & 0x0f) * 4;
    let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let ip_number = IpNumber(h[9]);
    if h[0] >> 4 != 4
        || header_len < 20
        || total_len < header_len
        || ip_number == IpNumber::AUTHENTICATION_HEADER
    {
        return None;
    }
    let addr = |at: usize| Addr {
        bits: u128::from(u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])),
        v6: false,
    };
    Some((
        addr(12),
        addr(16),
        h[8],
        IpPayloadSlice {
            ip_number,
            // More fragments, or a fragment offset.
            fragmented: h[6] & 0x20 != 0 || u16::from_be_bytes([h[6] & 0x1f, h[7]]) != 0,
            len_source: LenSource::Ipv4HeaderTotalLen,
            payload: packet.get(header_len..total_len)?,
        },
    ))
}

/// The common IPv6 packet (TCP or UDP right after the fixed header, no jumbogram), read with
/// the checks and the result of etherparse's `Ipv6Slice`; `None` for anything else.
#[inline]
fn ipv6_common(packet: &[u8]) -> Option<IpParts<'_>> {
    let h: &[u8; 40] = packet.get(..40)?.try_into().ok()?;
    let payload_len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let ip_number = IpNumber(h[6]);
    if h[0] >> 4 != 6 || payload_len == 0 || !matches!(ip_number, IpNumber::TCP | IpNumber::UDP) {
        return None;
    }
    let addr = |at: usize| {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&h[at..at + 16]);
        Addr {
            bits: u128::from_be_bytes(bytes),
            v6: true,
        }
    };
    Some((
        addr(8),
        addr(24),
        h[7],
        IpPayloadSlice {
            ip_number,
            fragmented: false,
            len_source: LenSource::Ipv6HeaderPayloadLen,
            payload: packet.get(40..40 + payload_len)?,
        },
    ))
}

/// The UDP header and payload of an IP payload that is neither a fragment nor another protocol.
fn unfragmented_udp<'a>(payload: &IpPayloadSlice<'a>) -> Option<UdpSlice<'a>> {
    if payload.fragmented || payload.ip_number != IpNumber::UDP {
        return None;
    }
    UdpSlice::from_slice(payload.payload).ok()
}

/// The TCP segment of an IP payload that is neither a fragment nor another protocol, when its
/// header is whole (etherparse's `TcpSlice` then accepts it too).
fn unfragmented_tcp<'a>(payload: &IpPayloadSlice<'a>) -> Option<TcpView<'a>> {
    if payload.fragmented || payload.ip_number != IpNumber::TCP {
        return None;
    }
    TcpView::new(payload.payload).ok()
}

/// Slices `frame` per its link type down to the transport layer.
fn slice(link: LinkType, frame: &[u8]) -> Result<SlicedPacket<'_>, NetReject> {
    slice_raw(link, frame).map_err(|e| match e {
        Sliced::Reject(r) => r,
        Sliced::Etherparse(e) => classify(e),
    })
}

/// Why [`slice_raw`] stopped: a reason of this module's, or etherparse's own error (which the
/// UDP and TCP paths classify each their way).
enum Sliced {
    Reject(NetReject),
    Etherparse(err::packet::SliceError),
}

impl From<NetReject> for Sliced {
    fn from(r: NetReject) -> Self {
        Self::Reject(r)
    }
}

/// [`slice`] with etherparse's errors as they are.
fn slice_raw(link: LinkType, frame: &[u8]) -> Result<SlicedPacket<'_>, Sliced> {
    SlicedPacket::from_ip(ip_packet(link, frame, Cut::Whole)?).map_err(Sliced::Etherparse)
}

/// The EtherType and the rest of a Linux cooked header. v1 (16 bytes) has the protocol at
/// 14..16, v2 (20 bytes) at 0..2. The protocol is an EtherType whatever the hardware type
/// (Ethernet, loopback 772, PPP 512, raw IP 519, tunnels), except on netlink captures, whose
/// protocol numbers are netlink families and never an IP EtherType.
fn cooked(link: LinkType, frame: &[u8]) -> Result<(EtherType, &[u8]), NetReject> {
    let (at, len) = if link == LinkType::LinuxSll {
        (14, 16)
    } else {
        (0, 20)
    };
    let (Some(t), Some(rest)) = (frame.get(at..at + 2), frame.get(len..)) else {
        return Err(NetReject::Truncated);
    };
    Ok((EtherType(u16::from_be_bytes([t[0], t[1]])), rest))
}

/// The PPPoE session EtherType (RFC 2516).
const PPPOE_SESSION: EtherType = EtherType(0x8864);

/// How a length field that runs past the captured bytes reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// The frame is truncated: rejected.
    Whole,
    /// The capture's snap length cut it: read as far as captured.
    AsCaptured,
}

/// What a length field names of `bytes`: that many, or as many as captured when `cut` allows.
fn declared(bytes: &[u8], from: usize, len: usize, cut: Cut) -> Result<&[u8], NetReject> {
    match (bytes.get(from..from + len), cut) {
        (Some(b), _) => Ok(b),
        (None, Cut::AsCaptured) => bytes.get(from..).ok_or(NetReject::Truncated),
        (None, Cut::Whole) => Err(NetReject::Truncated),
    }
}

/// The IP packet of a PPPoE session frame: a 6-byte header (version and type 0x11, code 0,
/// session id, length), then PPP. The length field cuts Ethernet padding.
fn pppoe_session(frame: &[u8], cut: Cut) -> Result<&[u8], NetReject> {
    let header = frame.get(0..6).ok_or(NetReject::Truncated)?;
    if header[0] != 0x11 || header[1] != 0 {
        return Err(NetReject::Malformed);
    }
    let len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    ppp(declared(frame, 6, len, cut)?)
}

/// The IP packet of a PPP frame (RFC 1661): optional HDLC-like address and control bytes
/// (0xff 0x03, RFC 1662), then the protocol, one byte when compressed (odd first byte).
/// IPv4 (0x21) and IPv6 (0x57) are IP; anything else (LCP, IPCP, compressed TCP/IP) is not.
fn ppp(frame: &[u8]) -> Result<&[u8], NetReject> {
    let frame = match frame {
        [0xff, 0x03, rest @ ..] => rest,
        [0xff] => return Err(NetReject::Truncated),
        other => other,
    };
    let (protocol, rest) = match frame {
        [] => return Err(NetReject::Truncated),
        [p, rest @ ..] if p & 1 == 1 => (u16::from(*p), rest),
        [_] => return Err(NetReject::Truncated),
        [hi, lo, rest @ ..] => (u16::from_be_bytes([*hi, *lo]), rest),
    };
    match protocol {
        0x0021 | 0x0057 => Ok(rest),
        _ => Err(NetReject::NotIp),
    }
}

/// The packet of a Linux NFLOG record: after a 4-byte header (address family, version 0,
/// resource id), attributes of a 2-byte length (header included) and a 2-byte type, each
/// padded to 4 bytes; the packet is the NFULA_PAYLOAD (9) attribute. Lengths and types are in
/// the capturing host's byte order: the first attribute's type (always < 256) tells which.
/// A record with no payload attribute (logged without a copy of the packet) is not IP.
fn nflog_payload(frame: &[u8], cut: Cut) -> Result<&[u8], NetReject> {
    const NFULA_PAYLOAD: u16 = 9;
    // The netlink attribute flags (nested, network byte order) are not part of the type.
    const TYPE_MASK: u16 = 0x3fff;
    let header = frame.get(0..4).ok_or(NetReject::Truncated)?;
    if header[1] != 0 {
        return Err(NetReject::Malformed);
    }
    let mut rest = &frame[4..];
    let mut little_endian = None;
    while !rest.is_empty() {
        let tlv = rest.get(0..4).ok_or(NetReject::Truncated)?;
        let le =
            *little_endian.get_or_insert(u16::from_le_bytes([tlv[2], tlv[3]]) & TYPE_MASK < 0x100);
        let read = |b: &[u8]| {
            if le {
                u16::from_le_bytes([b[0], b[1]])
            } else {
                u16::from_be_bytes([b[0], b[1]])
            }
        };
        let (len, kind) = (usize::from(read(&tlv[0..2])), read(&tlv[2..4]) & TYPE_MASK);
        if len < 4 {
            return Err(NetReject::Malformed);
        }
        // Only the packet may have been cut by the snap length (attributes precede it).
        let value = declared(
            rest,
            4,
            len - 4,
            if kind == NFULA_PAYLOAD {
                cut
            } else {
                Cut::Whole
            },
        )?;
        if kind == NFULA_PAYLOAD {
            return Ok(value);
        }
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Err(NetReject::NotIp)
}

fn classify(e: err::packet::SliceError) -> NetReject {
    use err::packet::SliceError as E;
    match e {
        E::Len(_) => NetReject::Truncated,
        E::Ip(err::ip::HeaderError::UnsupportedIpVersion { .. }) => NetReject::Malformed,
        E::LinuxSll(_) => NetReject::NotIp,
        E::Tcp(_) => NetReject::NotUdp,
        _ => NetReject::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        let builder = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 40, 0, 2], [10, 40, 0, 1], 64)
            .tcp(40_000, 7001, 1_000, 64_000)
            .ack(77)
            .psh();
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut frame, payload).unwrap();
        frame
    }

    proptest::proptest! {
        #[test]
        fn an_address_is_the_one_it_was_made_from(v4: [u8; 4], v6: [u8; 16], port: u16) {
            for ip in [IpAddr::from(v4), IpAddr::from(v6)] {
                let addr = Addr::from(ip);
                proptest::prop_assert_eq!(addr.ip(), ip);
                proptest::prop_assert_eq!(addr.with_port(port), SocketAddr::new(ip, port));
            }
        }
    }

    #[test]
    fn tcp_segment_fields_and_every_truncation() {
        let frame = tcp_frame(b"TBXM message");
        let seg = tcp_segment(LinkType::Ethernet, &frame).unwrap();
        assert_eq!(seg.src, "10.40.0.2:40000".parse().unwrap());
        assert_eq!(seg.dst, "10.40.0.1:7001".parse().unwrap());
        assert_eq!((seg.tcp.seq(), seg.tcp.ack()), (1_000, 77));
        let f = seg.tcp.flags();
        assert!(f.ack() && f.psh() && !f.syn() && !f.fin() && !f.rst());
        assert_eq!(seg.tcp.window(), 64_000);
        assert_eq!(seg.tcp.payload(), b"TBXM message");
        // A cut frame never panics; it yields a named reason or a shorter payload.
        let header_end = frame.len() - 12;
        for n in 0..frame.len() {
            let cut = tcp_segment(LinkType::Ethernet, &frame[..n]);
            // Cut inside the payload (the capture's snap length): still decoded.
            assert_eq!(cut.is_ok(), n >= header_end, "{n}: {cut:?}");
            match cut {
                Ok(s) => {
                    assert!(n >= header_end && s.tcp.payload().len() < 12);
                    // The IP header still says how long the payload was.
                    assert_eq!((s.payload_len, s.cut()), (12, true), "{n}");
                }
                Err(r) => assert!(
                    matches!(r, TcpReject::NotTcp | TcpReject::Truncated),
                    "{n}: {r:?}"
                ),
            }
        }
        let mut bad = frame.clone();
        bad[14 + 20 + 12] = 0x30;
        assert_eq!(
            tcp_segment(LinkType::Ethernet, &bad),
            Err(TcpReject::BadDataOffset)
        );
    }

    /// TCP segments with options over IPv4 and IPv6 on every link type: found with the same
    /// fields; every cut and every byte changed never panics.
    /// The IP packet `ip` (IPv6 if `v6`) framed by every link type decoded, PPPoE behind a
    /// VLAN tag among them.
    fn on_every_link_type(ip: &[u8], v6: bool) -> Vec<(LinkType, Vec<u8>)> {
        let family: u8 = if v6 { 10 } else { 2 };
        let ppp_proto: u8 = if v6 { 0x57 } else { 0x21 };
        let mut sll2 = vec![0u8; 20];
        sll2[0..2].copy_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        let mut sll1 = vec![0u8; 16];
        sll1[14..16].copy_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        vec![
            (LinkType::Ethernet, ethernet(&[0x8100], ip)),
            (LinkType::LinuxSll, [sll1, ip.to_vec()].concat()),
            (LinkType::LinuxSll2, [sll2, ip.to_vec()].concat()),
            (LinkType::RawIp, ip.to_vec()),
            (
                if v6 { LinkType::Ipv6 } else { LinkType::Ipv4 },
                ip.to_vec(),
            ),
            (
                LinkType::Null,
                [vec![family, 0, 0, 0], ip.to_vec()].concat(),
            ),
            (
                LinkType::Loop,
                [vec![0, 0, 0, family], ip.to_vec()].concat(),
            ),
            (
                LinkType::Ppp,
                [vec![0xff, 0x03, 0, ppp_proto], ip.to_vec()].concat(),
            ),
            (
                LinkType::PppHdlc,
                [vec![0xff, 0x03, 0, ppp_proto], ip.to_vec()].concat(),
            ),
            (LinkType::PppEther, {
                let len = u16::try_from(ip.len() + 2).unwrap().to_be_bytes();
                [
                    vec![0x11, 0, 0, 1, len[0], len[1], 0, ppp_proto],
                    ip.to_vec(),
                ]
                .concat()
            }),
            (LinkType::Ethernet, {
                let len = u16::try_from(ip.len() + 2).unwrap().to_be_bytes();
                // Behind a VLAN tag: addresses, 802.1Q and its TCI, the PPPoE session type.
                let mut f = vec![
                    2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0x81, 0, 0, 7, 0x88, 0x64,
                ];
                f.extend([0x11, 0, 0, 1, len[0], len[1], 0, ppp_proto]);
                [f, ip.to_vec()].concat()
            }),
        ]
    }

    /// A UDP datagram cut by a snap length anywhere in its payload, on every link type: the
    /// datagram as far as captured, its length the UDP header's; cut in the headers, or whole:
    /// none from [`cut_udp`] (the whole one is [`NetParser::udp`]'s).
    #[test]
    fn udp_cut_on_every_link_type() {
        for v6 in [false, true] {
            let builder = if v6 {
                PacketBuilder::ipv6([0x20; 16], [0x21; 16], 57)
            } else {
                PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 57)
            };
            let mut ip = Vec::new();
            let payload: Vec<u8> = (0u8..40).collect();
            builder.udp(40_000, 7101).write(&mut ip, &payload).unwrap();
            for (link, frame) in on_every_link_type(&ip, v6) {
                let mut parser = NetParser::new();
                let whole = parser.udp(link, &frame, 0).map(|u| (u.payload_len, u.ttl));
                assert_eq!(whole, Ok((40, 57)), "{link:?}");
                assert!(cut_udp(link, &frame).is_none(), "{link:?} whole");
                let header_end = frame.len() - payload.len();
                for n in 0..frame.len() {
                    let cut = &frame[..n];
                    assert_eq!(
                        NetParser::new().udp(link, cut, 0).err(),
                        Some(NetReject::Truncated),
                        "{link:?} cut at {n}"
                    );
                    let Some(u) = cut_udp(link, cut) else {
                        assert!(n < header_end, "{link:?} cut at {n}");
                        continue;
                    };
                    assert!(n >= header_end, "{link:?} cut at {n}");
                    assert_eq!((u.src.port(), u.dst.port()), (40_000, 7101));
                    assert_eq!(u.payload, &payload[..n - header_end], "{link:?} cut at {n}");
                    assert_eq!((u.payload_len, u.cut(), u.ttl), (40, true, 57));
                }
            }
        }
    }

    #[test]
    fn tcp_on_every_link_type_every_cut_and_mutation() {
        let mut checked = 0u32;
        for v6 in [false, true] {
            // A routed packet's TTL (hop limit), read on every path a frame takes.
            let builder = if v6 {
                PacketBuilder::ipv6([0x20; 16], [0x21; 16], 57)
            } else {
                PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 57)
            };
            let builder = builder
                .tcp(40_000, 7001, 5, 1000)
                .syn()
                .options(&[
                    etherparse::TcpOptionElement::MaximumSegmentSize(1400),
                    etherparse::TcpOptionElement::SelectiveAcknowledgementPermitted,
                    etherparse::TcpOptionElement::Timestamp(7, 0),
                ])
                .unwrap();
            let mut ip = Vec::new();
            let payload = b"0123456789ab";
            builder.write(&mut ip, payload).unwrap();
            let cases = on_every_link_type(&ip, v6);
            for (link, frame) in cases {
                let seg = tcp_segment(link, &frame).unwrap_or_else(|e| panic!("{link:?}: {e:?}"));
                assert_eq!(
                    (seg.src.port(), seg.dst.port(), seg.tcp.seq(), seg.ttl),
                    (40_000, 7001, 5, 57)
                );
                let o = seg.tcp.options();
                assert_eq!(
                    (o.mss, o.sack_permitted, o.timestamps),
                    (Some(1400), true, Some((7, 0)))
                );
                // Cut by a snap length anywhere in the payload: the segment, its length the
                // IP header's; cut in the headers: never a segment.
                let header_end = frame.len() - payload.len();
                for n in 0..frame.len() {
                    let cut = tcp_segment(link, &frame[..n]);
                    if n >= header_end {
                        let s = cut.unwrap_or_else(|e| panic!("{link:?} cut at {n}: {e:?}"));
                        assert_eq!(
                            (s.payload_len, s.cut(), s.tcp.seq(), s.ttl),
                            (12, true, 5, 57)
                        );
                    } else {
                        assert!(cut.is_err(), "{link:?} cut at {n}");
                    }
                }
                let mut mutated = frame.clone();
                for at in 0..frame.len() {
                    for v in [0x00, 0xff, frame[at] ^ 0x01, frame[at] ^ 0x40] {
                        mutated[at] = v;
                        let _ = tcp_segment(link, &mutated);
                        checked += 1;
                    }
                    mutated[at] = frame[at];
                }
            }
        }
        assert!(checked > 5_000);
    }

    proptest::proptest! {
        /// Random frames never panic on any link type.
        #[test]
        fn tcp_random_frames(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
                             link in 0usize..12) {
            let links = [
                LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::RawIp,
                LinkType::Ipv4, LinkType::Ipv6, LinkType::Null, LinkType::Loop, LinkType::Ppp,
                LinkType::PppHdlc, LinkType::PppEther, LinkType::Nflog,
            ];
            if let Ok(s) = tcp_segment(links[link], &bytes) {
                proptest::prop_assert!(s.tcp.header_len() >= 20);
            }
        }
    }

    /// The UDP datagram `slice` finds (the path every frame took before [`transport_direct`]):
    /// addresses, ports and where the payload lies.
    fn udp_sliced(
        link: LinkType,
        frame: &[u8],
    ) -> Option<(IpAddr, IpAddr, u16, u16, usize, usize)> {
        let sliced = slice(link, frame).ok()?;
        let (src, dst, _, payload) = ip_ends(sliced.net.as_ref()?)?;
        match (&sliced.transport, payload.fragmented) {
            (Some(TransportSlice::Udp(u)), false) => Some((
                src,
                dst,
                u.source_port(),
                u.destination_port(),
                u.payload().as_ptr() as usize - frame.as_ptr() as usize,
                u.payload().len(),
            )),
            _ => None,
        }
    }

    /// Where `transport_direct` finds a datagram, `slice` finds the same one.
    fn assert_direct_agrees(link: LinkType, frame: &[u8]) {
        if let Some(Transport::Udp(udp)) = transport_direct(link, frame) {
            let direct = (
                udp.src.ip(),
                udp.dst.ip(),
                udp.src.port(),
                udp.dst.port(),
                udp.payload.as_ptr() as usize - frame.as_ptr() as usize,
                udp.payload.len(),
            );
            assert_eq!(
                Some(direct),
                udp_sliced(link, frame),
                "{link:?} {frame:02x?}"
            );
        }
    }

    fn ip_udp(v6: bool, payload: &[u8]) -> Vec<u8> {
        let builder = if v6 {
            PacketBuilder::ipv6([0x20; 16], [0x21; 16], 64).udp(40_000, 4000)
        } else {
            PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(40_000, 4000)
        };
        let mut out = Vec::new();
        builder.write(&mut out, payload).unwrap();
        out
    }

    /// An Ethernet header with these VLAN tags (TPID, TCI) before `ip`.
    fn ethernet(tags: &[u16], ip: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1];
        for tpid in tags {
            f.extend(tpid.to_be_bytes());
            f.extend([0x00, 0x07]);
        }
        f.extend(if ip[0] >> 4 == 6 {
            [0x86, 0xdd]
        } else {
            [0x08, 0x00]
        });
        f.extend_from_slice(ip);
        f
    }

    /// Runs `check` on every cut of each frame and on each frame with one byte changed to each
    /// of `values` (and two bit flips of its own); returns the mutations checked.
    fn every_cut_and_mutation(
        frames: Vec<(LinkType, Vec<u8>)>,
        values: &[u8],
        check: fn(LinkType, &[u8]),
    ) -> u32 {
        let mut checked = 0u32;
        for (link, frame) in frames {
            for n in 0..=frame.len() {
                check(link, &frame[..n]);
            }
            let mut mutated = frame.clone();
            for at in 0..frame.len() {
                for &v in values.iter().chain(&[frame[at] ^ 0x01, frame[at] ^ 0x20]) {
                    mutated[at] = v;
                    check(link, &mutated);
                    checked += 1;
                }
                mutated[at] = frame[at];
            }
        }
        checked
    }

    #[test]
    fn direct_udp_path_agrees_with_sliced_packet() {
        let payload = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let (v4, v6) = (ip_udp(false, payload), ip_udp(true, payload));
        // IPv4 with 4 bytes of options (IHL 6).
        let mut v4_opts = v4[..20].to_vec();
        v4_opts[0] = 0x46;
        v4_opts.extend([1, 1, 1, 0]);
        v4_opts.extend_from_slice(&v4[20..]);
        let total = u16::try_from(v4_opts.len()).unwrap();
        v4_opts[2..4].copy_from_slice(&total.to_be_bytes());
        // IPv6 with an 8-byte hop-by-hop header before UDP.
        let mut v6_hbh = v6[..40].to_vec();
        v6_hbh[6] = 0;
        v6_hbh.extend([17, 0, 1, 4, 0, 0, 0, 0]);
        v6_hbh.extend_from_slice(&v6[40..]);
        let plen = u16::try_from(v6_hbh.len() - 40).unwrap();
        v6_hbh[4..6].copy_from_slice(&plen.to_be_bytes());
        let mut padded = ethernet(&[], &ip_udp(false, b"k"));
        padded.resize(60, 0);
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 1, 1, 1, 1, 1, 0, 0,
        ];
        sll2.extend_from_slice(&v4);
        let mut sll1 = vec![0, 4, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd];
        sll1.extend_from_slice(&v6);
        let common = [
            (LinkType::LinuxSll, sll1),
            (LinkType::Ethernet, ethernet(&[], &v4)),
            (LinkType::Ethernet, ethernet(&[], &v6)),
            (LinkType::Ethernet, padded),
            (LinkType::Ethernet, ethernet(&[0x8100], &v4)),
            (LinkType::Ethernet, ethernet(&[0x88a8, 0x8100], &v6)),
            (LinkType::Ethernet, ethernet(&[0x9100, 0x88a8, 0x8100], &v4)),
            (LinkType::Ethernet, ethernet(&[], &v4_opts)),
            (LinkType::Ethernet, ethernet(&[], &v6_hbh)),
            (LinkType::LinuxSll2, sll2),
            (LinkType::RawIp, v4.clone()),
            (LinkType::RawIp, v6.clone()),
            (LinkType::Ipv4, v4.clone()),
            (LinkType::Ipv6, v6.clone()),
        ];
        // Beyond three VLAN tags SlicedPacket stops: no datagram either way.
        let four_tags = ethernet(&[0x8100; 4], &v4);
        assert!(transport_direct(LinkType::Ethernet, &four_tags).is_none());
        assert!(udp_sliced(LinkType::Ethernet, &four_tags).is_none());
        let values = [
            0x00, 0xff, 0x01, 0x06, 0x11, 0x2c, 0x33, 0x45, 0x81, 0x86, 0x88, 0xdd,
        ];
        for (link, frame) in &common {
            assert!(
                matches!(transport_direct(*link, frame), Some(Transport::Udp(_))),
                "{link:?} takes the direct path"
            );
        }
        let checked = every_cut_and_mutation(common.to_vec(), &values, assert_direct_agrees);
        assert!(checked > 10_000);
    }

    /// A segment's addresses, ports, and where its payload lies in `frame`.
    fn tcp_place(
        src: IpAddr,
        dst: IpAddr,
        v: &TcpView<'_>,
        frame: &[u8],
    ) -> (IpAddr, IpAddr, u16, u16, usize, usize) {
        (
            src,
            dst,
            v.src_port(),
            v.dst_port(),
            v.payload().as_ptr() as usize - frame.as_ptr() as usize,
            v.payload().len(),
        )
    }

    /// The TCP segment `slice_raw` finds (the path every frame took before [`transport_direct`]):
    /// addresses, ports and where the payload lies.
    fn tcp_sliced(
        link: LinkType,
        frame: &[u8],
    ) -> Option<(IpAddr, IpAddr, u16, u16, usize, usize)> {
        let sliced = slice_raw(link, frame).ok()?;
        let (src, dst, _, payload) = ip_ends(sliced.net.as_ref()?)?;
        match (&sliced.transport, payload.fragmented) {
            (Some(TransportSlice::Tcp(t)), false) => {
                Some(tcp_place(src, dst, &TcpView::new(t.slice()).ok()?, frame))
            }
            _ => None,
        }
    }

    /// Where `transport_direct` finds a segment, `slice_raw` finds the same one (so `udp` may say
    /// "not UDP" without slicing, as it did after slicing).
    fn assert_tcp_direct_agrees(link: LinkType, frame: &[u8]) {
        if let Some(Transport::Tcp(seg)) = transport_direct(link, frame) {
            let (src, dst) = (seg.src.ip(), seg.dst.ip());
            assert_eq!(
                Some(tcp_place(src, dst, &seg.tcp, frame)),
                tcp_sliced(link, frame),
                "{link:?} {frame:02x?}"
            );
            assert_eq!(
                NetParser::new().udp(link, frame, 0).err(),
                Some(NetReject::NotUdp)
            );
        }
    }

    #[test]
    fn direct_tcp_path_agrees_with_sliced_packet() {
        let payload = b"TBXM 0123456789";
        let ip_tcp = |v6: bool| {
            let builder = if v6 {
                PacketBuilder::ipv6([0x20; 16], [0x21; 16], 64)
            } else {
                PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            }
            .tcp(40_000, 443, 7, 512)
            .ack(9)
            .options(&[
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::Timestamp(1, 2),
            ])
            .unwrap();
            let mut out = Vec::new();
            builder.write(&mut out, payload).unwrap();
            out
        };
        let (v4, v6) = (ip_tcp(false), ip_tcp(true));
        let mut sll1 = vec![0, 4, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd];
        sll1.extend_from_slice(&v6);
        // IPv4 with an authentication header (12 bytes, no ICV) before TCP: etherparse's path.
        let mut v4_ah = v4[..20].to_vec();
        v4_ah[9] = 51;
        v4_ah.extend([6, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1]);
        v4_ah.extend_from_slice(&v4[20..]);
        let total = u16::try_from(v4_ah.len()).unwrap();
        v4_ah[2..4].copy_from_slice(&total.to_be_bytes());
        // IPv6 with payload length 0 (a jumbogram's, or TSO's): the rest of the frame.
        let mut v6_unsized = v6.clone();
        v6_unsized[4..6].copy_from_slice(&[0, 0]);
        let common = [
            (LinkType::Ethernet, ethernet(&[], &v4_ah)),
            (LinkType::Ethernet, ethernet(&[], &v6_unsized)),
            (LinkType::LinuxSll, sll1),
            (LinkType::Ethernet, ethernet(&[], &v4)),
            (LinkType::Ethernet, ethernet(&[], &v6)),
            (LinkType::Ethernet, ethernet(&[0x88a8, 0x8100], &v4)),
            (LinkType::RawIp, v4.clone()),
            (LinkType::Ipv6, v6.clone()),
        ];
        // An IPv6 packet where the link header says IPv4 (and the reverse): not the common
        // frame; the sliced path reads it by its version, as before.
        for (ip, ether_type) in [(&v6, [0x08, 0x00]), (&v4, [0x86, 0xdd])] {
            let mut mislabelled = ethernet(&[], ip);
            mislabelled[12..14].copy_from_slice(&ether_type);
            assert!(transport_direct(LinkType::Ethernet, &mislabelled).is_none());
            assert!(tcp_segment(LinkType::Ethernet, &mislabelled).is_ok());
        }
        let values = [0x00, 0xff, 0x01, 0x06, 0x11, 0x33, 0x45, 0x50, 0x86, 0xdd];
        for (link, frame) in &common {
            assert!(
                matches!(transport_direct(*link, frame), Some(Transport::Tcp(_))),
                "{link:?} takes the direct path"
            );
        }
        let checked = every_cut_and_mutation(common.to_vec(), &values, assert_tcp_direct_agrees);
        assert!(checked > 4_000);
    }

    #[test]
    fn udp_is_no_tcp_segment() {
        let builder = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 40, 0, 2], [10, 40, 0, 1], 64)
            .udp(40_000, 7101);
        let mut frame = Vec::new();
        builder.write(&mut frame, b"kcp").unwrap();
        assert_eq!(
            tcp_segment(LinkType::Ethernet, &frame),
            Err(TcpReject::NotTcp)
        );
        assert!(NetParser::new().udp(LinkType::Ethernet, &frame, 0).is_ok());
    }
}
