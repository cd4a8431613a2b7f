//! The offline reader against real fixtures (cross-checked with tshark), hand-built files of
//! every format variant and link type, and truncation at every length.
#![expect(clippy::unwrap_used)]

use std::io::Cursor;
use std::path::{Path, PathBuf};

use probe_user::decode::net::{LinkType, NetParser, NetReject};
use probe_user::source::pcap::{
    CaptureFile, CaptureReader, FileError, FileReading, Format, FormatIssue, SECRETS_TLS_KEY_LOG,
};
use tboxscope_test_support::fixture;
use tboxscope_test_support::pcap::*;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// (frame, ts_ns, caplen, orig_len, interface) of every packet.
type Row = (u64, u64, usize, u32, usize);

fn rows<R: std::io::Read>(mut r: CaptureReader<R>) -> Result<Vec<Row>, FileError> {
    let mut out = Vec::new();
    while let Some(p) = r.next_packet()? {
        out.push((p.frame, p.ts_ns, p.data.len(), p.orig_len, p.interface));
    }
    Ok(out)
}

fn read_mem(bytes: &[u8]) -> Result<Vec<Row>, FileError> {
    rows(CaptureReader::new(Cursor::new(bytes), "mem.pcap", "mem")?)
}

/// Parses a checked-in `tshark -T fields -e frame.number -e frame.time_epoch -e frame.cap_len
/// -e frame.len -e frame.interface_id ...` output.
fn tshark_rows(tsv: &str) -> Vec<(u64, u64, usize, u32, u32)> {
    tsv.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let (s, ns) = f[1].split_once('.').unwrap();
            let ts = s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
            (
                f[0].parse().unwrap(),
                ts,
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap_or(0),
            )
        })
        .collect()
}

