//! Resolves what the programs need from the running kernel: struct field offsets from BTF and
//! CONFIG_HZ (to turn `icsk_rto` jiffies into ms). The programs are raw tracepoints: they take
//! the socket from the tracepoint's arguments and read everything else here.
use probe_common::SockOffsets;

use super::btf::{Btf, BtfError, FieldLocation};

/// Why the offsets could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    /// BTF lookup failed.
    #[error(transparent)]
    Btf(#[from] BtfError),
    /// A field has an unexpected size on this kernel.
    #[error("{field} is {actual} bytes on this kernel, expected {expected}")]
    Size {
        /// Field path.
        field: String,
        /// Size found.
        actual: u32,
        /// Size expected.
        expected: u32,
    },
    /// A field is not where the programs need it.
    #[error("{0}")]
    Layout(String),
}

fn sized(btf: &Btf, owner: &str, path: &[&str], size: u32) -> Result<FieldLocation, OffsetError> {
    let loc = btf.field(owner, path)?;
    if loc.size != size || loc.bit_size != 0 {
        return Err(OffsetError::Size {
            field: format!("{owner}.{}", path.join(".")),
            actual: loc.size,
            expected: size,
        });
    }
    Ok(loc)
}

/// Resolves every socket field the programs read, from the kernel's BTF.
pub fn sock_offsets(btf: &Btf) -> Result<SockOffsets, OffsetError> {
    let sk = |f: &str, size: u32| -> Result<u32, OffsetError> {
        Ok(sized(btf, "sock", &["__sk_common", f], size)?.byte_offset)
    };
    let tp = |path: &[&str], size: u32| -> Result<u32, OffsetError> {
        Ok(sized(btf, "tcp_sock", path, size)?.byte_offset)
    };
    // tcp_sock embeds inet_connection_sock embeds inet_sock embeds sock, each first; the paths
    // below still go through the real members, so no layout is assumed.
    let ca = btf.field("tcp_sock", &["inet_conn", "icsk_ca_state"])?;
    if ca.bit_size == 0 && ca.size != 1 {
        return Err(OffsetError::Size {
            field: "icsk_ca_state".into(),
            actual: ca.size,
            expected: 1,
        });
    }
    let (shift, mask) = if ca.bit_size == 0 {
        (0, 0xff)
    } else {
        (ca.bit_shift, (1u32 << ca.bit_size.min(8)) - 1)
    };
    // Segments of the skb being retransmitted: skb->cb is a tcp_skb_cb. Optional.
    let gso_segs = match (
        btf.field("sk_buff", &["cb"]),
        btf.field("tcp_skb_cb", &["tcp_gso_segs"]),
    ) {
        (Ok(cb), Ok(segs)) if segs.size == 2 => cb.byte_offset + segs.byte_offset,
        _ => u32::MAX,
    };
    // The sequence range of that skb (the retransmitted bytes). Optional.
    let skb_cb_u32 = |name: &str| match (
        btf.field("sk_buff", &["cb"]),
        btf.field("tcp_skb_cb", &[name]),
    ) {
        (Ok(cb), Ok(f)) if f.size == 4 => cb.byte_offset + f.byte_offset,
        _ => u32::MAX,
    };
    // The congestion-control algorithm's name: icsk_ca_ops->name. Optional.
    let (icsk_ca_ops, ca_ops_name) = match (
        btf.field("tcp_sock", &["inet_conn", "icsk_ca_ops"]),
        btf.field("tcp_congestion_ops", &["name"]),
    ) {
        (Ok(ops), Ok(name)) if ops.size == 8 && name.size == 16 => {
            (ops.byte_offset, name.byte_offset)
        }
        _ => (u32::MAX, u32::MAX),
    };
    let sock_in_tcp = btf
        .field("tcp_sock", &["inet_conn", "icsk_inet", "sk"])?
        .byte_offset;
    let (num, dport) = (sk("skc_num", 2)?, sk("skc_dport", 2)?);
    if num != dport + 2 {
        // tcp_probe reads both ports as one word (`skc_portpair`).
        return Err(OffsetError::Layout(format!(
            "skc_num at {num} does not follow skc_dport at {dport}"
        )));
    }
    // sk_protocol: a u16 since Linux 5.6, an 8-bit bitfield before.
    let proto = btf.field("sock", &["sk_protocol"])?;
    let (protocol, protocol_bytes) = match (proto.size, proto.bit_size, proto.bit_shift) {
        (2, 0, _) => (proto.byte_offset, 2),
        (_, 8, 0) => (proto.byte_offset, 1),
        (size, bits, shift) => {
            return Err(OffsetError::Layout(format!(
                "sock.sk_protocol is {size} bytes, {bits} bits at bit {shift}: not readable"
            )))
        }
    };
    Ok(SockOffsets {
        family: sock_in_tcp + sk("skc_family", 2)?,
        state: sock_in_tcp + sk("skc_state", 1)?,
        num: sock_in_tcp + num,
        dport: sock_in_tcp + dport,
        rcv_saddr: sock_in_tcp + sk("skc_rcv_saddr", 4)?,
        daddr: sock_in_tcp + sk("skc_daddr", 4)?,
        v6_rcv_saddr: sock_in_tcp + sk("skc_v6_rcv_saddr", 16)?,
        v6_daddr: sock_in_tcp + sk("skc_v6_daddr", 16)?,
        icsk_rto: tp(&["inet_conn", "icsk_rto"], 4)?,
        icsk_backoff: tp(&["inet_conn", "icsk_backoff"], 1)?,
        icsk_retransmits: tp(&["inet_conn", "icsk_retransmits"], 1)?,
        icsk_pending: tp(&["inet_conn", "icsk_pending"], 1)?,
        ca_state_byte: ca.byte_offset,
        ca_state_shift: shift,
        ca_state_mask: mask,
        total_retrans: tp(&["total_retrans"], 4)?,
        snd_cwnd: tp(&["snd_cwnd"], 4)?,
        snd_ssthresh: tp(&["snd_ssthresh"], 4)?,
        srtt_us: tp(&["srtt_us"], 4)?,
        packets_out: tp(&["packets_out"], 4)?,
        lost_out: tp(&["lost_out"], 4)?,
        retrans_out: tp(&["retrans_out"], 4)?,
        skb_gso_segs: gso_segs,
        skb_seq: skb_cb_u32("seq"),
        skb_end_seq: skb_cb_u32("end_seq"),
        icsk_ca_ops,
        ca_ops_name,
        protocol: sock_in_tcp + protocol,
        protocol_bytes,
        _pad: 0,
    })
}

