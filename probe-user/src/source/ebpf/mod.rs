//! The eBPF TCP source: resolve offsets for the running kernel, load the programs, attach each
//! hook on its own (a refused hook degrades only its feature), and hand out the ring buffer.
//!
//! Dropping [`TcpProbes`] detaches every program (aya owns the links), which also happens while
//! unwinding from a panic.
pub mod btf;
pub mod event;
pub mod filter;
pub mod offsets;
pub mod privileges;
pub mod proginfo;
pub mod tracefs;

use std::os::fd::AsFd;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfLoader};
use probe_common::{ProbeConfig, DROP_READ_FAILED, DROP_RING_FULL};

pub use event::{decode, DecodeError, DecodeStats, RetransmitKind, TcpEventKind, TcpObservation};
pub use filter::{FilterError, TcpFilter};

/// The eBPF object built by `build.rs`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe-ebpf"));

/// Environment variable naming hooks to refuse (comma-separated), to test degraded modes;
/// the same as `--deny-hook NAME`.
pub const DENY_ENV: &str = "TBOXSCOPE_DENY_HOOK";

/// One kernel hook and the feature it feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookSpec {
    /// Program name in the object (also the `--deny-hook` name).
    pub name: &'static str,
    /// Tracepoint category.
    pub category: &'static str,
    /// What users lose without it.
    pub feature: &'static str,
}

/// Every hook, in attach order.
pub const HOOKS: [HookSpec; 4] = [
    HookSpec {
        name: "tcp_retransmit_skb",
        category: "tcp",
        feature: "retransmissions and RTO expiries/backoff",
    },
    HookSpec {
        name: "tcp_probe",
        category: "tcp",
        feature: "cwnd/ssthresh/srtt samples",
    },
    HookSpec {
        name: "tcp_cong_state_set",
        category: "tcp",
        feature: "congestion-state changes and end of backoff",
    },
    HookSpec {
        name: "inet_sock_set_state",
        category: "sock",
        feature: "connection lifecycle (bounded connection table)",
    },
];

/// What happened to one hook.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum HookState {
    /// Loaded and attached.
    Attached,
    /// Refused on purpose (`--deny-hook` / `TBOXSCOPE_DENY_HOOK`).
    Denied(String),
    /// The kernel does not have it.
    Unavailable(String),
    /// Loading or attaching failed.
    Failed(String),
}

/// A hook and its state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookStatus {
    /// Hook name.
    pub name: &'static str,
    /// The program serving it (the hook name, or a variant for this kernel's tracepoint).
    #[serde(skip)]
    pub program: &'static str,
    /// `category:name`.
    pub tracepoint: String,
    /// Feature it feeds.
    pub feature: &'static str,
    /// Outcome.
    #[serde(flatten)]
    pub state: HookState,
}

/// How to load the probes.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Connections to report.
    pub filter: TcpFilter,
    /// Minimum spacing of unchanged cwnd samples per socket.
    pub cwnd_interval_ns: u64,
    /// Hooks to refuse (names from [`HOOKS`]); `TBOXSCOPE_DENY_HOOK` adds to these.
    pub deny: Vec<String>,
    /// Benchmarks only: also attach [`probe_common::LOAD_PROGRAM`], so that every `getppid()`
    /// of this process (tgid) pushes one synthetic event through the ring buffer.
    pub load_generator: Option<u32>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            filter: TcpFilter::default(),
            cwnd_interval_ns: 100_000_000,
            deny: Vec::new(),
            load_generator: None,
        }
    }
}

