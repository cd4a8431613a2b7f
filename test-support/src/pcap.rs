//! Builders for tiny capture files and frames, written byte by byte from the format specs.
#![expect(clippy::unwrap_used, clippy::too_many_arguments)]

use etherparse::{PacketBuilder, VlanId};

/// Classic pcap: `packets` are (ts_ns, orig_len, bytes).
pub fn pcap(linktype: u32, nano: bool, big: bool, packets: &[(u64, u32, Vec<u8>)]) -> Vec<u8> {
    let u32b = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend(u32b(if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }));
    out.extend(u16b(2));
    out.extend(u16b(4));
    out.extend(u32b(0));
    out.extend(u32b(0));
    out.extend(u32b(65535));
    out.extend(u32b(linktype));
    for (ts, orig, data) in packets {
        let sec = (ts / 1_000_000_000) as u32;
        let frac = if nano {
            (ts % 1_000_000_000) as u32
        } else {
            ((ts % 1_000_000_000) / 1000) as u32
        };
        out.extend(u32b(sec));
        out.extend(u32b(frac));
        out.extend(u32b(data.len() as u32));
        out.extend(u32b(*orig));
        out.extend(data);
    }
    out
}

/// A classic pcap file (µs, Ethernet, little-endian) written frame by frame, for captures too
/// large to build in memory.
pub struct PcapFile {
    w: std::io::BufWriter<std::fs::File>,
    written: u64,
}

impl PcapFile {
    /// Creates `path` and writes the file header.
    pub fn create(path: &std::path::Path) -> Self {
        use std::io::Write;
        let mut w =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
        let mut hdr = Vec::with_capacity(24);
        hdr.extend(0xa1b2_c3d4u32.to_le_bytes());
        hdr.extend(2u16.to_le_bytes());
        hdr.extend(4u16.to_le_bytes());
        hdr.extend([0u8; 8]);
        hdr.extend(65535u32.to_le_bytes());
        hdr.extend(1u32.to_le_bytes());
        w.write_all(&hdr).unwrap();
        Self {
            w,
            written: hdr.len() as u64,
        }
    }

