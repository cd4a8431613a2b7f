//! `cargo xtask`: the project's tasks. `setup` installs what is missing (idempotent, quick when
//! everything is there); `demo` and `test` run it first, so the README's two commands work on a
//! fresh machine.
mod arch;
mod cross;
mod dist;
mod setup;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "tboxscope project tasks")]
struct Xtask {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install missing prerequisites: Debian packages (with the aarch64 cross toolchain, arm64
    /// libpcap and qemu-user), the aarch64 Rust target, nightly rust-src, bpf-linker, cargo-fuzz.
    Setup,
    /// Set up, then run the demo: the built-in two-path lab (scenario S2) watched by tboxscope.
    Demo {
        /// Scenario preset (S1..S4) or scenario TOML file.
        #[arg(long, default_value = "S2")]
        scenario: String,
        /// How long the lab runs.
        #[arg(long, default_value = "20s")]
        duration: String,
    },
    /// Set up, then check formatting and lints, run every test (root, eBPF and
    /// network-namespace tests included), the aarch64 build's tests without kernel hooks under
    /// qemu-user with analyze's output compared on both architectures, and a bounded fuzzing
    /// run of every fuzz target.
    Test {
        /// Seconds of fuzzing per fuzz target (0 skips fuzzing).
        #[arg(long, env = "TBOX_FUZZ_SECONDS", default_value_t = 20)]
        fuzz_seconds: u64,
    },
    /// Set up, then only the aarch64 step of `test`: the T-Box build's tests without kernel
    /// hooks under qemu-user and analyze's output compared with x86_64's (no root needed).
    TestAarch64,
    /// Set up, then build release binaries of `tboxscope` for the T-Box (aarch64) and x86_64
    /// and pack each as a tarball and a .deb in `target/dist/`.
    Dist {
        /// Rust target triple (repeatable); both when not given.
        #[arg(long = "target", value_parser = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"])]
        targets: Vec<String>,
    },
    /// Set up, then run the benchmarks (figures go to BENCHMARKS.md by hand). `bench soak`
    /// runs only the long headless-capture soak instead.
    Bench {
        #[command(subcommand)]
        only: Option<BenchOnly>,
    },
}

#[derive(Subcommand)]
enum BenchOnly {
    /// `tboxscope capture` (or with `--ui` the live UI) on two interfaces at a T-Box's rate (100 KCP messages/s per path,
    /// flows coming and going) for a long run, resident memory sampled every minute; prints
    /// the table and whether it stays flat after warm-up. Not part of plain `bench` (an hour).
    Soak {
        /// How long the capture runs.
        #[arg(long, default_value_t = 60)]
        minutes: u64,
        /// Also load the eBPF TCP probes (they see the whole host's TCP, not only the soak's).
        #[arg(long)]
        tcp: bool,
        /// Soak the live terminal UI (on a pseudo-terminal) instead of headless `capture`.
        #[arg(long)]
        ui: bool,
        /// Run tboxscope under valgrind's callgrind: instructions per packet (for a few
        /// minutes; memory and time are then valgrind's).
        #[arg(long)]
        callgrind: bool,
    },
}

fn main() -> Result<()> {
    let root = workspace_root()?;
    match Xtask::parse().task {
        Task::Setup => setup::install_missing(),
        Task::Demo { scenario, duration } => {
            setup::install_missing()?;
            require_root("the demo builds network namespaces and loads eBPF programs")?;
            cargo(&root, &["build", "--release", "--package", "tboxscope"])?;
            let bin = root.join("target/release/tboxscope");
            run(Command::new(&bin).args(["lab", "run", &scenario, "--duration", &duration]))
        }
        Task::Test { fuzz_seconds } => {
            setup::install_missing()?;
            require_root("the tests load eBPF programs and build network namespaces")?;
            report_free_disk(&root);
            cargo(&root, &["fmt", "--all", "--", "--check"])?;
            cargo(
                &root,
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
            )?;
            // The root-only tests are `#[ignore = "needs root"]`, so a run as a plain user
            // lists them as ignored instead of passing them; here they run.
            cargo(
                &root,
                &[
                    "test",
                    "--workspace",
                    "--no-fail-fast",
                    "--",
                    "--include-ignored",
                ],
            )?;
            // The T-Box's build: its tests without kernel hooks and analyze's output, under qemu.
            cross::check_aarch64(&root)?;
            fuzz(&root, fuzz_seconds)
        }
        Task::TestAarch64 => {
            setup::install_missing()?;
            cross::check_aarch64(&root)
        }
        Task::Dist { targets } => {
            setup::install_missing()?;
            let archs: Vec<arch::Arch> = if targets.is_empty() {
                arch::ALL.to_vec()
            } else {
                targets
                    .iter()
                    .filter_map(|t| arch::Arch::from_triple(t))
                    .collect()
            };
            dist::dist(&root, &archs).map(drop)
        }
        Task::Bench {
            only:
                Some(BenchOnly::Soak {
                    minutes,
                    tcp,
                    ui,
                    callgrind,
                }),
        } => {
            require_root("the soak builds network namespaces")?;
            cargo(
                &root,
                &[
                    "build",
                    "--release",
                    "-p",
                    "tboxscope",
                    "--bin",
                    "tboxscope",
                    "--example",
                    "capture_soak",
                ],
            )?;
            let minutes = minutes.to_string();
            let bin = root.join("target/release/tboxscope");
            let mut cmd = Command::new(root.join("target/release/examples/capture_soak"));
            cmd.arg("--bin").arg(&bin).args(["--minutes", &minutes]);
            if tcp {
                cmd.arg("--tcp");
            }
            if ui {
                cmd.arg("--ui");
            }
            if callgrind {
                cmd.arg("--callgrind");
            }
            run(&mut cmd)
        }
        Task::Bench { only: None } => {
            setup::install_missing()?;
            require_root("the benchmarks load eBPF programs and build network namespaces")?;
            cargo(&root, &["bench", "--workspace"])?;
            // The engine's cost on top of decoding, on the decoder bench captures; then TCP
            // analysis of ~1 M segments against tshark's on the same file.
            cargo(
                &root,
                &[
                    "build",
                    "--release",
                    "-p",
                    "tboxscope",
                    "--bin",
                    "tboxscope",
                ],
            )?;
            // TCP: bulk transfer (full segments), then a control channel's 160-byte messages.
            for mode in [
                &["engine"][..],
                &["offline-tcp"],
                &["offline-tcp", "--segment-bytes", "160"],
            ] {
                let mut run = vec![
                    "run",
                    "--release",
                    "-p",
                    "tboxscope",
                    "--example",
                    "analyze_bench",
                    "--",
                ];
                run.extend_from_slice(mode);
                cargo(&root, &run)?;
            }
            Ok(())
        }
    }
}

/// Runs every cargo-fuzz target for a bounded time; any crash fails the run.
fn fuzz(root: &Path, seconds: u64) -> Result<()> {
    if seconds == 0 {
        println!("xtask: fuzzing skipped (--fuzz-seconds 0)");
        return Ok(());
    }
    let dir = root.join("fuzz/fuzz_targets");
    let mut targets: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".rs")
                .map(str::to_owned)
        })
        .collect();
    targets.sort();
    for target in &targets {
        println!("xtask: fuzzing `{target}` for {seconds} s");
        let max_time = format!("-max_total_time={seconds}");
        run(Command::new("cargo")
            .current_dir(root.join("fuzz"))
            .args(["+nightly", "fuzz", "run", target, "--", &max_time]))?;
    }
    println!(
        "xtask: fuzzing finished: {} targets, 0 crashes",
        targets.len()
    );
    Ok(())
}