/// Why the probes could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Missing privileges.
    #[error("{0}")]
    Privileges(String),
    /// BTF missing or unusable.
    #[error("kernel BTF (/sys/kernel/btf/vmlinux): {0}")]
    Btf(String),
    /// Offsets could not be resolved.
    #[error("resolving kernel offsets: {0}")]
    Offsets(offsets::OffsetError),
    /// tracefs unusable.
    #[error(transparent)]
    Tracefs(#[from] tracefs::TracefsError),
    /// The object could not be loaded (built with AYA_BUILD_SKIP, verifier, ...).
    #[error("loading the eBPF object: {0}")]
    Load(String),
    /// A map the programs need is missing or of the wrong type.
    #[error("eBPF map {0}: {1}")]
    Map(&'static str, String),
    /// `--deny-hook` names no hook.
    #[error("unknown hook {0:?} (known: tcp_retransmit_skb, tcp_probe, tcp_cong_state_set, inet_sock_set_state)")]
    UnknownHook(String),
    /// Nothing could be attached.
    #[error("no TCP hook could be attached: {0}")]
    NothingAttached(String),
}

// Its message says the inner error; `source()` is left empty so that a printed chain names it
// once.
impl From<offsets::OffsetError> for ProbeError {
    fn from(e: offsets::OffsetError) -> Self {
        ProbeError::Offsets(e)
    }
}

/// Loaded, attached TCP probes. Drop to detach.
pub struct TcpProbes {
    ebpf: Ebpf,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    hooks: Vec<HookStatus>,
    hz: Option<u32>,
    drops: PerCpuArray<MapData, u64>,
}

/// Kernel-side drop counters (summed over CPUs, since load).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelDrops {
    /// Ring buffer full: events lost.
    pub ring_full: u64,
    /// A kernel read failed: events lost.
    pub read_failed: u64,
    /// Hook runs the kernel skipped (absent from recordings made before it was counted).
    #[serde(default)]
    pub skipped_by_kernel: SkippedByKernel,
}

impl KernelDrops {
    /// Events lost in the kernel, for whatever reason (ring buffer full, failed reads); the
    /// runs the kernel skipped are counted apart, in [`KernelDrops::skipped_by_kernel`].
    pub fn total(&self) -> u64 {
        self.ring_full.saturating_add(self.read_failed)
    }
}

/// Per hook, how often the kernel did not run it (the program's `recursion_misses`): the same
/// program was already running on that CPU (an interrupt landed on it). The kernel still did what
/// the hook would have reported (a skipped retransmission still went on the wire); any event
/// of that run is missing, whatever socket it was for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SkippedByKernel {
    /// `tcp:tcp_retransmit_skb`: retransmissions and RTO expiries not reported.
    pub retransmit: u64,
    /// `tcp:tcp_probe`: cwnd samples not taken.
    pub cwnd: u64,
    /// `tcp:tcp_cong_state_set`: congestion-state changes not reported.
    pub cong_state: u64,
    /// `sock:inet_sock_set_state`: connection state changes not reported.
    pub state: u64,
    /// Attached hooks whose count could not be read at the last reading (kernels before 5.12
    /// do not count): their figures above stay 0 and say nothing.
    pub unread_hooks: u64,
}

impl SkippedByKernel {
    /// Runs skipped over all hooks.
    pub fn total(&self) -> u64 {
        self.retransmit
            .saturating_add(self.cwnd)
            .saturating_add(self.cong_state)
            .saturating_add(self.state)
    }

    /// The counter of hook `name` (a [`HOOKS`] name).
    fn slot(&mut self, name: &str) -> Option<&mut u64> {
        match name {
            "tcp_retransmit_skb" => Some(&mut self.retransmit),
            "tcp_probe" => Some(&mut self.cwnd),
            "tcp_cong_state_set" => Some(&mut self.cong_state),
            "inet_sock_set_state" => Some(&mut self.state),
            _ => None,
        }
    }
}