    /// Appends one frame captured whole at `ts_us`.
    pub fn packet(&mut self, ts_us: u64, frame: &[u8]) {
        use std::io::Write;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((ts_us / 1_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((ts_us % 1_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.w.write_all(&rec).unwrap();
        self.w.write_all(frame).unwrap();
        self.written += (rec.len() + frame.len()) as u64;
    }

    /// Flushes and syncs (so that the kernel's write-back does not compete with timed reads
    /// that follow); returns the file size.
    pub fn finish(mut self) -> u64 {
        use std::io::Write;
        self.w.flush().unwrap();
        self.w.get_ref().sync_all().unwrap();
        self.written
    }
}

/// pcapng writer in either byte order.
pub struct Ng {
    pub big: bool,
    pub bytes: Vec<u8>,
}

impl Ng {
    pub fn new(big: bool) -> Self {
        let mut ng = Self {
            big,
            bytes: Vec::new(),
        };
        ng.shb();
        ng
    }
    fn u32b(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn u16b(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    /// Appends a block with `body` (padded to 4).
    pub fn block(&mut self, kind: u32, body: &[u8]) -> &mut Self {
        let mut body = body.to_vec();
        while body.len() & 3 != 0 {
            body.push(0);
        }
        let len = (12 + body.len()) as u32;
        let (k, l) = (self.u32b(kind), self.u32b(len));
        self.bytes.extend(k);
        self.bytes.extend(l);
        self.bytes.extend(body);
        self.bytes.extend(l);
        self
    }
    /// A new section header.
    pub fn shb(&mut self) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(0x1a2b_3c4d));
        body.extend(self.u16b(1));
        body.extend(self.u16b(0));
        body.extend(if self.big {
            (-1i64).to_be_bytes()
        } else {
            (-1i64).to_le_bytes()
        });
        // SHB type is the same in both orders.
        let len = (12 + body.len()) as u32;
        let l = self.u32b(len);
        self.bytes.extend(0x0a0d_0d0au32.to_le_bytes());
        self.bytes.extend(l);
        self.bytes.extend(body);
        self.bytes.extend(l);
        self
    }
    pub fn option(&self, out: &mut Vec<u8>, code: u16, value: &[u8]) {
        out.extend(self.u16b(code));
        out.extend(self.u16b(value.len() as u16));
        out.extend(value);
        while out.len() & 3 != 0 {
            out.push(0);
        }
    }
    /// Interface Description Block.
    pub fn idb(
        &mut self,
        linktype: u16,
        snaplen: u32,
        name: Option<&str>,
        tsresol: Option<u8>,
    ) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u16b(linktype));
        body.extend(self.u16b(0));
        body.extend(self.u32b(snaplen));
        if let Some(n) = name {
            self.option(&mut body, 2, n.as_bytes());
        }
        if let Some(r) = tsresol {
            self.option(&mut body, 9, &[r]);
        }
        if name.is_some() || tsresol.is_some() {
            body.extend([0, 0, 0, 0]);
        }
        self.block(1, &body)
    }
    /// Enhanced Packet Block with a raw timestamp in the interface's units.
    pub fn epb(&mut self, iface: u32, ts: u64, orig: u32, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(iface));
        body.extend(self.u32b((ts >> 32) as u32));
        body.extend(self.u32b(ts as u32));
        body.extend(self.u32b(data.len() as u32));
        body.extend(self.u32b(orig));
        body.extend(data);
        self.block(6, &body)
    }
    /// Simple Packet Block.
    pub fn spb(&mut self, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(data.len() as u32));
        body.extend(data);
        self.block(3, &body)
    }
    /// Obsolete Packet Block.
    pub fn opb(&mut self, iface: u16, ts: u64, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u16b(iface));
        body.extend(self.u16b(0));
        body.extend(self.u32b((ts >> 32) as u32));
        body.extend(self.u32b(ts as u32));
        body.extend(self.u32b(data.len() as u32));
        body.extend(self.u32b(data.len() as u32));
        body.extend(data);
        self.block(2, &body)
    }
    /// Decryption Secrets Block.
    pub fn dsb(&mut self, kind: u32, data: &[u8]) -> &mut Self {
        let mut body = Vec::new();
        body.extend(self.u32b(kind));
        body.extend(self.u32b(data.len() as u32));
        body.extend(data);
        self.block(0x0a, &body)
    }
}

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// IPv4 (no link header) UDP datagram.
pub fn ipv4_udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(sport, dport);
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// IPv6 (no link header) UDP datagram.
pub fn ipv6_udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = [0u8; 16];
    s[15] = 1;
    let mut d = [0u8; 16];
    d[15] = 2;
    d[0] = 0xfd;
    let b = PacketBuilder::ipv6(s, d, 64).udp(sport, dport);
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// Ethernet + optional VLAN tags + IPv4 or IPv6 UDP.
pub fn eth_udp(vlans: &[u16], v6: bool, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let e = PacketBuilder::ethernet2(MAC_A, MAC_B);
    match (vlans, v6) {
        ([], false) => e
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
        ([], true) => e
            .ipv6([0; 16], [1; 16], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
        ([a], false) => e
            .single_vlan(VlanId::try_new(*a).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
        ([a], true) => e
            .single_vlan(VlanId::try_new(*a).unwrap())
            .ipv6([0; 16], [1; 16], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
        ([a, b, ..], false) => e
            .double_vlan(VlanId::try_new(*a).unwrap(), VlanId::try_new(*b).unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
        ([a, b, ..], true) => e
            .double_vlan(VlanId::try_new(*a).unwrap(), VlanId::try_new(*b).unwrap())
            .ipv6([0; 16], [1; 16], 64)
            .udp(sport, dport)
            .write(&mut v, payload),
    }
    .unwrap();
    v
}

/// Linux cooked v1 header (16 bytes) + IP packet.
pub fn sll(ip: &[u8], v6: bool) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
    v.extend((if v6 { 0x86ddu16 } else { 0x0800u16 }).to_be_bytes());
    v.extend(ip);
    v
}

/// Linux cooked v2 header (20 bytes) + IP packet.
pub fn sll2(ip: &[u8], v6: bool) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend((if v6 { 0x86ddu16 } else { 0x0800u16 }).to_be_bytes());
    v.extend([0, 0]); // reserved
    v.extend(3u32.to_be_bytes()); // ifindex
    v.extend(1u16.to_be_bytes()); // ARPHRD_ETHER
    v.push(0); // packet type
    v.push(6); // address length
    v.extend([2, 0, 0, 0, 0, 1, 0, 0]);
    v.extend(ip);
    v
}

/// BSD loopback header: address family in host (little-endian here) or network order.
pub fn null(ip: &[u8], family: u32, big: bool) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(if big {
        family.to_be_bytes()
    } else {
        family.to_le_bytes()
    });
    v.extend(ip);
    v
}

/// Raw ikcp segment header + payload (little endian).
pub fn kcp_segment(
    conv: u32,
    cmd: u8,
    frg: u8,
    wnd: u16,
    ts: u32,
    sn: u32,
    una: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(conv.to_le_bytes());
    v.push(cmd);
    v.push(frg);
    v.extend(wnd.to_le_bytes());
    v.extend(ts.to_le_bytes());
    v.extend(sn.to_le_bytes());
    v.extend(una.to_le_bytes());
    v.extend((payload.len() as u32).to_le_bytes());
    v.extend(payload);
    v
}
