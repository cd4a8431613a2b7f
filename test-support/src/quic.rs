//! Test-only helpers: a minimal pcapng reader (Ethernet/raw IP/Linux cooked, IPv4/IPv6, UDP,
//! Decryption Secrets Blocks) and builders for protected QUIC packets.
#![expect(clippy::unwrap_used, clippy::too_many_arguments)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tboxscope_decode::quic::keys::{CipherSuite, PacketKeys, Secret};
use tboxscope_decode::quic::multipath;
use tboxscope_decode::quic::varint::encode_varint;
use tboxscope_decode::quic::{DatagramInfo, Version};

/// One UDP datagram from a capture.
#[derive(Debug, Clone)]
pub struct Udp {
    /// 1-based frame number, as tshark counts.
    pub frame: usize,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: Vec<u8>,
}

/// What a pcapng file holds for these tests.
#[derive(Debug, Default)]
pub struct Capture {
    pub udp: Vec<Udp>,
    /// TLS key log texts from Decryption Secrets Blocks.
    pub secrets: Vec<Vec<u8>>,
    pub frames: usize,
}

fn u16le(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32le(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

pub fn read_pcapng(path: &str) -> Capture {
    let data = std::fs::read(path).unwrap();
    let mut cap = Capture::default();
    let mut links: Vec<u16> = Vec::new();
    let mut pos = 0;
    while pos + 12 <= data.len() {
        let ty = u32le(&data, pos);
        let len = u32le(&data, pos + 4) as usize;
        assert!(len >= 12 && pos + len <= data.len(), "bad block at {pos}");
        let body = &data[pos + 8..pos + len - 4];
        match ty {
            0x0a0d0d0a => {
                assert_eq!(u32le(body, 0), 0x1a2b3c4d, "only little-endian pcapng");
                links.clear();
            }
            1 => links.push(u16le(body, 0)),
            6 => {
                cap.frames += 1;
                let iface = u32le(body, 0) as usize;
                let caplen = u32le(body, 12) as usize;
                let pkt = &body[20..20 + caplen];
                if let Some(u) = udp_of(links[iface], pkt, cap.frames) {
                    cap.udp.push(u);
                }
            }
            3 => cap.frames += 1,
            0x0000000a => {
                let stype = u32le(body, 0);
                let slen = u32le(body, 4) as usize;
                if stype == 0x544c_534b {
                    cap.secrets.push(body[8..8 + slen].to_vec());
                }
            }
            _ => {}
        }
        pos += len;
    }
    cap
}

fn udp_of(link: u16, pkt: &[u8], frame: usize) -> Option<Udp> {
    let (mut ethertype, mut off) = match link {
        1 => (u16::from_be_bytes([pkt[12], pkt[13]]), 14),
        101 => (if pkt[0] >> 4 == 6 { 0x86dd } else { 0x0800 }, 0),
        113 => (u16::from_be_bytes([pkt[14], pkt[15]]), 16),
        _ => return None,
    };
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = u16::from_be_bytes([pkt[off + 2], pkt[off + 3]]);
        off += 4;
    }
    let (src_ip, dst_ip, proto, l4) = match ethertype {
        0x0800 => {
            let ihl = usize::from(pkt[off] & 0x0f) * 4;
            let s = Ipv4Addr::new(pkt[off + 12], pkt[off + 13], pkt[off + 14], pkt[off + 15]);
            let d = Ipv4Addr::new(pkt[off + 16], pkt[off + 17], pkt[off + 18], pkt[off + 19]);
            (IpAddr::V4(s), IpAddr::V4(d), pkt[off + 9], off + ihl)
        }
        0x86dd => {
            let s: [u8; 16] = pkt[off + 8..off + 24].try_into().unwrap();
            let d: [u8; 16] = pkt[off + 24..off + 40].try_into().unwrap();
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                pkt[off + 6],
                off + 40,
            )
        }
        _ => return None,
    };
    if proto != 17 {
        return None;
    }
    let sp = u16::from_be_bytes([pkt[l4], pkt[l4 + 1]]);
    let dp = u16::from_be_bytes([pkt[l4 + 2], pkt[l4 + 3]]);
    let ulen = usize::from(u16::from_be_bytes([pkt[l4 + 4], pkt[l4 + 5]]));
    let payload = pkt[l4 + 8..(l4 + ulen).min(pkt.len())].to_vec();
    Some(Udp {
        frame,
        src: SocketAddr::new(src_ip, sp),
        dst: SocketAddr::new(dst_ip, dp),
        payload,
    })
}

pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Builds a protected 1-RTT packet: `aead` seals (nonce from `path_id` and `pn`), `hp` masks.
pub fn seal_short(
    aead: &PacketKeys,
    hp: &PacketKeys,
    dcid: &[u8],
    pn: u64,
    pn_len: usize,
    key_phase: bool,
    path_id: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = vec![0x40 | (u8::from(key_phase) << 2) | (pn_len as u8 - 1)];
    out.extend_from_slice(dcid);
    let pn_offset = out.len();
    out.extend_from_slice(&pn.to_be_bytes()[8 - pn_len..]);
    let mut body = payload.to_vec();
    aead.seal(multipath::nonce(&aead.iv(), path_id, pn), &out, &mut body)
        .unwrap();
    out.extend_from_slice(&body);
    let mask = hp.header_mask(&out[pn_offset + 4..pn_offset + 20]).unwrap();
    out[0] ^= mask[0] & 0x1f;
    for i in 0..pn_len {
        out[pn_offset + i] ^= mask[1 + i];
    }
    out
}