/// Names from `TBOXSCOPE_DENY_HOOK` plus `extra`, validated.
pub fn denied_hooks(extra: &[String]) -> Result<Vec<String>, ProbeError> {
    let mut all: Vec<String> = extra.to_vec();
    if let Ok(v) = std::env::var(DENY_ENV) {
        all.extend(
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
    }
    for d in &all {
        if !HOOKS.iter().any(|h| h.name == d) {
            return Err(ProbeError::UnknownHook(d.clone()));
        }
    }
    Ok(all)
}

/// The program that serves `hook` on this kernel (or why none can): the tracepoint must exist,
/// and `tcp_retransmit_skb` has two programs, for tracepoints with and without `err`.
fn hook_program(tfs: &tracefs::Tracefs, hook: &HookSpec) -> Result<&'static str, String> {
    if !tfs.has(hook.category, hook.name) {
        return Err(format!(
            "tracepoint {}:{} not in this kernel",
            hook.category, hook.name
        ));
    }
    if hook.name != "tcp_retransmit_skb" {
        return Ok(hook.name);
    }
    let f = tfs
        .format(hook.category, hook.name)
        .map_err(|e| e.to_string())?;
    Ok(if f.offset_of("err", 4).is_ok() {
        "tcp_retransmit_skb"
    } else {
        "tcp_retransmit_skb_sent"
    })
}

