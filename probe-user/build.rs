//! Builds the eBPF programs (`../probe-ebpf`) for the bpfel target with aya-build (nightly,
//! `-Z build-std=core`, bpf-linker) and leaves the object in `OUT_DIR/probe-ebpf`.
//!
//! `probe-ebpf` is its own workspace (excluded from the host one), so the nested cargo runs from
//! its directory. `AYA_BUILD_SKIP=1` skips the build; the loader then reports the object missing.
//!
//! The object is built once per target directory and embedded as it is in every userspace
//! target (x86_64 and aarch64 alike): eBPF bytecode is little-endian on both, and the programs
//! use no architecture-specific context (no `pt_regs` argument reads), so aya-build is handed
//! the build machine's architecture whatever the userspace target is. A cross build then finds
//! the object already built instead of building a second one.
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let ebpf_dir = manifest
        .parent()
        .ok_or_else(|| anyhow::anyhow!("probe-user has no parent directory"))?
        .join("probe-ebpf");
    let common_dir = ebpf_dir
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no workspace directory"))?
        .join("probe-common");
    println!(
        "cargo:rerun-if-changed={}",
        common_dir.join("src").display()
    );
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        ebpf_dir.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    if skip {
        // Leave an empty object so include_bytes! works; loading then fails with a clear error.
        std::fs::write(out.join("probe-ebpf"), b"")?;
    }
    if skip {
        return Ok(());
    }
    // Build in one place shared by every profile (dev, test, check, release each have their
    // own OUT_DIR; the object is the same), then copy it into this OUT_DIR. The nested cargo
    // locks that directory, so concurrent builds wait for each other.
    let shared = shared_dir(&out);
    std::fs::create_dir_all(&shared)?;
    std::env::set_current_dir(&ebpf_dir)?;
    let root = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    // SAFETY (edition 2021: safe fn): build scripts are single-threaded here.
    std::env::set_var("OUT_DIR", &shared);
    // aya-build passes CARGO_CFG_TARGET_ARCH on as `bpf_target_arch`; the build machine's
    // architecture (first part of HOST) keeps the nested build identical for every target.
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH")?;
    let host = std::env::var("HOST")?;
    let host_arch = host.split('-').next().unwrap_or(&host).to_owned();
    std::env::set_var("CARGO_CFG_TARGET_ARCH", &host_arch);
    let built = aya_build::build_ebpf(
        [aya_build::Package {
            name: "probe-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    );
    std::env::set_var("OUT_DIR", &out);
    std::env::set_var("CARGO_CFG_TARGET_ARCH", &target_arch);
    built?;
    std::fs::copy(shared.join("probe-ebpf"), out.join("probe-ebpf"))?;
    Ok(())
}

/// `<target dir>/ebpf`, found from OUT_DIR (`<target>/[<triple>/]<profile>/build/<pkg>/out`):
/// one object for every profile and every `--target`.
fn shared_dir(out: &std::path::Path) -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        let t = PathBuf::from(t);
        if t.is_absolute() {
            return t.join("ebpf");
        }
    }
    out.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "build"))
        .and_then(|b| b.parent())
        .and_then(|profile| profile.parent())
        // `--target <triple>` builds live one level further down.
        .map(|dir| match (dir.file_name(), std::env::var_os("TARGET")) {
            (Some(name), Some(triple)) if name == triple => dir.parent().unwrap_or(dir),
            _ => dir,
        })
        .map_or_else(|| out.join("ebpf"), |t| t.join("ebpf"))
}