/// The client random of the RFC 9001 Appendix A ClientHello (the key log's lookup key).
pub const RFC9001_CLIENT_RANDOM: &str =
    "ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c";
/// The server's connection ID in the RFC 9001 Appendix A exchange: the client's 1-RTT DCID.
pub const RFC9001_SERVER_CID: [u8; 8] = [0xf0, 0x67, 0xa5, 0x50, 0x2a, 0x42, 0x62, 0xb5];

/// A key log giving the RFC 9001 Appendix A connection the 1-RTT traffic secrets of
/// [`OneRttMix`] (0x11… client, 0x22… server).
pub fn rfc9001_keylog() -> String {
    format!(
        "CLIENT_TRAFFIC_SECRET_0 {RFC9001_CLIENT_RANDOM} {}\nSERVER_TRAFFIC_SECRET_0 {RFC9001_CLIENT_RANDOM} {}\n",
        "11".repeat(32),
        "22".repeat(32)
    )
}

/// AES-128-GCM packet keys of a QUIC v1 traffic secret.
pub fn v1_keys(secret: &[u8]) -> PacketKeys {
    Secret::new(CipherSuite::Aes128GcmSha256, Version::V1, secret)
        .unwrap()
        .keys()
        .unwrap()
}

/// The benches' 1-RTT traffic after the RFC 9001 Initials, protected under [`rfc9001_keylog`]'s
/// secrets, as a real exchange carries it: 55 % full-size STREAM data client → server (1200 B,
/// stream 4), 35 % ACK-only server → client (zero-length DCID, ~40 B) acknowledging every client
/// packet sent since the previous one, 10 % client ACK + two STREAM frames (~300 B, streams 8 and
/// 12); every stream's offsets are contiguous.
pub struct OneRttMix {
    client: PacketKeys,
    server: PacketKeys,
    client_pn: u64,
    server_pn: u64,
    /// First client packet number the server has not acknowledged yet.
    client_unacked: u64,
    /// Next offset of streams 4, 8 and 12.
    offsets: [u64; 3],
}

/// Positions (of 20) of the server's ACK-only packets and of the client's ACK + two STREAM
/// frames; the other 11 are full-size STREAM data.
const SERVER_ACKS: [u64; 7] = [2, 5, 8, 11, 14, 17, 19];
const CLIENT_MIXED: [u64; 2] = [9, 18];

impl Default for OneRttMix {
    fn default() -> Self {
        Self::new()
    }
}

impl OneRttMix {
    /// The mix before its first packet.
    pub fn new() -> Self {
        Self {
            client: v1_keys(&[0x11; 32]),
            server: v1_keys(&[0x22; 32]),
            client_pn: 0,
            server_pn: 0,
            client_unacked: 0,
            offsets: [0; 3],
        }
    }

    fn stream(&mut self, f: &mut Vec<u8>, which: usize, len: u64, byte: u8) {
        f.push(0x0e);
        encode_varint([4u64, 8, 12][which], f);
        encode_varint(self.offsets[which], f);
        encode_varint(len, f);
        f.extend(std::iter::repeat_n(byte, len as usize));
        self.offsets[which] += len;
    }

    /// The packet at position `i` of the mix, and whether the client sends it.
    pub fn packet(&mut self, i: u64) -> (bool, Vec<u8>) {
        let kind = i % 20;
        let mut f = Vec::new();
        if SERVER_ACKS.contains(&kind) {
            // Every client packet since the previous ACK (the last one again when none).
            let largest = self.client_pn.saturating_sub(1);
            f.push(0x02);
            encode_varint(largest, &mut f);
            f.push(0x01); // ack delay: 8 µs at the default exponent
            f.push(0x00); // no further ranges
            encode_varint(largest - self.client_unacked.min(largest), &mut f);
            self.client_unacked = self.client_pn;
            let p = seal_short(
                &self.server,
                &self.server,
                &[],
                self.server_pn,
                2,
                false,
                0,
                &f,
            );
            self.server_pn += 1;
            return (false, p);
        }
        if CLIENT_MIXED.contains(&kind) {
            let largest = self.server_pn.saturating_sub(1);
            f.push(0x02);
            encode_varint(largest, &mut f);
            f.push(0x10);
            f.push(0x00);
            encode_varint(largest.min(3), &mut f);
            self.stream(&mut f, 1, 120, 0x33);
            self.stream(&mut f, 2, 120, 0x33);
        } else {
            self.stream(&mut f, 0, 1150, 0x5a);
        }
        let p = seal_short(
            &self.client,
            &self.client,
            &RFC9001_SERVER_CID,
            self.client_pn,
            2,
            false,
            0,
            &f,
        );
        self.client_pn += 1;
        (true, p)
    }
}

/// The two directions of a client ↔ server exchange: (to the server, to the client).
pub fn directions(client: SocketAddr, server: SocketAddr) -> (DatagramInfo, DatagramInfo) {
    let way = |src, dst| DatagramInfo {
        src: Some(src),
        dst: Some(dst),
        from_client: None,
    };
    (way(client, server), way(server, client))
}