impl TcpProbes {
    /// Resolves offsets, loads and attaches. Fails only when nothing can run.
    pub fn load(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        let caps = privileges::Capabilities::current();
        if let Some(msg) = caps.ebpf_refusal() {
            return Err(ProbeError::Privileges(msg));
        }
        let deny = denied_hooks(&opts.deny)?;
        let raw = btf::Btf::from_sys().map_err(|e| ProbeError::Btf(e.to_string()))?;
        let btf = btf::Btf::parse(&raw).map_err(|e| ProbeError::Btf(e.to_string()))?;
        let sock = offsets::sock_offsets(&btf)?;
        let tfs = tracefs::Tracefs::find_or_mount()?;
        let mut pre: Vec<Result<&'static str, HookState>> = Vec::new();
        for hook in &HOOKS {
            pre.push(if deny.iter().any(|d| d == hook.name) {
                Err(HookState::Denied(format!(
                    "refused on request (--deny-hook {0} / {DENY_ENV}={0})",
                    hook.name
                )))
            } else {
                hook_program(&tfs, hook).map_err(HookState::Unavailable)
            });
        }
        let config = ProbeConfig {
            sock,
            cwnd_interval_ns: opts.cwnd_interval_ns,
            filter_ports: u8::from(!opts.filter.ports.is_empty()),
            filter_addrs: u8::from(!opts.filter.hosts.is_empty()),
            _pad: [0; 2],
            load_tgid: opts.load_generator.unwrap_or(0),
        };
        if OBJECT.is_empty() {
            return Err(ProbeError::Load(
                "the eBPF object was not built (AYA_BUILD_SKIP set at build time)".into(),
            ));
        }
        let mut ebpf = EbpfLoader::new()
            .override_global(probe_common::GLOBAL_CONFIG, &config, true)
            .load(OBJECT)
            .map_err(|e| ProbeError::Load(format!("{e:#}")))?;
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                log::warn!("kernel-side diagnostics (aya-log) unavailable: {e}");
                None
            }
        };
        {
            let map = ebpf
                .map_mut(probe_common::MAP_FILTER_PORTS)
                .ok_or(ProbeError::Map(
                    probe_common::MAP_FILTER_PORTS,
                    "missing".into(),
                ))?;
            let mut ports: BpfHashMap<_, u16, u8> = BpfHashMap::try_from(map)
                .map_err(|e| ProbeError::Map(probe_common::MAP_FILTER_PORTS, e.to_string()))?;
            for p in &opts.filter.ports {
                ports
                    .insert(p, 1, 0)
                    .map_err(|e| ProbeError::Map(probe_common::MAP_FILTER_PORTS, e.to_string()))?;
            }
        }
        {
            let map = ebpf
                .map_mut(probe_common::MAP_FILTER_ADDRS)
                .ok_or(ProbeError::Map(
                    probe_common::MAP_FILTER_ADDRS,
                    "missing".into(),
                ))?;
            let mut addrs: BpfHashMap<_, [u8; 16], u8> = BpfHashMap::try_from(map)
                .map_err(|e| ProbeError::Map(probe_common::MAP_FILTER_ADDRS, e.to_string()))?;
            for k in opts.filter.host_keys() {
                addrs
                    .insert(k, 1, 0)
                    .map_err(|e| ProbeError::Map(probe_common::MAP_FILTER_ADDRS, e.to_string()))?;
            }
        }
        let mut hooks = Vec::new();
        for (hook, pre) in HOOKS.iter().zip(pre) {
            let program = *pre.as_ref().unwrap_or(&hook.name);
            let state = match pre {
                Err(s) => s,
                Ok(program) => match attach(&mut ebpf, program, hook.name) {
                    Ok(()) => HookState::Attached,
                    Err(e) => HookState::Failed(e),
                },
            };
            if state != HookState::Attached {
                log::warn!(
                    "hook {} not attached ({state:?}): no {}",
                    hook.name,
                    hook.feature
                );
            }
            hooks.push(HookStatus {
                name: hook.name,
                program,
                tracepoint: format!("{}:{}", hook.category, hook.name),
                feature: hook.feature,
                state,
            });
        }
        if opts.load_generator.is_some() {
            let load = HookSpec {
                name: probe_common::LOAD_PROGRAM,
                category: probe_common::LOAD_CATEGORY,
                feature: "benchmark load",
            };
            let load_tp = probe_common::LOAD_TRACEPOINT;
            attach_load_generator(&mut ebpf, &load, load_tp).map_err(|e| {
                ProbeError::Load(format!("load generator on syscalls:{load_tp}: {e}"))
            })?;
        }
        if !hooks.iter().any(|h| h.state == HookState::Attached) {
            let why: Vec<String> = hooks
                .iter()
                .map(|h| format!("{}: {:?}", h.name, h.state))
                .collect();
            return Err(ProbeError::NothingAttached(why.join("; ")));
        }
        let drops_map = ebpf
            .take_map(probe_common::MAP_DROPS)
            .ok_or(ProbeError::Map(probe_common::MAP_DROPS, "missing".into()))?;
        let drops = PerCpuArray::try_from(drops_map)
            .map_err(|e| ProbeError::Map(probe_common::MAP_DROPS, e.to_string()))?;
        let hz = offsets::kernel_hz();
        if hz.is_none() {
            log::warn!(
                "CONFIG_HZ unknown (no /boot/config-*, no /proc/config.gz): rto_ms left out"
            );
        }
        let probes = Self {
            ebpf,
            logger,
            hooks,
            hz,
            drops,
        };
        for (name, r) in probes.recursion_misses() {
            if let Err(e) = r {
                log::warn!("hook {name}: runs the kernel skips are not counted: {e}");
            }
        }
        Ok(probes)
    }

    /// Each hook's outcome.
    pub fn hooks(&self) -> &[HookStatus] {
        &self.hooks
    }

    /// The kernel's CONFIG_HZ, when known.
    pub fn hz(&self) -> Option<u32> {
        self.hz
    }

    /// Takes the event ring buffer (once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        let map = self
            .ebpf
            .take_map(probe_common::MAP_EVENTS)
            .ok_or(ProbeError::Map(
                probe_common::MAP_EVENTS,
                "already taken".into(),
            ))?;
        RingBuf::try_from(map).map_err(|e| ProbeError::Map(probe_common::MAP_EVENTS, e.to_string()))
    }

    /// Takes the aya-log reader, to be polled by the caller (keep it alive while loaded).
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<&'static dyn log::Log>> {
        self.logger.take()
    }

    /// Current drop counters summed over CPUs, and each attached hook's runs the kernel
    /// skipped. Each call makes two map lookups and a program-info call per hook: call it
    /// about once a second, not per event.
    pub fn drops(&self) -> KernelDrops {
        let sum = |i: u32| -> u64 {
            self.drops
                .get(&i, 0)
                .map_or(0, |v| v.iter().copied().fold(0u64, u64::saturating_add))
        };
        KernelDrops {
            ring_full: sum(DROP_RING_FULL),
            read_failed: sum(DROP_READ_FAILED),
            skipped_by_kernel: self.skipped_by_kernel(),
        }
    }

    /// Each attached hook's `recursion_misses`; a hook whose count cannot be read is counted
    /// in `unread_hooks`.
    fn skipped_by_kernel(&self) -> SkippedByKernel {
        let mut out = SkippedByKernel::default();
        for (name, r) in self.recursion_misses() {
            match r {
                Ok(n) => {
                    if let Some(slot) = out.slot(name) {
                        *slot = n;
                    }
                }
                Err(_) => out.unread_hooks += 1,
            }
        }
        out
    }

    /// `recursion_misses` of each attached hook's program, by hook name.
    fn recursion_misses(
        &self,
    ) -> impl Iterator<Item = (&'static str, Result<u64, proginfo::ProgInfoError>)> + '_ {
        self.hooks
            .iter()
            .filter(|h| h.state == HookState::Attached)
            .map(|h| {
                let r = self
                    .ebpf
                    .program(h.program)
                    .ok_or_else(|| proginfo::ProgInfoError::Program("not in the object".into()))
                    .and_then(|p| {
                        p.fd()
                            .map_err(|e| proginfo::ProgInfoError::Program(e.to_string()))
                    })
                    .and_then(|fd| proginfo::recursion_misses(fd.as_fd()));
                (h.name, r)
            })
    }

    /// Kernel program ids of the attached hooks (for `bpftool prog show id N`).
    pub fn program_ids(&self) -> Vec<(String, u32)> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| p.info().ok().map(|i| (name.to_owned(), i.id())))
            .collect()
    }
}

