//! Effective capabilities of this process and what each missing one disables.

/// CAP_NET_ADMIN.
pub const CAP_NET_ADMIN: u32 = 12;
/// CAP_SYS_ADMIN.
pub const CAP_SYS_ADMIN: u32 = 21;
/// CAP_PERFMON.
pub const CAP_PERFMON: u32 = 38;
/// CAP_BPF.
pub const CAP_BPF: u32 = 39;

/// The effective capability set (from `/proc/self/status` `CapEff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Bit n = capability n.
    pub effective: u64,
}

impl Capabilities {
    /// Reads this process's effective set (empty when unreadable).
    pub fn current() -> Self {
        let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Self::from_status(&text)
    }

    /// Parses a `/proc/<pid>/status` text.
    pub fn from_status(text: &str) -> Self {
        let effective = text
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        Self { effective }
    }

    /// True when capability `n` is held.
    pub fn has(&self, n: u32) -> bool {
        n < 64 && self.effective & (1u64 << n) != 0
    }

    /// Missing capabilities with what each disables.
    pub fn missing(&self) -> Vec<(&'static str, &'static str)> {
        let admin = self.has(CAP_SYS_ADMIN);
        let mut out = Vec::new();
        if !self.has(CAP_BPF) && !admin {
            out.push(("CAP_BPF", "loading eBPF programs and maps (all TCP probes)"));
        }
        if !self.has(CAP_PERFMON) && !admin {
            out.push((
                "CAP_PERFMON",
                "attaching tracepoints and reading kernel memory (all TCP probes)",
            ));
        }
        if !self.has(CAP_NET_ADMIN) {
            out.push((
                "CAP_NET_ADMIN",
                "live packet capture on eth0/eth1 and TC/sock_ops hooks",
            ));
        }
        if !admin {
            out.push((
                "CAP_SYS_ADMIN",
                "mounting tracefs when it is not mounted; sock_ops on the cgroup root",
            ));
        }
        out
    }

    /// Why eBPF tracing cannot run, with what to do instead; `None` when it can.
    pub fn ebpf_refusal(&self) -> Option<String> {
        let ok = self.has(CAP_SYS_ADMIN) || (self.has(CAP_BPF) && self.has(CAP_PERFMON));
        (!ok).then(|| {
            "the eBPF TCP probes need root (or CAP_BPF + CAP_PERFMON); run it with sudo, e.g. \
             `sudo tboxscope capture ...`, or `sudo setcap cap_bpf,cap_perfmon,cap_net_admin+ep $(which tboxscope)`"
                .to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_capeff_and_reports_missing() {
        let root = Capabilities::from_status("Name:\tx\nCapEff:\t000001ffffffffff\n");
        assert!(root.has(CAP_BPF) && root.has(CAP_SYS_ADMIN));
        assert!(root.missing().is_empty());
        assert!(root.ebpf_refusal().is_none());
        let none = Capabilities::from_status("CapEff:\t0000000000000000\n");
        assert_eq!(none.missing().len(), 4);
        assert!(none.ebpf_refusal().unwrap().contains("sudo"));
        let bpf_only = Capabilities {
            effective: (1 << CAP_BPF) | (1 << CAP_PERFMON),
        };
        assert!(bpf_only.ebpf_refusal().is_none());
    }
}
