//! Link types as the field captures them: Linux cooked v1 with any hardware type,
//! PPP, PPP in HDLC framing and Cisco HDLC, PPPoE inside Ethernet (behind VLAN tags too) and
//! without it, BSD loopback in both byte orders, and NFLOG in both byte orders. Frames are
//! built here, written into real pcap and pcapng files, and read back; every truncation and
//! every non-IP payload is rejected under a reason, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;

use probe_user::analyze::Analyzer;
use probe_user::decode::net::{LinkType, NetParser, NetReject};
use probe_user::dissect::{Decoded, DissectConfig};
use probe_user::source::pcap::CaptureReader;
use tboxscope_test_support::fixture;
use tboxscope_test_support::pcap::*;

const PAYLOAD: &[u8] = b"tbox control message";

/// Linux cooked v1 with hardware type `arphrd` and protocol `proto`.
fn sll_hw(arphrd: u16, proto: u16, ip: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 4];
    v.extend(arphrd.to_be_bytes());
    v.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    v.extend(proto.to_be_bytes());
    v.extend(ip);
    v
}

fn ether_type(v6: bool) -> u16 {
    if v6 {
        0x86dd
    } else {
        0x0800
    }
}

/// A PPP frame: `hdlc` adds the 0xff 0x03 address and control bytes; `compressed` writes the
/// protocol in one byte.
fn ppp(ip: &[u8], v6: bool, hdlc: bool, compressed: bool) -> Vec<u8> {
    let mut v = Vec::new();
    if hdlc {
        v.extend([0xff, 0x03]);
    }
    let proto: u16 = if v6 { 0x57 } else { 0x21 };
    if compressed {
        v.push(proto as u8);
    } else {
        v.extend(proto.to_be_bytes());
    }
    v.extend(ip);
    v
}

/// A PPPoE session header and PPP (no Ethernet header); `pad` bytes of Ethernet padding after.
fn pppoe(ip: &[u8], v6: bool, pad: usize) -> Vec<u8> {
    let body = ppp(ip, v6, false, false);
    let mut v = vec![0x11, 0x00, 0x12, 0x34];
    v.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
    v.extend(body);
    v.extend(std::iter::repeat_n(0, pad));
    v
}

/// Ethernet (with VLAN tags) carrying a PPPoE session.
fn eth_pppoe(vlans: &[u16], ip: &[u8], v6: bool) -> Vec<u8> {
    let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    for id in vlans {
        v.extend(0x8100u16.to_be_bytes());
        v.extend(id.to_be_bytes());
    }
    v.extend(0x8864u16.to_be_bytes());
    v.extend(pppoe(ip, v6, 4));
    v
}

/// Cisco HDLC: address 0x0f, control 0, then an EtherType.
fn cisco_hdlc(ip: &[u8], v6: bool) -> Vec<u8> {
    let mut v = vec![0x0f, 0x00];
    v.extend(ether_type(v6).to_be_bytes());
    v.extend(ip);
    v
}

/// An NFLOG record: header, a hardware-protocol and a prefix attribute (padded), then the
/// payload attribute, in the byte order `big`.
fn nflog(ip: &[u8], v6: bool, big: bool) -> Vec<u8> {
    let u16b = |n: u16| {
        if big {
            n.to_be_bytes()
        } else {
            n.to_le_bytes()
        }
    };
    let mut v = vec![if v6 { 10 } else { 2 }, 0, 0, 5];
    let mut tlv = |kind: u16, value: &[u8]| {
        v.extend(u16b(u16::try_from(value.len() + 4).unwrap()));
        v.extend(u16b(kind));
        v.extend(value);
        v.extend(std::iter::repeat_n(0, (4 - value.len() % 4) % 4));
    };
    tlv(1, &[0x08, 0x00, 3, 0]); // NFULA_PACKET_HDR
    tlv(10, b"tbx\0\0"); // NFULA_PREFIX, 5 bytes: padded to 8
    tlv(9, ip); // NFULA_PAYLOAD
    v
}

