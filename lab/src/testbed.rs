//! The testbed: namespaces, veth paths, addresses, routing, nftables loss/outages, rate limits,
//! and the delay (netem where the kernel has it, else the delay line).
//!
//! ```text
//!  ns <p>tbox                ns <p>patha                       ns <p>gateway
//!  eth0 10.40.0.2/24 ── to-tbox [delay line / bridge+netem] to-gw ── g0 10.40.0.1/24
//!  eth1 10.50.0.2/24 ── to-tbox [   ns <p>pathb           ] to-gw ── g1 10.50.0.1/24
//! ```
//!
//! Loss and outages are nftables rules in each path's line namespace, at the egress toward the
//! receiver (`netdev` egress hook, after the delay): the sender's capture shows every packet
//! and TCP sees real loss, and a capture at the receiver shows only what arrived (libpcap sees
//! a frame before the receiver's own netfilter, so a drop there would look delivered). Rate limits are TBF qdiscs on the line namespace's egress interfaces.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::delayline::{DelayLine, LineConfig, LineStats};
use crate::error::{LabError, Result};
use crate::names::{
    existing_namespaces, LabNames, PathId, LINE_GATEWAY_SIDE, LINE_TBOX_SIDE, NFT_TABLE,
};
use crate::scenario::{PathSpec, Scenario};
use crate::sys;

/// How one-way delay is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DelayBackend {
    /// The kernel's `sch_netem` on the line namespace's egress, with a bridge between its ends.
    Netem,
    /// tboxscope's own delay line (a forwarder process or thread in the line namespace).
    Line,
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DelayChoice {
    /// netem when the kernel has it, else the delay line.
    #[default]
    Auto,
    /// Always the delay line.
    Line,
}

/// Where the delay-line forwarders run.
#[derive(Debug, Clone)]
pub enum LineHost {
    /// Threads of this process, stopped when the [`Testbed`] is dropped.
    InProcess,
    /// Detached processes (`EXE ARGS… --ns NS --config JSON`) that outlive this process;
    /// `down` ends them. Used by `tboxscope lab up`.
    Detached {
        /// The executable.
        exe: PathBuf,
        /// Arguments placed before `--ns`.
        args: Vec<String>,
    },
}

/// Options of [`Testbed::up`].
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Delay backend choice.
    pub delay: DelayChoice,
    /// Where the delay lines run.
    pub host: LineHost,
    /// Seed of the delay generators.
    pub seed: u64,
    /// Whether dropping the [`Testbed`] tears everything down (tests: yes; `lab up`: no).
    pub teardown_on_drop: bool,
    /// Delay line: busy-wait this many microseconds before each release (0 = sleep only).
    pub spin_us: u64,
}

impl Default for UpOptions {
    fn default() -> Self {
        UpOptions {
            delay: DelayChoice::Auto,
            host: LineHost::InProcess,
            seed: 0x7b0c_5c09,
            teardown_on_drop: true,
            spin_us: 0,
        }
    }
}

/// A running testbed. Dropping it tears everything down when `teardown_on_drop` was set,
/// also when a test fails.
#[derive(Debug)]
pub struct Testbed {
    names: LabNames,
    scenario: Scenario,
    backend: DelayBackend,
    lines: Vec<(PathId, DelayLine)>,
    teardown_on_drop: bool,
}

impl Testbed {
    /// Builds the testbed for `scenario` (tearing down any earlier instance with these names
    /// first, so `up` is idempotent). Outages start switched off; see [`Testbed::set_outage`].
    pub fn up(names: LabNames, scenario: &Scenario, opts: &UpOptions) -> Result<Testbed> {
        scenario.validate()?;
        down(&names)?;
        // From here on a failure still tears down what was built (the guard's Drop).
        let mut bed = Testbed {
            names,
            scenario: scenario.clone(),
            backend: DelayBackend::Line,
            lines: Vec::new(),
            teardown_on_drop: true,
        };
        bed.build(opts)?;
        bed.teardown_on_drop = opts.teardown_on_drop;
        Ok(bed)
    }