/// Loads `program` and attaches it to the raw tracepoint `tracepoint`.
fn attach(ebpf: &mut Ebpf, program: &str, tracepoint: &str) -> Result<(), String> {
    let prog: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| format!("program {program} missing from the object"))?
        .try_into()
        .map_err(|e| format!("{e}"))?;
    prog.load().map_err(|e| {
        let full = format!("{e:#}");
        log::debug!("{program}: full load error: {full}");
        format!("load: {}", shorten_verifier_log(&full))
    })?;
    prog.attach(tracepoint)
        .map_err(|e| format!("attach: {e:#}"))?;
    Ok(())
}

/// Loads the benchmark load generator `hook.name` and attaches it to the (perf) tracepoint
/// `hook.category:tracepoint`.
fn attach_load_generator(ebpf: &mut Ebpf, hook: &HookSpec, tracepoint: &str) -> Result<(), String> {
    let prog: &mut TracePoint = ebpf
        .program_mut(hook.name)
        .ok_or_else(|| format!("program {} missing from the object", hook.name))?
        .try_into()
        .map_err(|e| format!("{e}"))?;
    prog.load().map_err(|e| format!("load: {e:#}"))?;
    prog.attach(hook.category, tracepoint)
        .map_err(|e| format!("attach: {e:#}"))?;
    Ok(())
}

/// How far one kind of kernel hook gets on this kernel (`tboxscope doctor`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookTypeCheck {
    /// Program type: kprobe, raw_tracepoint, fentry, sock_ops, tc_classifier, ...
    pub hook: &'static str,
    /// What was tried, e.g. "load + attach to tcp_sendmsg".
    pub test: String,
    /// The kernel accepted the program.
    pub loaded: bool,
    /// Attached (and detached again); `None` when attaching was not tried.
    pub attached: Option<bool>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Usable on this kernel: true only when attached; false when loading or attaching
    /// failed; `None` (unknown) when attaching was not tried.
    pub available: Option<bool>,
}