/// Every case: (LINKTYPE, frame). Each carries UDP 4000 → 5000 with [`PAYLOAD`].
fn cases() -> Vec<(u32, Vec<u8>)> {
    let v4 = ipv4_udp(4000, 5000, PAYLOAD);
    let v6 = ipv6_udp(4000, 5000, PAYLOAD);
    let mut cases = Vec::new();
    for (ip, is6) in [(&v4, false), (&v6, true)] {
        // Cooked v1: loopback, PPP, raw IP (wwan), IP-in-IP / GRE / SIT tunnels.
        for arphrd in [772, 512, 519, 768, 776, 778, 0xfffe] {
            cases.push((113, sll_hw(arphrd, ether_type(is6), ip)));
        }
        for (hdlc, compressed) in [(false, false), (true, false), (false, true), (true, true)] {
            cases.push((9, ppp(ip, is6, hdlc, compressed)));
        }
        cases.push((50, ppp(ip, is6, true, false)));
        cases.push((50, cisco_hdlc(ip, is6)));
        cases.push((51, pppoe(ip, is6, 0)));
        cases.push((1, eth_pppoe(&[], ip, is6)));
        cases.push((1, eth_pppoe(&[7], ip, is6)));
        cases.push((1, eth_pppoe(&[7, 8], ip, is6)));
        cases.push((239, nflog(ip, is6, false)));
        cases.push((239, nflog(ip, is6, true)));
    }
    cases.push((0, null(&v4, 2, false)));
    cases.push((0, null(&v4, 2, true)));
    for family in [24, 28, 30] {
        cases.push((0, null(&v6, family, false)));
        cases.push((0, null(&v6, family, true)));
    }
    cases.push((108, null(&v4, 2, true)));
    cases.push((108, null(&v6, 24, true)));
    cases
}

#[test]
fn every_field_link_type_yields_the_udp_datagram_through_a_file() {
    for (i, (linktype, frame)) in cases().into_iter().enumerate() {
        let classic = pcap(
            linktype,
            false,
            false,
            &[(1, frame.len() as u32, frame.clone())],
        );
        let mut ng = Ng::new(false);
        ng.idb(linktype as u16, 0, None, None)
            .epb(0, 1, frame.len() as u32, &frame);
        for bytes in [classic, ng.bytes] {
            let mut r = CaptureReader::new(Cursor::new(&bytes), "case", "case").unwrap();
            let p = r.next_packet().unwrap().unwrap();
            let (iface, data) = (p.interface, p.data.to_vec());
            let link = r.interfaces()[iface].link;
            let link = link.unwrap_or_else(|| panic!("case {i}: linktype {linktype} unsupported"));
            assert_eq!(link.linktype(), linktype, "case {i}");
            let mut net = NetParser::new();
            let udp = net
                .udp(link, &data, 0)
                .unwrap_or_else(|e| panic!("case {i} (linktype {linktype}): {e:?}"));
            assert_eq!((udp.src.port(), udp.dst.port()), (4000, 5000), "case {i}");
            assert_eq!(udp.payload, PAYLOAD, "case {i}");
        }
    }
}

#[test]
fn every_truncation_is_rejected_by_reason_never_a_panic() {
    for (i, (linktype, frame)) in cases().into_iter().enumerate() {
        let link = LinkType::from_linktype(linktype).unwrap();
        let mut net = NetParser::new();
        // Up to the end of the UDP header: no datagram. (NFLOG may end with the payload
        // attribute's padding, Ethernet PPPoE with its padding: those are cut first.)
        let udp_end = frame
            .windows(PAYLOAD.len())
            .position(|w| w == PAYLOAD)
            .unwrap();
        for n in 0..udp_end {
            let r = net.udp(link, &frame[..n], 0);
            assert!(
                matches!(
                    r,
                    Err(NetReject::Truncated | NetReject::Malformed | NetReject::NotIp)
                ),
                "case {i} (linktype {linktype}) cut at {n}: {r:?}"
            );
        }
        // Every single-byte change is handled (a datagram or a reason), never a panic.
        let mut mutated = frame.clone();
        for at in 0..udp_end {
            for v in [0x00, 0xff, frame[at] ^ 0x01, frame[at] ^ 0x80] {
                mutated[at] = v;
                let _ = net.udp(link, &mutated, 0);
            }
            mutated[at] = frame[at];
        }
    }
}

#[test]
fn non_ip_payloads_of_the_new_link_types_are_not_ip() {
    let mut net = NetParser::new();
    // PPP LCP (0xc021) and IPCP (0x8021).
    for proto in [0xc021u16, 0x8021] {
        let mut f = vec![0xff, 0x03];
        f.extend(proto.to_be_bytes());
        f.extend([1, 1, 0, 4]);
        assert_eq!(net.udp(LinkType::Ppp, &f, 0), Err(NetReject::NotIp));
    }
    // PPPoE discovery (0x8863) in Ethernet, and a session frame with a bad version.
    let mut disc = vec![2; 12];
    disc.extend(0x8863u16.to_be_bytes());
    disc.extend([0x11, 0x09, 0, 0, 0, 0]);
    assert_eq!(net.udp(LinkType::Ethernet, &disc, 0), Err(NetReject::NotIp));
    let mut bad = eth_pppoe(&[], &ipv4_udp(1, 2, b"x"), false);
    bad[14] = 0x21;
    assert_eq!(
        net.udp(LinkType::Ethernet, &bad, 0),
        Err(NetReject::Malformed)
    );
    // Cooked v1 carrying ARP, and an NFLOG record without the packet.
    let arp = sll_hw(772, 0x0806, &[0; 28]);
    assert_eq!(net.udp(LinkType::LinuxSll, &arp, 0), Err(NetReject::NotIp));
    let no_payload = vec![2, 0, 0, 5, 8, 0, 1, 0, 0x08, 0, 3, 0];
    assert_eq!(
        net.udp(LinkType::Nflog, &no_payload, 0),
        Err(NetReject::NotIp)
    );
}

