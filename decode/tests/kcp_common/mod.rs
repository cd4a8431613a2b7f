//! Test-only helpers shared by the KCP tests: a minimal pcap reader (classic pcap, Ethernet,
//! IPv4/IPv6, UDP) — the real reader lives in probe-user.
#![expect(clippy::unwrap_used, clippy::too_many_arguments)]

/// One UDP datagram from a capture.
pub struct UdpFrame {
    pub number: usize,
    pub time_ns: u64,
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: Vec<u8>,
}

fn u16be(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads every UDP frame of a little-endian, microsecond, Ethernet pcap file.
pub fn read_udp_frames(path: &str) -> Vec<UdpFrame> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(
        &data[0..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "LE microsecond pcap"
    );
    assert_eq!(
        u32::from_le_bytes(data[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let mut off = 24;
    let mut out = Vec::new();
    let mut number = 0;
    while off + 16 <= data.len() {
        let rec = &data[off..off + 16];
        let sec = u64::from(u32::from_le_bytes(rec[0..4].try_into().unwrap()));
        let usec = u64::from(u32::from_le_bytes(rec[4..8].try_into().unwrap()));
        let incl = u32::from_le_bytes(rec[8..12].try_into().unwrap()) as usize;
        let frame = &data[off + 16..off + 16 + incl];
        off += 16 + incl;
        number += 1;
        let (proto, l4) = match u16be(frame, 12) {
            0x86dd => (frame[14 + 6], &frame[14 + 40..]),
            0x0800 => {
                let ihl = usize::from(frame[14] & 0x0f) * 4;
                (frame[14 + 9], &frame[14 + ihl..])
            }
            _ => continue,
        };
        if proto != 17 {
            continue;
        }
        let ulen = usize::from(u16be(l4, 4));
        out.push(UdpFrame {
            number,
            time_ns: sec * 1_000_000_000 + usec * 1000,
            src_port: u16be(l4, 0),
            dst_port: u16be(l4, 2),
            payload: l4[8..ulen].to_vec(),
        });
    }
    out
}

/// Parses tshark `-T fields -e frame.number -e udp.payload` output.
pub fn parse_tshark_payloads(text: &str) -> Vec<(usize, Vec<u8>)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (n, hex) = l.split_once('\t').unwrap();
            let hex = hex.trim();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (n.parse().unwrap(), bytes)
        })
        .collect()
}

pub const KCP_FIXTURE: &str = "/work/shared/fixtures/ndpi-kcp.pcap";

/// Path of the fixture: next to the workspace (`../shared/fixtures`) or the absolute fallback.
pub fn fixture_path() -> String {
    let rel = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/ndpi-kcp.pcap"
    );
    if std::path::Path::new(rel).exists() {
        rel.to_string()
    } else {
        KCP_FIXTURE.to_string()
    }
}

/// Encodes one raw ikcp segment (test-side encoder, independent of the decoder).
pub fn encode(
    conv: u32,
    cmd: u8,
    frg: u8,
    wnd: u16,
    ts: u32,
    sn: u32,
    una: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + payload.len());
    v.extend_from_slice(&conv.to_le_bytes());
    v.push(cmd);
    v.push(frg);
    v.extend_from_slice(&wnd.to_le_bytes());
    v.extend_from_slice(&ts.to_le_bytes());
    v.extend_from_slice(&sn.to_le_bytes());
    v.extend_from_slice(&una.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}
