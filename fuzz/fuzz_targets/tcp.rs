//! TCP: the header view, the frame-level lookup and the ICMP path MTU signal on every link type
//! must never panic; what validates must account for every byte (header + payload) and read its
//! options consistently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tboxscope_decode::icmp::path_mtu_signal;
use tboxscope_decode::net::{tcp_segment, LinkType};
use tboxscope_decode::tcp::{TcpOptions, TcpView, MAX_SACK_BLOCKS, MIN_HEADER_LEN};

const LINKS: [u32; 12] = [1, 113, 276, 101, 228, 229, 0, 108, 9, 50, 51, 239];

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = TcpView::new(data) {
        assert!(v.header_len() >= MIN_HEADER_LEN);
        assert_eq!(v.header_len() + v.payload().len(), data.len());
        let options = v.options();
        assert!(options.sack_blocks().len() <= MAX_SACK_BLOCKS);
        // A leading NOP changes nothing, and options led by NOP, NOP, timestamps (read at
        // once) read as the option loop reads them with one NOP less.
        if let Some(one_nop_less) = v.option_bytes().strip_prefix(&[1]) {
            assert_eq!(options, TcpOptions::parse(one_nop_less));
        }
    }
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let Some(link) = LinkType::from_linktype(LINKS[usize::from(pick) % LINKS.len()]) else {
        return;
    };
    if let Ok(seg) = tcp_segment(link, frame) {
        assert_eq!(seg.src.port(), seg.tcp.src_port());
        assert_eq!(seg.dst.port(), seg.tcp.dst_port());
        let (start, end) = (frame.as_ptr() as usize, frame.as_ptr() as usize + frame.len());
        let p = seg.tcp.payload().as_ptr() as usize;
        assert!(p >= start && p + seg.tcp.payload().len() <= end);
    }
    // A frame is a TCP segment or a path MTU signal about one, never both.
    if let Some(Ok(signal)) = path_mtu_signal(link, frame) {
        assert!(tcp_segment(link, frame).is_err(), "{signal:?}");
    }
});