impl HookTypeCheck {
    fn new(
        hook: &'static str,
        test: String,
        loaded: bool,
        attached: Option<bool>,
        error: Option<String>,
    ) -> Self {
        let available = if !loaded { Some(false) } else { attached };
        Self {
            hook,
            test,
            loaded,
            attached,
            error,
            available,
        }
    }

    fn outcome(hook: &'static str, test: String, r: Result<(), (bool, String)>) -> Self {
        match r {
            Ok(()) => Self::new(hook, test, true, Some(true), None),
            Err((loaded, e)) => Self::new(hook, test, loaded, loaded.then_some(false), Some(e)),
        }
    }
}

/// An error with its causes ("a: b: c"), without an empty trailing verifier log.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    let trimmed = s.trim_end();
    trimmed
        .strip_suffix("Verifier output:")
        .map_or(trimmed, |t| t.trim_end_matches(['.', ' ']))
        .to_owned()
}

/// The function the kprobe and fentry checks attach to.
const CHECK_FUNCTION: &str = "tcp_sendmsg";

impl TcpProbes {
    /// Loads and attaches one do-nothing program per hook type beyond the tracepoints (kprobe,
    /// raw tracepoint, fentry, sock_ops on an empty cgroup of its own under `cgroup2`), then
    /// detaches and unloads it: what the kernel really allows, not what its headers declare.
    /// TC classifiers are only loaded (attaching needs an interface and a qdisc).
    pub fn check_hook_types(&mut self, cgroup2: Option<&std::path::Path>) -> Vec<HookTypeCheck> {
        use aya::programs::{CgroupAttachMode, FEntry, KProbe, SchedClassifier, SockOps};
        let e = |x: &dyn std::error::Error| error_chain(x);
        let mut out = Vec::new();
        let r = (|| -> Result<(), (bool, String)> {
            let p: &mut KProbe = self.check_program("check_kprobe")?;
            p.load().map_err(|x| (false, e(&x)))?;
            let link = p.attach(CHECK_FUNCTION, 0).map_err(|x| (true, e(&x)))?;
            p.detach(link).map_err(|x| (true, e(&x)))
        })();
        out.push(HookTypeCheck::outcome(
            "kprobe",
            format!("load + attach to {CHECK_FUNCTION}"),
            r,
        ));
        let r = (|| -> Result<(), (bool, String)> {
            let p: &mut RawTracePoint = self.check_program("check_raw_tracepoint")?;
            p.load().map_err(|x| (false, e(&x)))?;
            let link = p.attach("tcp_probe").map_err(|x| (true, e(&x)))?;
            p.detach(link).map_err(|x| (true, e(&x)))
        })();
        out.push(HookTypeCheck::outcome(
            "raw_tracepoint",
            "load + attach to tcp_probe".into(),
            r,
        ));
        let r = (|| -> Result<(), (bool, String)> {
            let btf = aya::Btf::from_sys_fs().map_err(|x| (false, format!("BTF: {x}")))?;
            let p: &mut FEntry = self.check_program("check_fentry")?;
            p.load(CHECK_FUNCTION, &btf).map_err(|x| (false, e(&x)))?;
            let link = p.attach().map_err(|x| (true, e(&x)))?;
            p.detach(link).map_err(|x| (true, e(&x)))
        })();
        out.push(HookTypeCheck::outcome(
            "fentry",
            format!("load + attach to {CHECK_FUNCTION} (BTF tracing; fexit/tp_btf/LSM are the same type)"),
            r,
        ));
        let r = (|| -> Result<(), (bool, String)> {
            let root = cgroup2.ok_or((false, "no cgroup v2 mount".to_owned()))?;
            let p: &mut SockOps = self.check_program("check_sock_ops")?;
            p.load().map_err(|x| (false, e(&x)))?;
            // A cgroup of its own with no process in it: attaching there affects nobody.
            let dir = root.join(format!("tboxscope-doctor-{}", std::process::id()));
            std::fs::create_dir(&dir).map_err(|x| (true, format!("{}: {x}", dir.display())))?;
            let r = std::fs::File::open(&dir)
                .map_err(|x| (true, format!("{}: {x}", dir.display())))
                .and_then(|cg| {
                    let link = p
                        .attach(&cg, CgroupAttachMode::Single)
                        .map_err(|x| (true, e(&x)))?;
                    p.detach(link).map_err(|x| (true, e(&x)))
                });
            let _ = std::fs::remove_dir(&dir);
            r
        })();
        out.push(HookTypeCheck::outcome(
            "sock_ops",
            "load + attach to an empty cgroup v2 of its own".into(),
            r,
        ));
        let r = (|| -> Result<(), (bool, String)> {
            let p: &mut SchedClassifier = self.check_program("check_classifier")?;
            p.load().map_err(|x| (false, e(&x)))
        })();
        let test = "load only (attaching needs an interface and a qdisc)".to_owned();
        out.push(match r {
            Ok(()) => HookTypeCheck::new("tc_classifier", test, true, None, None),
            Err((_, e)) => HookTypeCheck::new("tc_classifier", test, false, None, Some(e)),
        });
        for name in [
            "check_kprobe",
            "check_raw_tracepoint",
            "check_fentry",
            "check_sock_ops",
            "check_classifier",
        ] {
            use aya::programs::Program;
            // Unloading a program that was never loaded only returns an error.
            let _ = match self.ebpf.program_mut(name) {
                Some(Program::KProbe(p)) => p.unload(),
                Some(Program::RawTracePoint(p)) => p.unload(),
                Some(Program::FEntry(p)) => p.unload(),
                Some(Program::SockOps(p)) => p.unload(),
                Some(Program::SchedClassifier(p)) => p.unload(),
                _ => Ok(()),
            };
        }
        out
    }

