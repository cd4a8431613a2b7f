//! ICMP's word on a TCP segment that did not fit the path: IPv4 "fragmentation needed"
//! (RFC 792, type 3 code 4, with RFC 1191's next-hop MTU) and ICMPv6 "packet too big"
//! (RFC 4443, type 2). A router sends one back to a segment's sender quoting the start of the
//! segment it dropped; the sender lowers its path MTU and sends those bytes again in smaller
//! segments (Linux: `tcp_v4_mtu_reduced` → `tcp_simple_retransmit`). The quote names the
//! connection and the first sequence number of the segment that was too big.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use etherparse::IpNumber;

use crate::net::{ip_cut, ip_direct, LinkType};

/// ICMPv4 "destination unreachable".
const ICMPV4_UNREACHABLE: u8 = 3;
/// Its code "fragmentation needed and DF set".
const ICMPV4_FRAGMENTATION_NEEDED: u8 = 4;
/// ICMPv6 "packet too big".
const ICMPV6_PACKET_TOO_BIG: u8 = 2;
/// Bytes of an ICMP header before the quoted packet (type, code, checksum, four more).
const ICMP_HEADER: usize = 8;
/// Bytes of the quoted TCP header needed: ports and sequence number.
const TCP_QUOTE: usize = 8;

/// A router's message that a TCP segment was too big for the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathMtuSignal {
    /// The router that sent it.
    pub router: IpAddr,
    /// Where it went (the segment's sender).
    pub to: IpAddr,
    /// The largest packet the path carries, in bytes (0: the router did not say, as before
    /// RFC 1191).
    pub mtu: u32,
    /// The quoted segment's sender.
    pub segment_src: SocketAddr,
    /// The quoted segment's receiver.
    pub segment_dst: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: u32,
}

/// Why an ICMP "fragmentation needed" / "packet too big" named no TCP segment. Every one is
/// counted under one reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathMtuReject {
    /// The message ends before the quoted IP header and the first 8 bytes of TCP.
    Truncated,
    /// The quoted packet is not IP of the message's own version, or has an impossible header
    /// length.
    Malformed,
    /// The quoted packet carries something other than TCP (UDP, or IPv6 extension headers).
    NotTcp,
}

impl PathMtuReject {
    /// All reasons, in a stable order (for reports).
    pub const ALL: [PathMtuReject; 3] = [Self::Truncated, Self::Malformed, Self::NotTcp];

    /// The reason's name as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Malformed => "malformed",
            Self::NotTcp => "not_tcp",
        }
    }
}

/// The path MTU signal in `frame` (link layer `link`): `None` when the frame is no ICMP
/// "fragmentation needed" / "packet too big" (or arrives in a fragment, or on a link layer
/// only the full slicer reads), else the quoted segment or why none could be read.
pub fn path_mtu_signal(
    link: LinkType,
    frame: &[u8],
) -> Option<Result<PathMtuSignal, PathMtuReject>> {
    // Captures of headers only cut the router's message: the quote's start is what counts.
    let (router, to, _, ip) = ip_direct(link, frame).or_else(|| ip_cut(link, frame))?;
    let (router, to) = (router.ip(), to.ip());
    if ip.fragmented {
        return None;
    }
    let icmp = ip.payload;
    let (&kind, rest) = icmp.split_first()?;
    let code = rest.first().copied()?;
    let mtu = match (ip.ip_number, router) {
        (IpNumber::ICMP, IpAddr::V4(_))
            if kind == ICMPV4_UNREACHABLE && code == ICMPV4_FRAGMENTATION_NEEDED =>
        {
            u32::from(u16::from_be_bytes([*icmp.get(6)?, *icmp.get(7)?]))
        }
        (IpNumber::IPV6_ICMP, IpAddr::V6(_)) if kind == ICMPV6_PACKET_TOO_BIG => {
            let b = icmp.get(4..ICMP_HEADER)?;
            u32::from_be_bytes([b[0], b[1], b[2], b[3]])
        }
        _ => return None,
    };
    let quote = icmp.get(ICMP_HEADER..).unwrap_or_default();
    Some(
        quoted_segment(quote, router.is_ipv4()).map(|(src, dst, seq)| PathMtuSignal {
            router,
            to,
            mtu,
            segment_src: src,
            segment_dst: dst,
            seq,
        }),
    )
}

