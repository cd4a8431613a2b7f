//! `tboxscope doctor`: what live mode can use on this machine, and why not when it cannot.
//! Hooks are really loaded and attached (then detached), not guessed.
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use probe_user::source::ebpf::{
    self, denied_hooks, privileges::Capabilities, tracefs::Tracefs, HookState, HookStatus,
    HookTypeCheck, ProbeOptions, TcpProbes,
};
use serde::Serialize;

use crate::cli::DoctorArgs;

#[derive(Debug, Serialize)]
struct Check<T: Serialize> {
    ok: bool,
    #[serde(flatten)]
    detail: T,
}

#[derive(Debug, Serialize)]
struct Report {
    /// True when live mode (`sudo tboxscope` with these interfaces) can run, possibly degraded.
    live_mode: bool,
    /// Why live mode cannot run (the first blocking check), in the words live mode uses.
    live_mode_blocked: Option<String>,
    /// Features missing, one line each.
    degraded: Vec<String>,
    kernel: serde_json::Value,
    btf: Check<serde_json::Value>,
    tracefs: Check<serde_json::Value>,
    cgroup_v2: Check<serde_json::Value>,
    privileges: Check<serde_json::Value>,
    /// Hook types beyond the four tracepoints, each really loaded and attached when possible.
    program_types: Vec<HookTypeCheck>,
    ringbuf: Check<serde_json::Value>,
    hooks: Vec<HookStatus>,
    hooks_error: Option<String>,
    libpcap: Check<serde_json::Value>,
    interfaces: Check<serde_json::Value>,
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn cgroup2_mount() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, path, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| path.to_owned())
    })
}

/// dlopen()s libpcap and asks its version; cheap, no capture.
fn libpcap_version() -> Result<String, String> {
    for name in [c"libpcap.so.1", c"libpcap.so.0.8", c"libpcap.so"] {
        // SAFETY: constant NUL-terminated names; the handle is closed below.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if h.is_null() {
            continue;
        }
        // SAFETY: valid handle and symbol name.
        let sym = unsafe { libc::dlsym(h, c"pcap_lib_version".as_ptr()) };
        let version = if sym.is_null() {
            format!("{} (version unknown)", name.to_string_lossy())
        } else {
            // SAFETY: pcap_lib_version has signature `const char *(void)` and returns a static
            // NUL-terminated string.
            let f: extern "C" fn() -> *const libc::c_char = unsafe { std::mem::transmute(sym) };
            let p = f();
            if p.is_null() {
                "unknown".to_owned()
            } else {
                // SAFETY: non-null static C string from libpcap.
                unsafe { std::ffi::CStr::from_ptr(p) }
                    .to_string_lossy()
                    .into_owned()
            }
        };
        // SAFETY: handle from dlopen.
        unsafe { libc::dlclose(h) };
        return Ok(version);
    }
    Err("libpcap not found (apt-get install -y libpcap-dev)".to_owned())
}