    fn check_program<'a, T>(&'a mut self, name: &str) -> Result<&'a mut T, (bool, String)>
    where
        &'a mut T: TryFrom<&'a mut aya::programs::Program>,
        <&'a mut T as TryFrom<&'a mut aya::programs::Program>>::Error: std::fmt::Display,
    {
        let p = self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| (false, format!("program {name} missing from the object")))?;
        p.try_into().map_err(|x| (false, format!("{x}")))
    }
}

/// When the probes cannot be loaded at all: whether the kernel accepts a trivial program of
/// each type (load only, nothing attached, so "loaded" does not mean the hook can be used).
pub fn program_type_support() -> Vec<HookTypeCheck> {
    use aya::programs::ProgramType;
    [
        ("tracepoint", ProgramType::TracePoint),
        ("raw_tracepoint", ProgramType::RawTracePoint),
        ("sock_ops", ProgramType::SockOps),
        ("tc_classifier", ProgramType::SchedClassifier),
        ("kprobe", ProgramType::KProbe),
    ]
    .into_iter()
    .map(|(hook, t)| {
        let (loaded, error) = match aya::sys::is_program_supported(t) {
            Ok(b) => (b, (!b).then(|| "program type refused".to_owned())),
            Err(e) => (false, Some(e.to_string())),
        };
        HookTypeCheck::new(
            hook,
            "load of a trivial program only (attach not tried)".into(),
            loaded,
            None,
            error,
        )
    })
    .collect()
}

/// Whether the kernel offers BPF ring buffers.
pub fn ringbuf_support() -> Result<bool, String> {
    aya::sys::is_map_supported(aya::maps::MapType::RingBuf).map_err(|e| e.to_string())
}

/// Keeps a verifier rejection readable: the message and the last lines of the log.
fn shorten_verifier_log(full: &str) -> String {
    match full.split_once("Verifier output:") {
        Some((head, log)) => {
            let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(4)..].join(" | ");
            format!("{}verifier: ... {tail}", head.trim_end())
        }
        None => full.to_owned(),
    }
}
