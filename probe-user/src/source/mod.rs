//! Where observations come from: eBPF probes, libpcap (live or files), saved JSON.
pub mod ebpf;
pub mod pcap;