/// What a full test run from a clean clone writes under `target/` and `fuzz/target/`, measured
/// (2026-12-04, fresh clone, peak 9.0 GB: 3.8 GB x86_64 tests, 2.2 GB aarch64 and 0.5 GB of
/// host builds for it, 0.9 GB fuzzing, 0.4 GB eBPF; 17 GB before test builds dropped full
/// debug info).
const TEST_RUN_DISK_GB: f64 = 9.0;

/// Prints the free space where the build goes, and warns when a full run may not fit: a full
/// disk otherwise shows up half an hour in, as a compiler error about some crate.
fn report_free_disk(root: &Path) {
    let Ok(out) = Command::new("df").args(["-Pk"]).arg(root).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let free_kb = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<f64>().ok());
    let Some(free_kb) = free_kb else { return };
    let free_gb = free_kb / 1e6;
    println!(
        "xtask: {free_gb:.1} GB free on the disk of {} (a full run from a clean clone writes about {TEST_RUN_DISK_GB} GB)",
        root.display()
    );
    if free_gb < TEST_RUN_DISK_GB {
        println!("xtask: warning: the run may stop on a full disk; `cargo clean` frees old builds");
    }
}

fn require_root(why: &str) -> Result<()> {
    if setup::is_root() {
        Ok(())
    } else {
        bail!("run this as root ({why}): sudo -E env PATH=\"$PATH\" cargo xtask ...")
    }
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    run(Command::new("cargo").current_dir(root).args(args))
}

/// Runs a command with inherited output; fails with its exit status.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}
