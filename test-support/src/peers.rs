//! Far ends that answer test traffic.
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::pcap::kcp_segment;

/// KCP command numbers (ikcp.c).
const PUSH: u8 = 81;
const ACK: u8 = 82;

/// A KCP far end at `addr`: answers each PUSH segment with an ACK of its conv, sn and ts (una
/// past it), until `stop` (checked every 100 ms).
///
/// # Panics
/// If the socket cannot be bound.
pub fn answer_kcp_pushes(addr: &str, stop: &AtomicBool) {
    let sock = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap_or_else(|e| panic!("read timeout: {e}"));
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if n < 24 || buf[4] != PUSH {
            continue;
        }
        let word = |at: usize| u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let (conv, ts, sn) = (word(0), word(8), word(12));
        let ack = kcp_segment(conv, ACK, 0, 128, ts, sn, sn.wrapping_add(1), &[]);
        let _ = sock.send_to(&ack, from);
    }
}