fn interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn build(args: &DoctorArgs) -> anyhow::Result<Report> {
    let deny = denied_hooks(&args.deny_hooks)?;
    let mut degraded = Vec::new();
    let caps = Capabilities::current();
    let missing: Vec<serde_json::Value> = caps
        .missing()
        .into_iter()
        .map(|(c, what)| serde_json::json!({"capability": c, "disables": what}))
        .collect();
    let ebpf_refusal = caps.ebpf_refusal();
    let btf_present = Path::new("/sys/kernel/btf/vmlinux").exists();
    let tracefs = Tracefs::find_or_mount();
    let cg = cgroup2_mount();
    let (hooks, hooks_error, program_types) = match TcpProbes::load(&ProbeOptions {
        deny,
        ..ProbeOptions::default()
    }) {
        Ok(mut p) => {
            let types = p.check_hook_types(cg.as_deref().map(Path::new));
            (p.hooks().to_vec(), None, types)
        }
        Err(e) => (
            Vec::new(),
            Some(e.to_string()),
            ebpf::program_type_support(),
        ),
    };
    for h in &hooks {
        match &h.state {
            HookState::Attached => {}
            HookState::Denied(why) | HookState::Unavailable(why) | HookState::Failed(why) => {
                degraded.push(format!("no {} ({}: {why})", h.feature, h.tracepoint));
            }
        }
    }

    if let Some(e) = &hooks_error {
        degraded.push(format!("no eBPF TCP probes: {e}"));
    }
    let pcap = libpcap_version();
    if let Err(e) = &pcap {
        degraded.push(format!("no packet capture: {e}"));
    }
    let ifs = interfaces();
    let specs = super::watch::interface_specs(&args.interfaces)?;
    let missing_ifs = super::watch::missing_interfaces(&specs);
    if !missing_ifs.is_empty() {
        degraded.push(format!("no interface {} here", missing_ifs.join(", ")));
    }
    let paths: Vec<serde_json::Value> = specs
        .iter()
        .map(|i| {
            serde_json::json!({
                "name": i.name,
                "label": i.label,
                "present": !missing_ifs.contains(&i.name.as_str()),
            })
        })
        .collect();
    let ringbuf = ebpf::ringbuf_support();
    if cg.is_none() {
        degraded.push("no cgroup v2 mount: sock_ops hooks unavailable".into());
    }
    // The same checks, in the same words, as `sudo tboxscope` makes before it starts.
    let live_mode_blocked = if !missing_ifs.is_empty() {
        Some(super::watch::missing_interfaces_message(&missing_ifs))
    } else if let Err(e) = &pcap {
        Some(format!("no packet capture: {e}"))
    } else if !hooks.iter().any(|h| h.state == HookState::Attached) {
        Some("no eBPF TCP hook attaches (see above)".to_owned())
    } else {
        None
    };
    Ok(Report {
        live_mode: live_mode_blocked.is_none(),
        live_mode_blocked,
        degraded,
        kernel: serde_json::json!({
            "release": read_trim("/proc/sys/kernel/osrelease"),
            "version": read_trim("/proc/sys/kernel/version"),
            "lockdown": read_trim("/sys/kernel/security/lockdown"),
            "config_hz": ebpf::offsets::kernel_hz(),
        }),
        btf: Check {
            ok: btf_present,
            detail: serde_json::json!({"path": "/sys/kernel/btf/vmlinux"}),
        },
        tracefs: Check {
            ok: tracefs.is_ok(),
            detail: match &tracefs {
                Ok(t) => serde_json::json!({"path": t.root()}),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            },
        },
        cgroup_v2: Check {
            ok: cg.is_some(),
            detail: serde_json::json!({"path": cg}),
        },
        privileges: Check {
            ok: ebpf_refusal.is_none(),
            detail: serde_json::json!({
                "effective": format!("{:016x}", caps.effective),
                "missing": missing,
                "advice": ebpf_refusal,
            }),
        },
        program_types,
        ringbuf: Check {
            ok: matches!(ringbuf, Ok(true)),
            detail: match &ringbuf {
                Ok(_) => serde_json::json!({}),
                Err(e) => serde_json::json!({"error": e}),
            },
        },
        hooks,
        hooks_error,
        libpcap: Check {
            ok: pcap.is_ok(),
            detail: match &pcap {
                Ok(v) => serde_json::json!({"version": v}),
                Err(e) => serde_json::json!({"error": e}),
            },
        },
        interfaces: Check {
            ok: missing_ifs.is_empty(),
            detail: serde_json::json!({"all": ifs, "paths": paths}),
        },
    })
}

/// How a check line is marked: green ok, yellow degraded, red failure (colour only on a
/// terminal, and not with NO_COLOR, as the terminal UI).
#[derive(Clone, Copy)]
enum Mark {
    Ok,
    No,
    Unknown,
    Fail,
}

/// Writes the report's marks in colour or plain.
struct Painter {
    color: bool,
}

impl Painter {
    fn for_stdout() -> Self {
        use std::io::IsTerminal;
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            color: std::io::stdout().is_terminal() && !no_color,
        }
    }

    fn paint(&self, text: &str, code: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn mark(&self, m: Mark) -> String {
        match m {
            Mark::Ok => self.paint("ok  ", "32"),
            Mark::No => self.paint("no  ", "33"),
            Mark::Unknown => " ?  ".to_owned(),
            Mark::Fail => self.paint("FAIL", "1;31"),
        }
    }
}

fn ok_or_fail(ok: bool) -> Mark {
    if ok {
        Mark::Ok
    } else {
        Mark::Fail
    }
}