/// The kernel's CONFIG_HZ, from `/boot/config-$(uname -r)` or `/proc/config.gz` (via `gzip -dc`).
pub fn kernel_hz() -> Option<u32> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let boot = format!("/boot/config-{}", release.trim());
    let text = std::fs::read_to_string(boot).ok().or_else(|| {
        let out = std::process::Command::new("gzip")
            .args(["-dc", "/proc/config.gz"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })?;
    hz_from_config(&text)
}

/// Finds `CONFIG_HZ=N` in a kernel config.
pub fn hz_from_config(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|hz| *hz > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hz_is_parsed() {
        assert_eq!(
            hz_from_config("# x\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"),
            Some(250)
        );
        assert_eq!(hz_from_config("CONFIG_HZ=0\n"), None);
        assert_eq!(hz_from_config(""), None);
    }

    #[test]
    fn running_kernel_offsets_resolve() {
        let Ok(raw) = Btf::from_sys() else { return };
        let btf = Btf::parse(&raw).unwrap();
        let o = sock_offsets(&btf).unwrap();
        assert!(o.icsk_rto > o.state);
        assert_eq!(o.ca_state_mask, 0x1f);
        assert_ne!(o.skb_gso_segs, u32::MAX);
        assert_ne!(o.skb_seq, u32::MAX);
        assert_eq!(o.skb_end_seq, o.skb_seq + 4);
        assert!(kernel_hz().is_some());
    }
}