/// The endpoints and sequence number of the TCP segment quoted in `quote` (an IPv4 packet's
/// start when `v4`, else an IPv6 one's).
fn quoted_segment(quote: &[u8], v4: bool) -> Result<(SocketAddr, SocketAddr, u32), PathMtuReject> {
    let version = quote.first().ok_or(PathMtuReject::Truncated)? >> 4;
    let (src, dst, protocol, header) = match (v4, version) {
        (true, 4) => {
            let h = quote.get(..20).ok_or(PathMtuReject::Truncated)?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            if ihl < 20 {
                return Err(PathMtuReject::Malformed);
            }
            let addr = |i: usize| IpAddr::V4(Ipv4Addr::new(h[i], h[i + 1], h[i + 2], h[i + 3]));
            (addr(12), addr(16), h[9], ihl)
        }
        (false, 6) => {
            let h = quote.get(..40).ok_or(PathMtuReject::Truncated)?;
            let addr = |i: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&h[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            (addr(8), addr(24), h[6], 40)
        }
        _ => return Err(PathMtuReject::Malformed),
    };
    if protocol != IpNumber::TCP.0 {
        return Err(PathMtuReject::NotTcp);
    }
    let tcp = quote
        .get(header..header + TCP_QUOTE)
        .ok_or(PathMtuReject::Truncated)?;
    let port = |i: usize| u16::from_be_bytes([tcp[i], tcp[i + 1]]);
    Ok((
        SocketAddr::new(src, port(0)),
        SocketAddr::new(dst, port(2)),
        u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame: `ip` after a header of type IPv4 or IPv6.
    fn ether(ip: &[u8], v6: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        f.extend_from_slice(ip);
        f
    }

    fn ipv4(src: [u8; 4], dst: [u8; 4], protocol: u8, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(20 + payload.len()).unwrap_or(u16::MAX);
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        h[2..4].copy_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.extend_from_slice(payload);
        h
    }

    fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(payload.len()).unwrap_or(u16::MAX);
        let mut h = vec![0x60, 0, 0, 0, 0, 0, next, 64];
        h[4..6].copy_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.extend_from_slice(payload);
        h
    }

    /// The first 20 bytes of a TCP header from port 1470 to 25 at sequence `seq`.
    fn tcp_head(seq: u32) -> Vec<u8> {
        let mut t = vec![0x05, 0xbe, 0x00, 0x19];
        t.extend_from_slice(&seq.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        t
    }

    fn frag_needed(mtu: u16, quote: &[u8]) -> Vec<u8> {
        let mut icmp = vec![3, 4, 0, 0, 0, 0];
        icmp.extend_from_slice(&mtu.to_be_bytes());
        icmp.extend_from_slice(quote);
        ether(&ipv4([192, 168, 1, 1], [10, 10, 1, 4], 1, &icmp), false)
    }

    #[test]
    fn fragmentation_needed_names_the_segment_and_the_mtu() {
        let quoted = ipv4([10, 10, 1, 4], [74, 53, 140, 153], 6, &tcp_head(0x11223344));
        let s = path_mtu_signal(LinkType::Ethernet, &frag_needed(576, &quoted));
        assert_eq!(
            s,
            Some(Ok(PathMtuSignal {
                router: "192.168.1.1".parse().unwrap(),
                to: "10.10.1.4".parse().unwrap(),
                mtu: 576,
                segment_src: "10.10.1.4:1470".parse().unwrap(),
                segment_dst: "74.53.140.153:25".parse().unwrap(),
                seq: 0x1122_3344,
            }))
        );
    }

    #[test]
    fn packet_too_big_names_the_segment_and_the_mtu() {
        let (a, b, r) = ([0x20; 16], [0x30; 16], [0x40; 16]);
        let quoted = ipv6(a, b, 6, &tcp_head(7));
        let mut icmp = vec![2, 0, 0, 0];
        icmp.extend_from_slice(&1280u32.to_be_bytes());
        icmp.extend_from_slice(&quoted);
        let frame = ether(&ipv6(r, a, 58, &icmp), true);
        let s = path_mtu_signal(LinkType::Ethernet, &frame);
        let Some(Ok(s)) = s else {
            panic!("{s:?}");
        };
        assert_eq!((s.mtu, s.seq), (1280, 7));
        assert_eq!(s.segment_src, SocketAddr::new(IpAddr::V6(a.into()), 1470));
        assert_eq!(s.segment_dst, SocketAddr::new(IpAddr::V6(b.into()), 25));
        assert_eq!(s.router, IpAddr::V6(r.into()));
    }

    #[test]
    fn other_icmp_and_other_quotes_are_told_apart() {
        // An echo request is no signal.
        let echo = ether(
            &ipv4([1, 1, 1, 1], [2, 2, 2, 2], 1, &[8, 0, 0, 0, 0, 0, 0, 0]),
            false,
        );
        assert_eq!(path_mtu_signal(LinkType::Ethernet, &echo), None);
        // A quoted UDP datagram is a signal about no TCP segment.
        let udp = ipv4([10, 10, 1, 4], [9, 9, 9, 9], 17, &tcp_head(1));
        assert_eq!(
            path_mtu_signal(LinkType::Ethernet, &frag_needed(1400, &udp)),
            Some(Err(PathMtuReject::NotTcp))
        );
        // A quoted IPv6 packet in ICMPv4 is no packet it could have sent.
        let v6 = ipv6([1; 16], [2; 16], 6, &tcp_head(1));
        assert_eq!(
            path_mtu_signal(LinkType::Ethernet, &frag_needed(1400, &v6)),
            Some(Err(PathMtuReject::Malformed))
        );
    }

    #[test]
    fn every_truncation_is_none_or_a_reason_and_never_a_panic() {
        let quoted = ipv4([10, 10, 1, 4], [74, 53, 140, 153], 6, &tcp_head(9));
        let frame = frag_needed(576, &quoted);
        // Cut by a capture's snap length, the frame still names the segment while it holds the
        // quote's IP header and the first 8 bytes of TCP (Ethernet 14, IP 20, ICMP 8 before).
        let quote_whole = 14 + 20 + ICMP_HEADER + 20 + TCP_QUOTE;
        for cut in 0..=frame.len() {
            let got = path_mtu_signal(LinkType::Ethernet, &frame[..cut]);
            if cut >= quote_whole {
                assert!(matches!(got, Some(Ok(s)) if s.seq == 9), "{cut}: {got:?}");
            } else {
                assert!(!matches!(got, Some(Ok(_))), "{cut}: {got:?}");
            }
        }
        // A router that quoted less than the IP header and 8 bytes of TCP: truncated.
        for keep in 0..20 + TCP_QUOTE {
            let short = frag_needed(576, &quoted[..keep]);
            assert_eq!(
                path_mtu_signal(LinkType::Ethernet, &short),
                Some(Err(PathMtuReject::Truncated)),
                "{keep}"
            );
        }
    }
}
