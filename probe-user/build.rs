//! Builds the eBPF programs (`../probe-ebpf`) for the bpfel target with aya-build (nightly,
//! `-Z build-std=core`, bpf-linker) and leaves the object in `OUT_DIR/probe-ebpf`.
//!
//! `probe-ebpf` is its own workspace (excluded from the host one), so the nested cargo runs from
//! its directory. `AYA_BUILD_SKIP=1` skips the build; the loader then reports the object missing.
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
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    if skip {
        // Leave an empty object so include_bytes! works; loading then fails with a clear error.
        std::fs::write(out.join("probe-ebpf"), b"")?;
    }
    std::env::set_current_dir(&ebpf_dir)?;
    let root = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "probe-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
