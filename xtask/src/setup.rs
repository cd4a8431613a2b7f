//! Idempotent installation of everything the build, the demo and the tests need.
//! Each step first checks whether its thing is already there, so a second run takes a second.
use std::process::Command;

use anyhow::{bail, Result};

use crate::run as run_command;

/// Debian packages: libpcap for capture, LLVM 22 for bpf-linker, cmake and g++ for tquic's
/// BoringSSL (the lab's `mpquic` peer), and the tools the tests use as
/// oracles or helpers (tshark, tcpdump, nftables, iproute2, bpftool, tmux, and prometheus with
/// promtool, which scrape and check the metrics; chromium, which renders the picture report).
const DEBIAN_PACKAGES: &[&str] = &[
    "libpcap-dev",
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "tshark",
    "tcpdump",
    "nftables",
    "iproute2",
    "bpftool",
    "tmux",
    "prometheus",
    // The lab's multipath QUIC peer (tquic) builds BoringSSL from source: cmake and a C++
    // compiler (tquic 1.6's BoringSSL needs no Go).
    "cmake",
    "g++",
    // `cargo xtask dist`: .deb Depends (dpkg-shlibdeps); editcap for the cross-arch check
    // comes with tshark.
    "dpkg-dev",
    // The T-Box's aarch64: cross linker and libc, its libpcap (multiarch), qemu-user to run
    // its tests and binaries here.
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "libpcap-dev:arm64",
    // arm64 loader and libc where qemu-user finds them (no -L prefix needed).
    "libc6:arm64",
    "qemu-user-static",
    // The picture report's test renders it in a real browser (headless).
    "chromium",
];

/// Debian architectures added with `dpkg --add-architecture` (for `libpcap-dev:arm64`).
const FOREIGN_ARCHITECTURES: &[&str] = &["arm64"];

/// Rust targets beside the host's: the T-Box's.
const RUST_TARGETS: &[&str] = &["aarch64-unknown-linux-gnu"];

/// The bpf-linker release that matches the nightly's LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Installs whatever is missing.
pub fn install_missing() -> Result<()> {
    debian_packages()?;
    rust_targets()?;
    nightly_rust_src()?;
    bpf_linker()?;
    cargo_fuzz()?;
    python_packages()?;
    Ok(())
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    output("id", &["-u"]).is_some_and(|s| s.trim() == "0")
}

fn debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !output("dpkg-query", &["-W", "-f=${Status}", p])
                .is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages {missing:?}: run as root, or `apt-get install -y {}`",
            missing.join(" ")
        );
    }
    let known = output("dpkg", &["--print-foreign-architectures"]).unwrap_or_default();
    for arch in FOREIGN_ARCHITECTURES {
        if !known.lines().any(|a| a.trim() == *arch) {
            println!("xtask setup: adding the Debian architecture {arch}");
            run_command(Command::new("dpkg").args(["--add-architecture", arch]))?;
        }
    }
    println!("xtask setup: installing Debian packages {missing:?}");
    run_command(Command::new("apt-get").arg("update").arg("-q"))?;
    run_command(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing),
    )
}

fn rust_targets() -> Result<()> {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    for target in RUST_TARGETS {
        if !installed.lines().any(|t| t.trim() == *target) {
            println!("xtask setup: adding the Rust target {target}");
            run_command(Command::new("rustup").args(["target", "add", target]))?;
        }
    }
    Ok(())
}

fn nightly_rust_src() -> Result<()> {
    let installed = output(
        "rustup",
        &["component", "list", "--toolchain", "nightly", "--installed"],
    );
    match installed {
        Some(list) if list.lines().any(|l| l.starts_with("rust-src")) => Ok(()),
        Some(_) => {
            println!("xtask setup: adding rust-src to the nightly toolchain");
            run_command(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
        }
        None => bail!("no nightly toolchain: the eBPF programs need the machine's nightly (rustup toolchain list)"),
    }
}

fn bpf_linker() -> Result<()> {
    if output("bpf-linker", &["--version"]).is_some_and(|v| v.contains(BPF_LINKER_VERSION)) {
        return Ok(());
    }
    println!("xtask setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about 75 s)");
    let path = format!(
        "/usr/lib/llvm-22/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    run_command(
        Command::new("cargo")
            .env("LLVM_PREFIX", "/usr/lib/llvm-22")
            .env("PATH", path)
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args(["--no-default-features", "--features", "llvm-22"]),
    )
}

fn cargo_fuzz() -> Result<()> {
    if output("cargo", &["fuzz", "--version"]).is_some() {
        return Ok(());
    }
    println!("xtask setup: installing cargo-fuzz");
    run_command(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

/// Python packages of the real peers the tests run: aioquic (a QUIC client and server that
/// writes a key log; tui/tests/quic_midconn.rs) and OpenTelemetry's official Python protobuf
/// definitions (the OTLP receiver of tui/tests/metrics.rs decodes with them).
const PYTHON_PACKAGES: &[(&str, &str)] = &[
    ("aioquic", "aioquic"),
    (
        "opentelemetry.proto.collector.metrics.v1",
        "opentelemetry-proto",
    ),
];

fn python_packages() -> Result<()> {
    for (module, package) in PYTHON_PACKAGES {
        if output("python3", &["-c", &format!("import {module}")]).is_some() {
            continue;
        }
        println!("xtask setup: installing the Python package {package}");
        run_command(Command::new("python3").args(["-m", "pip", "install", "-q", package]))?;
    }
    Ok(())
}

/// A command's standard output when it ran and succeeded.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