fn tshark_installed() -> bool {
    std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn fixtures_match_tshark_frame_by_frame() {
    for name in [
        "ndpi-kcp.pcap",
        "chrome-cloudflare-quic-with-secrets.pcapng",
        "quic-tls-handshake.pcapng",
    ] {
        let expected_text = std::fs::read_to_string(data(&format!("{name}.frames.tsv"))).unwrap();
        if tshark_installed() {
            let out = std::process::Command::new("tshark")
                .arg("-r")
                .arg(fixture(name))
                .args(["-T", "fields"])
                .args([
                    "-e",
                    "frame.number",
                    "-e",
                    "frame.time_epoch",
                    "-e",
                    "frame.cap_len",
                ])
                .args([
                    "-e",
                    "frame.len",
                    "-e",
                    "frame.interface_id",
                    "-e",
                    "udp.srcport",
                ])
                .args(["-e", "udp.dstport", "-e", "udp.length"])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                expected_text,
                "{name}"
            );
        }
        let expected = tshark_rows(&expected_text);
        let mut reader = CaptureFile::open(&fixture(name)).unwrap();
        let mut got = Vec::new();
        while let Some(p) = reader.next_packet().unwrap() {
            let row = (p.frame, p.ts_ns, p.data.len(), p.orig_len, p.interface);
            got.push((row.0, row.1, row.2, row.3, reader.interfaces()[row.4].id));
        }
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn embedded_tls_secrets_are_returned() {
    let mut reader =
        CaptureFile::open(&fixture("chrome-cloudflare-quic-with-secrets.pcapng")).unwrap();
    // The secrets block precedes the first packet, which says so; later packets do not.
    assert!(reader.next_packet().unwrap().unwrap().secrets_changed);
    while let Some(p) = reader.next_packet().unwrap() {
        assert!(!p.secrets_changed);
    }
    let secrets = reader.secrets();
    assert!(!secrets.is_empty());
    assert!(secrets.iter().all(|s| s.kind == SECRETS_TLS_KEY_LOG));
    let text = String::from_utf8(secrets[0].data.clone()).unwrap();
    assert!(text.contains("CLIENT_TRAFFIC_SECRET_0"), "{text}");
}

#[test]
fn pcap_pcapng_and_nanosecond_pcap_of_the_same_packets_agree() {
    let classic = rows(CaptureFile::open(&fixture("ndpi-kcp.pcap")).unwrap()).unwrap();
    let ng_file = CaptureFile::open(&data("ndpi-kcp.pcapng")).unwrap();
    assert_eq!(ng_file.format(), Format::Pcapng);
    let ng = rows(ng_file).unwrap();
    let ns_file = CaptureFile::open(&data("ndpi-kcp-ns.pcap")).unwrap();
    assert_eq!(ns_file.format(), Format::PcapNano);
    let ns = rows(ns_file).unwrap();
    assert_eq!(classic.len(), 50);
    assert_eq!(classic, ng);
    assert_eq!(classic, ns);
}

#[test]
fn both_byte_orders_and_resolutions_of_classic_pcap() {
    let pkts = vec![
        (1_700_000_000_123_456_789u64, 60, ipv4_udp(1, 2, b"hello")),
        (1_700_000_001_000_000_001u64, 900, ipv4_udp(3, 4, b"world")),
    ];
    for nano in [false, true] {
        for big in [false, true] {
            let bytes = pcap(101, nano, big, &pkts);
            let mut r = CaptureReader::new(Cursor::new(&bytes), "x", "x").unwrap();
            assert_eq!(r.interfaces()[0].link, Some(LinkType::RawIp));
            let p = r.next_packet().unwrap().unwrap();
            let want = if nano {
                1_700_000_000_123_456_789
            } else {
                1_700_000_000_123_456_000
            };
            assert_eq!((p.frame, p.ts_ns, p.orig_len), (1, want, 60));
            assert_eq!(p.data, &pkts[0].2[..]);
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(p.frame, 2);
            assert_eq!(p.data, &pkts[1].2[..]);
            assert!(r.next_packet().unwrap().is_none());
        }
    }
}

/// Each link type carries UDP to the same ports and payload.
#[test]
fn every_link_type_yields_the_udp_datagram() {
    let payload = b"tbox control message";
    let v4 = ipv4_udp(4000, 5000, payload);
    let v6 = ipv6_udp(4000, 5000, payload);
    let cases: Vec<(u32, Vec<u8>)> = vec![
        (1, eth_udp(&[], false, 4000, 5000, payload)),
        (1, eth_udp(&[], true, 4000, 5000, payload)),
        (1, eth_udp(&[100], false, 4000, 5000, payload)),
        (1, eth_udp(&[100], true, 4000, 5000, payload)),
        (1, eth_udp(&[100, 200], false, 4000, 5000, payload)),
        (1, eth_udp(&[100, 200], true, 4000, 5000, payload)),
        (113, sll(&v4, false)),
        (113, sll(&v6, true)),
        (276, sll2(&v4, false)),
        (276, sll2(&v6, true)),
        (101, v4.clone()),
        (101, v6.clone()),
        (12, v4.clone()),
        (14, v6.clone()),
        (228, v4.clone()),
        (229, v6.clone()),
        (0, null(&v4, 2, false)),
        (0, null(&v6, 30, false)),
        (0, null(&v6, 24, true)),
        (108, null(&v4, 2, true)),
    ];
    for (i, (linktype, frame)) in cases.iter().enumerate() {
        // Through a real file of that link type, in both formats.
        let classic = pcap(
            *linktype,
            false,
            false,
            &[(1, frame.len() as u32, frame.clone())],
        );
        let mut ng = Ng::new(false);
        ng.idb(*linktype as u16, 0, None, None)
            .epb(0, 1, frame.len() as u32, frame);
        for bytes in [classic, ng.bytes] {
            let mut r = CaptureReader::new(Cursor::new(&bytes), "case", "case").unwrap();
            let p = r.next_packet().unwrap().unwrap();
            let (iface, bytes) = (p.interface, p.data.to_vec());
            let link = r.interfaces()[iface].link;
            let link = link.unwrap_or_else(|| panic!("case {i}: linktype {linktype} unsupported"));
            let mut net = NetParser::new();
            let udp = net
                .udp(link, &bytes, 0)
                .unwrap_or_else(|e| panic!("case {i}: {e:?}"));
            assert_eq!((udp.src.port(), udp.dst.port()), (4000, 5000), "case {i}");
            assert_eq!(udp.payload, payload, "case {i}");
        }
    }
}

#[test]
fn non_udp_and_broken_frames_are_rejected_by_reason() {
    let mut net = NetParser::new();
    // ARP over Ethernet.
    let mut arp = vec![0xff; 6];
    arp.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend([0u8; 28]);
    assert_eq!(
        net.udp(LinkType::Ethernet, &arp, 0).unwrap_err(),
        NetReject::NotIp
    );
    // TCP.
    let mut tcp = Vec::new();
    etherparse::PacketBuilder::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 5)
        .tcp(1, 2, 3, 4)
        .write(&mut tcp, b"x")
        .unwrap();
    assert_eq!(
        net.udp(LinkType::RawIp, &tcp, 0).unwrap_err(),
        NetReject::NotUdp
    );
    // Every truncation of an Ethernet/VLAN/IPv6/UDP frame: rejected as truncated, never a panic.
    let frame = eth_udp(&[7, 8], true, 1, 2, b"abc");
    let udp_end = frame.len() - 3;
    for len in 0..udp_end {
        let r = net.udp(LinkType::Ethernet, &frame[..len], 0);
        assert_eq!(r.unwrap_err(), NetReject::Truncated, "len {len}");
    }
    // Loopback with an unknown family.
    assert_eq!(
        net.udp(LinkType::Null, &null(&ipv4_udp(1, 2, b""), 17, false), 0)
            .unwrap_err(),
        NetReject::NotIp
    );
    assert_eq!(
        net.udp(LinkType::Ipv6, &ipv4_udp(1, 2, b""), 0)
            .unwrap_err(),
        NetReject::Malformed
    );
}

#[test]
fn ipv4_fragments_are_counted_and_reassembled() {
    // A 3000-byte UDP payload in three IPv4 fragments (offsets in 8-byte units).
    let payload: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let mut udp = Vec::new();
    udp.extend(4000u16.to_be_bytes());
    udp.extend(5000u16.to_be_bytes());
    udp.extend(((payload.len() + 8) as u16).to_be_bytes());
    udp.extend([0, 0]);
    udp.extend(&payload);
    let chunks: Vec<&[u8]> = udp.chunks(1480).collect();
    let mut net = NetParser::new();
    let mut done = None;
    for (i, chunk) in chunks.iter().enumerate() {
        let more = i + 1 < chunks.len();
        let offset = (i * 1480 / 8) as u16;
        let mut ip = vec![0x45, 0];
        ip.extend(((20 + chunk.len()) as u16).to_be_bytes());
        ip.extend(0x1234u16.to_be_bytes());
        ip.extend((offset | if more { 0x2000 } else { 0 }).to_be_bytes());
        ip.extend([64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        ip.extend(*chunk);
        match net.udp(LinkType::RawIp, &ip, 1) {
            Err(NetReject::Fragment) => assert!(more),
            Ok(d) => {
                assert!(!more && d.reassembled);
                done = Some((d.src.port(), d.dst.port(), d.payload.to_vec()));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(done, Some((4000, 5000, payload)));
    let stats = net.fragment_stats();
    assert_eq!((stats.fragments, stats.reassembled), (3, 1));
}

#[test]
fn pcapng_interfaces_sections_resolutions_and_block_kinds() {
    let secret = b"CLIENT_RANDOM 00 11\n";
    for big in [false, true] {
        let f = |p: u16| ipv4_udp(p, 9, b"x");
        let mut ng = Ng::new(big);
        ng.idb(101, 0, Some("wwan0"), Some(9)) // ns
            .idb(101, 0, None, Some(0x80 | 20)) // 2^-20 s
            .dsb(SECRETS_TLS_KEY_LOG, secret)
            .epb(0, 1_700_000_000_000_000_007, 40, &f(1))
            .epb(1, 5 << 20, 40, &f(2))
            .spb(&f(3))
            .opb(1, 1 << 20, &f(4))
            .block(0x0bad, b"custom block skipped")
            .shb()
            .idb(101, 0, Some("wwan1"), None) // µs (default)
            .epb(0, 42, 40, &f(5));
        let mut r = CaptureReader::new(Cursor::new(&ng.bytes), "ng", "trip").unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            got.push((p.frame, p.interface, p.ts_ns, p.data[21]));
        }
        assert_eq!(
            got,
            vec![
                (1, 0, 1_700_000_000_000_000_007, 1),
                (2, 1, 5_000_000_000, 2),
                // SPB: interface 0, no time of its own (the previous packet's).
                (3, 0, 5_000_000_000, 3),
                (4, 1, 1_000_000_000, 4),
                (5, 2, 42_000, 5),
            ],
            "big endian {big}"
        );
        let labels: Vec<(u32, u32, &str)> = r
            .interfaces()
            .iter()
            .map(|i| (i.section, i.id, i.label.as_str()))
            .collect();
        assert_eq!(
            labels,
            vec![(0, 0, "wwan0"), (0, 1, "trip#1"), (1, 0, "wwan1")]
        );
        assert_eq!(r.secrets().len(), 1);
        assert_eq!(r.secrets()[0].data, secret);
    }
}

#[test]
fn unknown_interface_and_bad_lengths_are_named_errors() {
    let mut ng = Ng::new(false);
    ng.idb(1, 0, None, None).epb(3, 0, 10, b"0123456789");
    let err = read_mem(&ng.bytes).unwrap_err();
    assert!(matches!(
        err,
        FileError::Format {
            why: FormatIssue::UnknownInterface(3),
            ..
        }
    ));
    let msg = err.to_string();
    assert!(msg.starts_with("mem.pcap: offset 48: "), "{msg}");

    let mut bytes = Ng::new(false).bytes;
    bytes.extend(6u32.to_le_bytes());
    bytes.extend(13u32.to_le_bytes());
    bytes.extend([0; 8]);
    let err = read_mem(&bytes).unwrap_err();
    assert!(matches!(
        err,
        FileError::Format {
            why: FormatIssue::BadBlockLength { len: 13, .. },
            offset: 28,
            ..
        }
    ));
    let err = read_mem(b"GIF89a....").unwrap_err().to_string();
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    let err = CaptureFile::open(Path::new("/nonexistent/x.pcap"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("/nonexistent/x.pcap: cannot open"), "{err}");
}

/// Cuts `bytes` at every length: the reader returns the packets before the cut, then either ends
/// cleanly (cut on a record boundary) or names the file, the offset and the truncation.
fn check_every_truncation(bytes: &[u8], full: &[Row]) {
    for len in 0..bytes.len() {
        let cut = &bytes[..len];
        let reader = match CaptureReader::new(Cursor::new(cut), "cut.pcapng", "cut") {
            Ok(r) => r,
            Err(e) => {
                assert!(e.to_string().starts_with("cut.pcapng: offset 0: "), "{e}");
                continue;
            }
        };
        let mut r = reader;
        let mut n = 0;
        loop {
            match r.next_packet() {
                Ok(Some(p)) => {
                    let row = (p.frame, p.ts_ns, p.data.len(), p.orig_len, p.interface);
                    assert_eq!(row, full[n], "len {len}");
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.starts_with("cut.pcapng: offset "), "{msg}");
                    assert!(
                        matches!(
                            e,
                            FileError::Format {
                                why: FormatIssue::Truncated { .. },
                                ..
                            }
                        ),
                        "len {len}: {msg}"
                    );
                    break;
                }
            }
        }
        assert!(n <= full.len());
    }
}

#[test]
fn truncation_at_every_length_never_panics_and_names_the_cut() {
    for path in [
        fixture("ndpi-kcp.pcap"),
        fixture("chrome-cloudflare-quic-with-secrets.pcapng"),
        data("ndpi-kcp-ns.pcap"),
    ] {
        let bytes = std::fs::read(&path).unwrap();
        let full = read_mem(&bytes).unwrap();
        check_every_truncation(&bytes, &full);
    }
}

#[test]
fn arbitrary_bytes_after_a_valid_header_never_panic() {
    // Deterministic pseudo-random garbage behind each kind of file header.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..2000 {
        let mut bytes = match round % 3 {
            0 => pcap(1, false, false, &[]),
            1 => pcap(1, true, true, &[]),
            _ => Ng::new(round % 2 == 0).bytes,
        };
        let n = (next() % 200) as usize;
        for _ in 0..n {
            bytes.push(next() as u8);
        }
        if let Ok(mut r) = CaptureReader::new(Cursor::new(&bytes), "fuzz", "fuzz") {
            while let Ok(Some(_)) = r.next_packet() {}
        }
    }
}

/// (frame, offset, ts_ns, data) of a packet.
type FullRow = (u64, u64, u64, Vec<u8>);

/// Every packet, and the error that ended the file (empty at a clean end).
fn full_rows<R: std::io::Read>(mut r: CaptureReader<R>) -> (Vec<FullRow>, String) {
    let mut out = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => out.push((p.frame, p.offset, p.ts_ns, p.data.to_vec())),
            Ok(None) => return (out, String::new()),
            Err(e) => return (out, e.to_string()),
        }
    }
}

#[test]
fn files_read_ahead_in_chunks_give_the_same_packets_offsets_and_errors_as_a_stream() {
    use probe_user::source::pcap::readahead::{CHUNK, HEADROOM};
    // Records of many sizes, so that they straddle chunk boundaries at every phase, plus
    // records longer than the headroom (and than a chunk) that must be assembled.
    let mut packets = Vec::new();
    let mut size = 1usize;
    let mut total = 0;
    while total < 3 * CHUNK {
        let len = if packets.len() % 50 == 7 {
            HEADROOM + 3 * (packets.len() % 5) * CHUNK / 4 + 1
        } else {
            size
        };
        let data: Vec<u8> = (0..len).map(|i| (i + packets.len()) as u8).collect();
        packets.push((packets.len() as u64 * 1_000, len as u32, data));
        total += len + 16;
        size = size * 7 % 1_499 + 1;
    }
    let bytes = pcap(1, false, false, &packets);
    let dir = tempfile::tempdir().unwrap();
    let expected = full_rows(CaptureReader::new(Cursor::new(&bytes), "x", "x").unwrap());
    assert_eq!(expected.0.len(), packets.len());
    // Whole, and cut at and around chunk boundaries and inside the big records.
    let mut cuts = vec![bytes.len() as i64];
    for k in 1..4 {
        for d in [-17i64, -1, 0, 1, 16, 40] {
            cuts.push((k * CHUNK) as i64 + d);
        }
    }
    cuts.extend([HEADROOM as i64 * 3 + 5, 123_457]);
    for cut in cuts {
        let cut = (cut.max(0) as usize).min(bytes.len());
        let path = dir.path().join("x.pcap");
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let stream = full_rows(CaptureReader::new(Cursor::new(&bytes[..cut]), "x", "x").unwrap());
        for reading in [FileReading::ReadAhead, FileReading::SameThread] {
            let file = CaptureFile::open_with(&path, reading).unwrap();
            assert_eq!(file.reading(), reading);
            let (rows, err) = full_rows(file);
            assert_eq!(rows, stream.0, "cut at {cut}, {reading:?}");
            // Same error and offset; only the name differs.
            assert_eq!(
                err.replace(&path.display().to_string(), "x"),
                stream.1,
                "cut at {cut}, {reading:?}"
            );
        }
    }
}