fn print_text(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let p = Painter::for_stdout();
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("unknown").to_owned();
    writeln!(out, "tboxscope doctor")?;
    writeln!(out, "  kernel      {}", field(&r.kernel, "release"))?;
    writeln!(
        out,
        "  [{}] BTF at /sys/kernel/btf/vmlinux{}",
        p.mark(ok_or_fail(r.btf.ok)),
        if r.btf.ok { "" } else { ": missing" }
    )?;
    match r.tracefs.detail.get("path").and_then(|v| v.as_str()) {
        Some(path) if r.tracefs.ok => {
            writeln!(out, "  [{}] tracefs mounted at {path}", p.mark(Mark::Ok))?;
        }
        _ => writeln!(
            out,
            "  [{}] tracefs: {}",
            p.mark(Mark::Fail),
            field(&r.tracefs.detail, "error")
        )?,
    }
    match r.cgroup_v2.detail.get("path").and_then(|v| v.as_str()) {
        Some(path) => writeln!(out, "  [{}] cgroup v2 at {path}", p.mark(Mark::Ok))?,
        None => writeln!(
            out,
            "  [{}] cgroup v2: not mounted (sock_ops hooks unavailable)",
            p.mark(Mark::Fail)
        )?,
    }
    writeln!(
        out,
        "  [{}] privileges",
        p.mark(ok_or_fail(r.privileges.ok))
    )?;
    if let Some(m) = r.privileges.detail["missing"].as_array() {
        for c in m {
            writeln!(
                out,
                "         missing {}: disables {}",
                c["capability"].as_str().unwrap_or("?"),
                c["disables"].as_str().unwrap_or("?")
            )?;
        }
    }
    if let Some(a) = r.privileges.detail["advice"].as_str() {
        writeln!(out, "         {a}")?;
    }
    writeln!(
        out,
        "  [{}] BPF ring buffer{}",
        p.mark(ok_or_fail(r.ringbuf.ok)),
        match r.ringbuf.detail.get("error").and_then(|v| v.as_str()) {
            Some(e) => format!(": {e}"),
            None => String::new(),
        }
    )?;
    writeln!(out, "  hook types:")?;
    for t in &r.program_types {
        let state = match (t.available, &t.error) {
            (Some(true), _) => "available".to_owned(),
            (None, _) => "loads; attach not tried".to_owned(),
            (Some(false), Some(e)) if t.loaded => format!("loads, but attach fails: {e}"),
            (Some(false), Some(e)) => format!("refused: {e}"),
            (Some(false), None) => "refused".to_owned(),
        };
        let m = match t.available {
            Some(true) => Mark::Ok,
            Some(false) => Mark::No,
            None => Mark::Unknown,
        };
        writeln!(
            out,
            "    [{}] {:<15} {state} ({})",
            p.mark(m),
            t.hook,
            t.test
        )?;
    }
    writeln!(out, "  hooks:")?;
    for h in &r.hooks {
        let (ok, why) = match &h.state {
            HookState::Attached => (true, "attached (test attach, then detached)".to_owned()),
            HookState::Denied(w) => (false, format!("denied: {w}")),
            HookState::Unavailable(w) => (false, format!("unavailable: {w}")),
            HookState::Failed(w) => (false, format!("failed: {w}")),
        };
        writeln!(
            out,
            "    [{}] {:<28} {} -> {}",
            p.mark(ok_or_fail(ok)),
            h.tracepoint,
            h.feature,
            why
        )?;
    }
    if let Some(e) = &r.hooks_error {
        writeln!(out, "    [{}] {e}", p.mark(Mark::Fail))?;
    }
    match r.libpcap.detail.get("version").and_then(|v| v.as_str()) {
        Some(v) => writeln!(out, "  [{}] {v}", p.mark(Mark::Ok))?,
        None => writeln!(
            out,
            "  [{}] libpcap: {}",
            p.mark(Mark::Fail),
            field(&r.libpcap.detail, "error")
        )?,
    }
    let paths: Vec<String> = r.interfaces.detail["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "{} {}",
                i["name"].as_str().unwrap_or("?"),
                if i["present"] == true {
                    "present"
                } else {
                    "missing"
                }
            )
        })
        .collect();
    let all: Vec<&str> = r.interfaces.detail["all"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    writeln!(
        out,
        "  [{}] path interfaces: {} (this host has: {})",
        p.mark(ok_or_fail(r.interfaces.ok)),
        paths.join(", "),
        all.join(", ")
    )?;
    if !r.degraded.is_empty() {
        writeln!(out, "  degraded:")?;
        for d in &r.degraded {
            writeln!(out, "    - {d}")?;
        }
    }
    match &r.live_mode_blocked {
        None => writeln!(out, "  live mode: {}", p.paint("can run", "32"))?,
        Some(why) => writeln!(out, "  live mode: {}: {why}", p.paint("cannot run", "1;31"))?,
    }
    Ok(())
}

/// Runs `tboxscope doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = build(&args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_text(&report, &mut out)?;
    }
    out.flush()?;
    Ok(if report.live_mode {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
