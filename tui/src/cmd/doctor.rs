//! `tboxscope doctor`: what live mode can use on this machine, and why not when it cannot.
//! Hooks are really loaded and attached (then detached), not guessed.
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
    /// True when `tboxscope capture` / live mode can run (possibly degraded).
    live_mode: bool,
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
    let live_mode = hooks.iter().any(|h| h.state == HookState::Attached);
    if let Some(e) = &hooks_error {
        degraded.push(format!("no eBPF TCP probes: {e}"));
    }
    let pcap = libpcap_version();
    if let Err(e) = &pcap {
        degraded.push(format!("no packet capture: {e}"));
    }
    let ifs = interfaces();
    let (eth0, eth1) = (
        ifs.iter().any(|i| i == "eth0"),
        ifs.iter().any(|i| i == "eth1"),
    );
    if !eth0 || !eth1 {
        degraded.push(format!(
            "path interfaces: eth0 (4G) {}, eth1 (5G) {}",
            if eth0 { "present" } else { "missing" },
            if eth1 { "present" } else { "missing" }
        ));
    }
    let ringbuf = ebpf::ringbuf_support();
    if cg.is_none() {
        degraded.push("no cgroup v2 mount: sock_ops hooks unavailable".into());
    }
    Ok(Report {
        live_mode,
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
            ok: eth0 && eth1,
            detail: serde_json::json!({"all": ifs, "eth0": eth0, "eth1": eth1}),
        },
    })
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok  "
    } else {
        "FAIL"
    }
}

fn print_text(r: &Report) {
    println!("tboxscope doctor");
    println!(
        "  kernel      {}",
        r.kernel["release"].as_str().unwrap_or("unknown")
    );
    println!("  [{}] BTF /sys/kernel/btf/vmlinux", mark(r.btf.ok));
    println!("  [{}] tracefs {}", mark(r.tracefs.ok), r.tracefs.detail);
    println!(
        "  [{}] cgroup v2 {}",
        mark(r.cgroup_v2.ok),
        r.cgroup_v2.detail["path"]
    );
    println!("  [{}] privileges", mark(r.privileges.ok));
    if let Some(m) = r.privileges.detail["missing"].as_array() {
        for c in m {
            println!(
                "         missing {}: disables {}",
                c["capability"].as_str().unwrap_or("?"),
                c["disables"].as_str().unwrap_or("?")
            );
        }
    }
    if let Some(a) = r.privileges.detail["advice"].as_str() {
        println!("         {a}");
    }
    println!("  [{}] BPF ring buffer", mark(r.ringbuf.ok));
    println!("  hook types:");
    for t in &r.program_types {
        let state = match (t.available, &t.error) {
            (Some(true), _) => "available".to_owned(),
            (None, _) => "loads; attach not tried".to_owned(),
            (Some(false), Some(e)) if t.loaded => format!("loads, but attach fails: {e}"),
            (Some(false), Some(e)) => format!("refused: {e}"),
            (Some(false), None) => "refused".to_owned(),
        };
        let m = match t.available {
            Some(true) => "ok  ",
            Some(false) => "no  ",
            None => " ?  ",
        };
        println!("    [{m}] {:<15} {state} ({})", t.hook, t.test);
    }
    println!("  hooks:");
    for h in &r.hooks {
        let (ok, why) = match &h.state {
            HookState::Attached => (true, "attached (test attach, then detached)".to_owned()),
            HookState::Denied(w) => (false, format!("denied: {w}")),
            HookState::Unavailable(w) => (false, format!("unavailable: {w}")),
            HookState::Failed(w) => (false, format!("failed: {w}")),
        };
        println!(
            "    [{}] {:<28} {} -> {}",
            mark(ok),
            h.tracepoint,
            h.feature,
            why
        );
    }
    if let Some(e) = &r.hooks_error {
        println!("    [FAIL] {e}");
    }
    println!("  [{}] libpcap {}", mark(r.libpcap.ok), r.libpcap.detail);
    println!(
        "  [{}] interfaces {} (eth0 {}, eth1 {})",
        mark(r.interfaces.ok),
        r.interfaces.detail["all"],
        r.interfaces.detail["eth0"],
        r.interfaces.detail["eth1"]
    );
    if !r.degraded.is_empty() {
        println!("  degraded:");
        for d in &r.degraded {
            println!("    - {d}");
        }
    }
    println!(
        "  live mode: {}",
        if r.live_mode { "can run" } else { "cannot run" }
    );
}

/// Runs `tboxscope doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = build(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if report.live_mode {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