/// nDPI's QUIC v2 capture is Linux cooked v1 on a non-Ethernet hardware type: every one of its
/// 24 QUIC packets (tshark's decode) is decoded and decrypted, with tshark's packet numbers.
#[test]
fn cooked_v1_quic_v2_fixture_decodes_as_tshark_does() {
    // `tshark -r ndpi-quic-v2.pcapng -Y quic -T fields -e frame.number -e quic.packet_number`
    let tshark: &[(u64, &[u64])] = &[
        (1, &[66029, 0]),
        (2, &[128705, 0, 1, 0]),
        (3, &[1]),
        (4, &[0, 1]),
        (5, &[2]),
        (6, &[2]),
        (7, &[3]),
        (8, &[4]),
        (9, &[3]),
        (10, &[4]),
        (11, &[5]),
        (12, &[6]),
        (13, &[5]),
        (14, &[7]),
        (15, &[8]),
        (16, &[9]),
        (17, &[6]),
        (18, &[10]),
        (19, &[7]),
    ];
    let mut analyzer = Analyzer::new(DissectConfig::default());
    let mut got: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut decrypted = 0;
    let errors = analyzer
        .run_files(&[fixture("ndpi-quic-v2.pcapng")], &mut |r| {
            if let Decoded::QuicPacket(p) = &r.packet.decoded {
                decrypted += usize::from(p.decrypted);
                match got.last_mut() {
                    Some((f, pns)) if *f == r.frame => pns.push(p.pn.unwrap_or(u64::MAX)),
                    _ => got.push((r.frame, vec![p.pn.unwrap_or(u64::MAX)])),
                }
            }
            Ok::<(), ()>(())
        })
        .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let want: Vec<(u64, Vec<u64>)> = tshark.iter().map(|(f, p)| (*f, p.to_vec())).collect();
    assert_eq!(got, want);
    assert_eq!(decrypted, 24);
    assert_eq!(analyzer.stats().net_rejected.not_ip, 0);
}

/// nDPI's QUIC v2 capture: its 1-RTT packets carry TIME_STAMP (0x2f5) and ACK_FREQUENCY frames
/// before and after their STREAM frames; every STREAM frame tshark shows is decoded, none of
/// its packets stops early.
#[test]
fn quic_v2_fixture_yields_every_stream_frame_tshark_shows() {
    // `tshark -r ndpi-quic-v2.pcapng -Y quic.stream.stream_id -T fields -e frame.number
    //  -e quic.stream.stream_id -e quic.stream.length` (no OFF bit: every offset is 0).
    let tshark: &[(u64, &[(u64, u64)])] = &[
        (1, &[(2, 7), (6, 1), (10, 1), (0, 38)]),
        (2, &[(3, 7), (7, 1), (11, 1)]),
        (13, &[(2, 7), (6, 1), (10, 1), (0, 38)]),
        (14, &[(0, 409)]),
        (15, &[(0, 409)]),
        (16, &[(0, 409)]),
        (17, &[(4, 37)]),
        (18, &[(4, 19)]),
        (19, &[(8, 35)]),
    ];
    let mut analyzer = Analyzer::new(DissectConfig::default());
    let mut got: Vec<(u64, Vec<(u64, u64)>)> = Vec::new();
    let mut stopped = Vec::new();
    analyzer
        .run_files(&[fixture("ndpi-quic-v2.pcapng")], &mut |r| {
            if let Decoded::QuicPacket(p) = &r.packet.decoded {
                if let Some(e) = &p.frame_error {
                    stopped.push((r.frame, e.clone()));
                }
                for f in p.frames.iter().filter(|f| f.frame_type == "stream") {
                    assert_eq!(f.offset, Some(0));
                    let s = (f.stream_id.unwrap_or(u64::MAX), f.length.unwrap_or(0));
                    match got.last_mut() {
                        Some((n, v)) if *n == r.frame => v.push(s),
                        _ => got.push((r.frame, vec![s])),
                    }
                }
            }
            Ok::<(), ()>(())
        })
        .unwrap();
    let want: Vec<(u64, Vec<(u64, u64)>)> = tshark.iter().map(|(f, s)| (*f, s.to_vec())).collect();
    assert_eq!(got, want);
    assert!(stopped.is_empty(), "{stopped:?}");
}