    fn build(&mut self, opts: &UpOptions) -> Result<()> {
        let n = self.names.clone();
        for ns in n.all_ns() {
            sys::run("ip", &["netns", "add", &ns])?;
            sys::run_in(&ns, "ip", &["link", "set", "lo", "up"])?;
            // No IPv6 chatter (router solicitations, MLD) on the lab's links.
            sys::run_in(&ns, "sysctl", &["-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
            sys::run_in(
                &ns,
                "sysctl",
                &["-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        let (tbox, gw) = (n.tbox_ns(), n.gateway_ns());
        for p in PathId::BOTH {
            let line = n.line_ns(p);
            sys::run(
                "ip",
                &[
                    "link",
                    "add",
                    p.tbox_iface(),
                    "netns",
                    &tbox,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    LINE_TBOX_SIDE,
                    "netns",
                    &line,
                ],
            )?;
            sys::run(
                "ip",
                &[
                    "link",
                    "add",
                    p.gateway_iface(),
                    "netns",
                    &gw,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    LINE_GATEWAY_SIDE,
                    "netns",
                    &line,
                ],
            )?;
            let t_addr = format!("{}/24", p.tbox_addr());
            let g_addr = format!("{}/24", p.gateway_addr());
            sys::run_in(
                &tbox,
                "ip",
                &["addr", "add", &t_addr, "dev", p.tbox_iface()],
            )?;
            sys::run_in(
                &gw,
                "ip",
                &["addr", "add", &g_addr, "dev", p.gateway_iface()],
            )?;
            let (ti, gi) = (p.tbox_iface(), p.gateway_iface());
            sys::in_netns(&tbox, move || sys::disable_offloads(ti))?;
            sys::in_netns(&gw, move || sys::disable_offloads(gi))?;
            sys::in_netns(&line, || {
                sys::disable_offloads(LINE_TBOX_SIDE)?;
                sys::disable_offloads(LINE_GATEWAY_SIDE)
            })?;
            for iface in [LINE_TBOX_SIDE, LINE_GATEWAY_SIDE] {
                sys::run_in(&line, "ip", &["link", "set", iface, "promisc", "on", "up"])?;
            }
            sys::run_in(&tbox, "ip", &["link", "set", p.tbox_iface(), "up"])?;
            sys::run_in(&gw, "ip", &["link", "set", p.gateway_iface(), "up"])?;
            // Source-based routing: anything sent from the path's address leaves on its path,
            // whatever the destination (the connected routes already pick the path by
            // destination for the gateway's two addresses).
            let table = if p == PathId::A { "140" } else { "150" };
            let src = p.tbox_addr().to_string();
            let via = p.gateway_addr().to_string();
            sys::run_in(&tbox, "ip", &["rule", "add", "from", &src, "table", table])?;
            sys::run_in(
                &tbox,
                "ip",
                &[
                    "route",
                    "add",
                    "default",
                    "via",
                    &via,
                    "dev",
                    p.tbox_iface(),
                    "table",
                    table,
                ],
            )?;
        }
        self.install_nft()?;
        self.wait_links_up()?;
        self.static_neighbours()?;
        self.backend = match opts.delay {
            DelayChoice::Line => DelayBackend::Line,
            DelayChoice::Auto if netem_available(&n.line_ns(PathId::A)) => DelayBackend::Netem,
            DelayChoice::Auto => DelayBackend::Line,
        };
        for p in PathId::BOTH {
            let spec = self.scenario.path(p).clone();
            let line = n.line_ns(p);
            match self.backend {
                DelayBackend::Netem => install_netem(&line, &spec)?,
                DelayBackend::Line => {
                    install_rate(&line, &spec)?;
                    let seed = opts
                        .seed
                        .wrapping_add(if p == PathId::A { 0 } else { 0x1000 });
                    let mut cfg = LineConfig::from_spec(&spec, seed);
                    cfg.spin_us = opts.spin_us;
                    match &opts.host {
                        LineHost::InProcess => self.lines.push((p, DelayLine::spawn(&line, cfg)?)),
                        LineHost::Detached { exe, args } => spawn_detached(&n, p, exe, args, &cfg)?,
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits until every lab interface reports operstate UP: the kernel activates a device's
    /// queue only then (linkwatch may take up to a second), and frames sent before are dropped.
    fn wait_links_up(&self) -> Result<()> {
        let n = &self.names;
        let mut pending: Vec<(String, &str)> = Vec::new();
        for p in PathId::BOTH {
            pending.push((n.tbox_ns(), p.tbox_iface()));
            pending.push((n.gateway_ns(), p.gateway_iface()));
            pending.push((n.line_ns(p), LINE_TBOX_SIDE));
            pending.push((n.line_ns(p), LINE_GATEWAY_SIDE));
        }
        for _ in 0..300 {
            pending.retain(|(ns, iface)| {
                !sys::run_in(ns, "ip", &["-o", "link", "show", "dev", iface])
                    .is_ok_and(|o| o.contains("state UP"))
            });
            if pending.is_empty() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err(LabError::Config(format!(
            "interfaces did not come up: {pending:?}"
        )))
    }

    /// Permanent ARP entries on both ends of each path: no ARP on the wire, no first-packet
    /// wait for resolution through the delay line.
    fn static_neighbours(&self) -> Result<()> {
        let n = &self.names;
        for p in PathId::BOTH {
            let t_mac = mac_of(&n.tbox_ns(), p.tbox_iface())?;
            let g_mac = mac_of(&n.gateway_ns(), p.gateway_iface())?;
            let (t_ip, g_ip) = (p.tbox_addr().to_string(), p.gateway_addr().to_string());
            sys::run_in(
                &n.tbox_ns(),
                "ip",
                &[
                    "neigh",
                    "replace",
                    &g_ip,
                    "lladdr",
                    &g_mac,
                    "dev",
                    p.tbox_iface(),
                    "nud",
                    "permanent",
                ],
            )?;
            sys::run_in(
                &n.gateway_ns(),
                "ip",
                &[
                    "neigh",
                    "replace",
                    &t_ip,
                    "lladdr",
                    &t_mac,
                    "dev",
                    p.gateway_iface(),
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(())
    }

    /// Writes the lab's nftables tables. Loss and outages are dropped in each path's line
    /// namespace, at the egress of the veth toward the receiver (a `netdev` egress hook, after
    /// the delay): the sender's capture still shows a lost packet and TCP sees a real network
    /// loss, while the receiver's capture — which sees a frame before its own netfilter could
    /// drop it — shows only what the network delivered. The end namespaces get an accounting
    /// chain on the sending side for per-transport byte counters.
    fn install_nft(&self) -> Result<()> {
        for ns in [self.names.gateway_ns(), self.names.tbox_ns()] {
            let s = format!(
                "table inet {NFT_TABLE} {{\n  chain account {{\n    type filter hook postrouting priority 0; policy accept;\n  }}\n}}\n"
            );
            sys::nft_script(&ns, &s)?;
        }
        for p in PathId::BOTH {
            let pm = self.scenario.path(p).loss_per_mille();
            let mut s = format!(
                "table netdev {NFT_TABLE} {{\n  counter loss {{ }}\n  counter outage {{ }}\n  chain outage {{ }}\n"
            );
            for (chain, dev) in [
                ("to_gateway", LINE_GATEWAY_SIDE),
                ("to_tbox", LINE_TBOX_SIDE),
            ] {
                s.push_str(&format!(
                    "  chain {chain} {{\n    type filter hook egress device \"{dev}\" priority 0; policy accept;\n    jump outage\n"
                ));
                if pm > 0 {
                    s.push_str(&format!(
                        "    meta protocol {{ ip, ip6 }} numgen random mod 1000 < {pm} counter name \"loss\" drop\n"
                    ));
                }
                s.push_str("  }\n");
            }
            s.push_str("}\n");
            sys::nft_script(&self.names.line_ns(p), &s)?;
        }
        Ok(())
    }

    /// Switches the outage of `path` on (drop everything, both directions, at the far ends of
    /// the path's line) or off.
    pub fn set_outage(&self, path: PathId, down: bool) -> Result<()> {
        set_outage(&self.names, path, down)
    }

    /// The names of this instance.
    pub fn names(&self) -> &LabNames {
        &self.names
    }

    /// The scenario it was built for.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The delay backend in use.
    pub fn backend(&self) -> DelayBackend {
        self.backend
    }

    /// Counters of the in-process delay lines.
    pub fn line_stats(&self) -> Vec<(PathId, LineStats)> {
        self.lines.iter().map(|(p, l)| (*p, l.stats())).collect()
    }

    /// Leaves everything running after this value is dropped (`tboxscope lab up`).
    pub fn keep(mut self) {
        self.teardown_on_drop = false;
        // In-process lines would die with this process: refuse silently is wrong, so say so.
        if !self.lines.is_empty() {
            log::warn!("keeping a testbed whose delay lines run in this process");
        }
    }

    /// Stops the delay lines and removes every namespace, returning the lines' final counters.
    pub fn teardown(mut self) -> Result<Vec<(PathId, LineStats)>> {
        self.teardown_on_drop = false;
        let mut stats = Vec::new();
        for (p, l) in self.lines.drain(..) {
            stats.push((p, l.stop()?));
        }
        down(&self.names)?;
        Ok(stats)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.teardown_on_drop {
            for (_, l) in self.lines.drain(..) {
                drop(l);
            }
            if let Err(e) = down(&self.names) {
                log::warn!("lab teardown: {e}");
            }
        }
    }
}

/// Switches the outage of `path` of the instance `names` on or off.
pub fn set_outage(names: &LabNames, path: PathId, down: bool) -> Result<()> {
    // The path's line namespace drops everything toward both ends (see `install_nft`).
    let script = if down {
        format!("flush chain netdev {NFT_TABLE} outage\nadd rule netdev {NFT_TABLE} outage counter name \"outage\" drop\n")
    } else {
        format!("flush chain netdev {NFT_TABLE} outage\n")
    };
    sys::nft_script(&names.line_ns(path), &script)
}

/// Whether `sch_netem` can be used (tried on a dummy interface inside namespace `ns`).
pub fn netem_available(ns: &str) -> bool {
    let ok = sys::run_in(ns, "ip", &["link", "add", "netemprobe", "type", "dummy"]).is_ok()
        && sys::run_in(
            ns,
            "tc",
            &[
                "qdisc",
                "add",
                "dev",
                "netemprobe",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
        )
        .is_ok();
    let _ = sys::run_in(ns, "ip", &["link", "del", "netemprobe"]);
    ok
}

fn mac_of(ns: &str, iface: &str) -> Result<String> {
    let out = sys::run_in(ns, "ip", &["-o", "link", "show", "dev", iface])?;
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| LabError::Config(format!("no MAC address on {iface} in {ns}")))
}

fn install_netem(ns: &str, spec: &PathSpec) -> Result<()> {
    sys::run_in(ns, "ip", &["link", "add", "br0", "type", "bridge"])?;
    for iface in [LINE_TBOX_SIDE, LINE_GATEWAY_SIDE] {
        sys::run_in(ns, "ip", &["link", "set", iface, "master", "br0"])?;
        let delay = format!("{}ms", spec.delay_ms);
        let jitter = format!("{}ms", spec.jitter_ms);
        let mut args = vec![
            "qdisc", "add", "dev", iface, "root", "netem", "delay", &delay,
        ];
        if spec.jitter_ms > 0.0 {
            args.extend_from_slice(&[&jitter, "distribution", "normal"]);
        }
        let rate;
        if let Some(r) = spec.rate_kbit {
            rate = format!("{r}kbit");
            args.extend_from_slice(&["rate", &rate]);
        }
        sys::run_in(ns, "tc", &args)?;
    }
    sys::run_in(ns, "ip", &["link", "set", "br0", "up"])?;
    Ok(())
}

fn install_rate(ns: &str, spec: &PathSpec) -> Result<()> {
    let Some(rate) = spec.rate_kbit else {
        return Ok(());
    };
    // Burst: 20 ms at the rate, at least a few full frames.
    let burst = (u64::from(rate) * 1000 / 8 / 50).max(4 * 1514).to_string();
    let rate = format!("{rate}kbit");
    for iface in [LINE_TBOX_SIDE, LINE_GATEWAY_SIDE] {
        sys::run_in(
            ns,
            "tc",
            &[
                "qdisc", "replace", "dev", iface, "root", "tbf", "rate", &rate, "burst", &burst,
                "latency", "400ms",
            ],
        )?;
    }
    Ok(())
}

fn spawn_detached(
    names: &LabNames,
    path: PathId,
    exe: &Path,
    args: &[String],
    cfg: &LineConfig,
) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = names.state_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
    let log_path = dir.join(format!("line-{}.log", path.letter()));
    let log = std::fs::File::create(&log_path)
        .map_err(|e| LabError::io(format!("create {}", log_path.display()), e))?;
    let log2 = log.try_clone().map_err(|e| LabError::io("dup log fd", e))?;
    let json = serde_json::to_string(cfg).map_err(|e| LabError::Config(e.to_string()))?;
    let child = Command::new(exe)
        .args(args)
        .args(["--ns", &names.line_ns(path), "--config", &json])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| LabError::io(format!("start the delay line {}", exe.display()), e))?;
    let pid_path = dir.join(format!("line-{}.pid", path.letter()));
    std::fs::write(&pid_path, child.id().to_string())
        .map_err(|e| LabError::io(format!("write {}", pid_path.display()), e))?;
    // Wait until it has entered its namespace and opened its sockets (it says so in the log).
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("delay line ready") {
            return Ok(());
        }
        if text.contains("error") {
            return Err(LabError::Config(format!(
                "delay line for path {}: {text}",
                path.letter()
            )));
        }
    }
    Err(LabError::Config(format!(
        "delay line for path {} did not start",
        path.letter()
    )))
}

static STOP_DETACHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP_DETACHED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Body of a detached delay-line process: enters `ns` (the whole process, so `ip netns pids`
/// finds it and `down` ends it), forwards until SIGTERM/SIGINT.
pub fn run_detached_line(ns: &str, config_json: &str) -> Result<()> {
    let cfg: LineConfig =
        serde_json::from_str(config_json).map_err(|e| LabError::Config(e.to_string()))?;
    sys::enter_netns(ns)?;
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
    let counters = crate::delayline::LineCounters::default();
    println!("delay line ready in {ns}: {cfg:?}");
    let r = crate::delayline::run_forwarder(&cfg, &STOP_DETACHED, &counters);
    println!("delay line stopped: {:?}", counters.stats());
    r
}

/// Whether `pid` is a running process (a zombie waiting for its parent counts as ended).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Removes every namespace whose name starts with the instance prefix, after ending the
/// processes inside them (detached delay lines, leftovers of a crashed run). Idempotent.
pub fn down(names: &LabNames) -> Result<()> {
    let own = std::process::id();
    for ns in existing_namespaces(names.prefix())? {
        let pids = sys::run("ip", &["netns", "pids", &ns]).unwrap_or_default();
        let pids: Vec<i32> = pids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| *p != own as i32 && *p > 1)
            .collect();
        for pid in &pids {
            // SAFETY: signalling a process that lives in the lab's own namespace.
            unsafe { libc::kill(*pid, libc::SIGTERM) };
        }
        for pid in &pids {
            for _ in 0..50 {
                if !process_alive(*pid) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if process_alive(*pid) {
                // SAFETY: as above; it ignored SIGTERM for a second.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
        }
        sys::run("ip", &["netns", "del", &ns])?;
    }
    let dir = names.state_dir();
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| LabError::io(format!("remove {}", dir.display()), e))?;
    }
    Ok(())
}
