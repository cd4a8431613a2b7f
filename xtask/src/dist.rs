//! `cargo xtask dist`: release binaries of `tboxscope` for the T-Box (aarch64) and x86_64, each
//! packed as a tarball and a .deb in `target/dist/`.
//!
//! The binary links glibc and libpcap dynamically. A static libpcap was measured and left out:
//! Debian's `libpcap.a` carries the D-Bus capture source, so it still needs `libdbus-1.so.3`
//! (Debian ships no static libdbus) — one shared library traded for another.
//! The .deb's `Depends` come from `dpkg-shlibdeps` over the stripped binary, against the
//! target architecture's installed libc6 and libpcap0.8 (Debian multiarch).
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::run;

const UNIT: &str = "dist/tboxscope-capture.service";

/// What one target's build produced and needs on the box.
pub struct Built {
    /// The target.
    pub arch: Arch,
    /// Size of the stripped binary in bytes.
    pub stripped_bytes: u64,
    /// Highest `GLIBC_x.y` symbol version the binary asks for.
    pub glibc: String,
    /// The binary's `NEEDED` shared libraries.
    pub needed: Vec<String>,
    /// The .deb's `Depends`.
    pub depends: String,
    /// The tarball.
    pub tarball: PathBuf,
    /// The Debian package.
    pub deb: PathBuf,
}

/// Builds, strips and packs `tboxscope` for every target in `archs`.
pub fn dist(root: &Path, archs: &[Arch]) -> Result<Vec<Built>> {
    let dist = root.join("target/dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let mut built = Vec::new();
    for &arch in archs {
        println!("xtask dist: building tboxscope for {}", arch.triple);
        run(&mut arch.cargo(
            root,
            &[
                "build",
                "--release",
                "-p",
                "tboxscope",
                "--bin",
                "tboxscope",
            ],
        ))?;
        check_embedded_ebpf(root, arch)?;
        built.push(pack(root, &dist, arch)?);
    }
    println!("\nxtask dist: in {}", dist.display());
    for b in &built {
        println!(
            "  {:<26} stripped {:>9} bytes ({:.1} MiB); needs glibc >= {}; NEEDED {}",
            b.arch.triple,
            b.stripped_bytes,
            mib(b.stripped_bytes),
            b.glibc,
            b.needed.join(" ")
        );
        println!("  {:<26} {}", "", file_name(&b.tarball));
        println!(
            "  {:<26} {} (Depends: {})",
            "",
            file_name(&b.deb),
            b.depends
        );
    }
    Ok(built)
}

fn mib(bytes: u64) -> f64 {
    // Sizes are far below 2^52 bytes: exact in f64.
    #[expect(clippy::cast_precision_loss)]
    let b = bytes as f64;
    b / (1024.0 * 1024.0)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// The eBPF object is built once for the build machine (probe-user/build.rs) and embedded in
/// every target's binary: refuse a binary whose embedded object is missing or differs from it
/// (e.g. a build with `AYA_BUILD_SKIP=1`, which embeds an empty one).
fn check_embedded_ebpf(root: &Path, arch: Arch) -> Result<()> {
    let shared = root.join("target/ebpf/probe-ebpf");
    let object = std::fs::read(&shared).with_context(|| format!("reading {}", shared.display()))?;
    let build = arch.out_dir(root, "release").join("build");
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in
        std::fs::read_dir(&build).with_context(|| format!("listing {}", build.display()))?
    {
        let dir = entry?.path();
        let is_probe_user = dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("probe-user-"));
        let embedded = dir.join("out/probe-ebpf");
        if !is_probe_user {
            continue;
        }
        if let Ok(modified) = std::fs::metadata(&embedded).and_then(|m| m.modified()) {
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, embedded));
            }
        }
    }
    let Some((_, embedded)) = newest else {
        bail!("no embedded eBPF object under {}", build.display());
    };
    let bytes =
        std::fs::read(&embedded).with_context(|| format!("reading {}", embedded.display()))?;
    if bytes.is_empty() || bytes != object {
        bail!(
            "{} ({} bytes) is not the eBPF object {} ({} bytes): rebuild without AYA_BUILD_SKIP",
            embedded.display(),
            bytes.len(),
            shared.display(),
            object.len()
        );
    }
    println!(
        "xtask dist: {} embeds the eBPF object {} ({} bytes)",
        arch.triple,
        shared.display(),
        object.len()
    );
    Ok(())
}

/// Strips the release binary and packs the tarball and the .deb.
fn pack(root: &Path, dist: &Path, arch: Arch) -> Result<Built> {
    let release = arch.out_dir(root, "release").join("tboxscope");
    let version = version(arch, &release)?;
    let stem = format!("tboxscope-{version}-{}", arch.triple);

    // Tarball: tboxscope-VERSION-TRIPLE/{tboxscope, README.md, tboxscope.txt, unit}.
    let staging = dist.join(&stem);
    fresh_dir(&staging)?;
    let binary = staging.join("tboxscope");
    run(Command::new(arch.strip())
        .arg("--strip-all")
        .arg("-o")
        .arg(&binary)
        .arg(&release))?;
    let stripped_bytes = std::fs::metadata(&binary)?.len();
    let help = help_text(arch, &binary)?;
    std::fs::write(staging.join("tboxscope.txt"), &help)?;
    std::fs::copy(root.join("README.md"), staging.join("README.md"))?;
    let unit =
        std::fs::read_to_string(root.join(UNIT)).with_context(|| format!("reading {UNIT}"))?;
    std::fs::write(staging.join("tboxscope-capture.service"), &unit)?;
    let tarball = dist.join(format!("{stem}.tar.gz"));
    run(Command::new("tar")
        .arg("-C")
        .arg(dist)
        .args(["--owner=0", "--group=0", "--sort=name", "-czf"])
        .arg(&tarball)
        .arg(&stem))?;

    let (glibc, needed) = elf_needs(&binary)?;

    // Debian package: /usr/bin/tboxscope, the docs, the unit (not enabled: the interfaces and
    // the key log are the box's own).
    let work = dist.join(format!("deb-{}", arch.deb));
    fresh_dir(&work)?;
    let pkg = work.join("debian/tboxscope");
    let docs = pkg.join("usr/share/doc/tboxscope");
    std::fs::create_dir_all(&docs)?;
    std::fs::create_dir_all(pkg.join("usr/bin"))?;
    std::fs::create_dir_all(pkg.join("lib/systemd/system"))?;
    std::fs::copy(&binary, pkg.join("usr/bin/tboxscope"))?;
    std::fs::copy(root.join("README.md"), docs.join("README.md"))?;
    std::fs::write(docs.join("tboxscope.txt"), &help)?;
    std::fs::write(
        docs.join("copyright"),
        "tboxscope\nLicense: MIT OR Apache-2.0\n",
    )?;
    std::fs::write(
        pkg.join("lib/systemd/system/tboxscope-capture.service"),
        unit.replace("/usr/local/bin/tboxscope", "/usr/bin/tboxscope"),
    )?;
    std::fs::write(
        work.join("debian/control"),
        "Source: tboxscope\n\nPackage: tboxscope\nArchitecture: any\n",
    )?;
    let depends = shlib_depends(&work)?;
    let installed_kib = dir_bytes(&pkg)?.div_ceil(1024);
    let description = "See TCP, KCP and multipath QUIC on two-path T-Box control links\n \
        eBPF TCP probes and libpcap capture of the 4G/5G paths, a terminal UI, headless\n \
        capture to JSON Lines and pcapng (systemd unit included, not enabled), and\n \
        offline analysis of pcap/pcapng files.";
    let control = format!(
        "Package: tboxscope\nVersion: {version}\nArchitecture: {}\nMaintainer: tboxscope developers <tboxscope@localhost>\nInstalled-Size: {installed_kib}\nDepends: {depends}\nSection: net\nPriority: optional\nDescription: {description}\n",
        arch.deb
    );
    std::fs::create_dir_all(pkg.join("DEBIAN"))?;
    std::fs::write(pkg.join("DEBIAN/control"), control)?;
    let deb = dist.join(format!("tboxscope_{version}_{}.deb", arch.deb));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&pkg)
        .arg(&deb))?;
    Ok(Built {
        arch,
        stripped_bytes,
        glibc,
        needed,
        depends,
        tarball,
        deb,
    })
}

fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Standard output of a command that must succeed.
fn stdout_of(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("{cmd:?} wrote non-UTF-8"))
}

/// `tboxscope --version`'s version, from the binary itself (under qemu for aarch64: the
/// first sign that the cross-built binary starts).
fn version(arch: Arch, binary: &Path) -> Result<String> {
    let out = stdout_of(arch.run(binary).arg("--version"))?;
    out.split_whitespace()
        .nth(1)
        .map(str::to_owned)
        .with_context(|| format!("no version in `tboxscope --version`: {out:?}"))
}

/// `tboxscope --help` and every subcommand's `--help` (two levels: `lab up`, …), one after the
/// other: the manual shipped beside the binary.
fn help_text(arch: Arch, binary: &Path) -> Result<String> {
    let mut text = String::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(words) = queue.pop() {
        let mut cmd = arch.run(binary);
        cmd.args(&words).arg("--help");
        let help = stdout_of(&mut cmd)?;
        let title = std::iter::once("tboxscope")
            .chain(words.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            text,
            "{title} --help\n{}\n{help}",
            "=".repeat(title.len() + 7)
        );
        if words.len() < 2 {
            let mut subs = subcommands(&help);
            subs.reverse();
            for sub in subs {
                let mut next = words.clone();
                next.push(sub);
                queue.push(next);
            }
        }
    }
    Ok(text)
}

/// The names in clap's `Commands:` section, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The highest `GLIBC_` version the binary needs and its `NEEDED` libraries (readelf reads
/// either architecture).
fn elf_needs(binary: &Path) -> Result<(String, Vec<String>)> {
    let versions = stdout_of(Command::new("readelf").arg("-V").arg("-W").arg(binary))?;
    let glibc = versions
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let parts: Option<Vec<u32>> = v.split('.').map(|p| p.parse().ok()).collect();
            parts.map(|p| (p, v.to_owned()))
        })
        .max()
        .map(|(_, v)| v)
        .context("the binary names no GLIBC_ version")?;
    let dynamic = stdout_of(Command::new("readelf").arg("-d").arg("-W").arg(binary))?;
    let needed = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| {
            let start = l.find('[')? + 1;
            let end = l.rfind(']')?;
            l.get(start..end).map(str::to_owned)
        })
        .collect();
    Ok((glibc, needed))
}

/// `dpkg-shlibdeps` over the package's binary: `libc6 (>= …), libpcap0.8 (>= …)` from the
/// symbols files of the target architecture's installed libraries.
fn shlib_depends(work: &Path) -> Result<String> {
    let out = stdout_of(
        Command::new("dpkg-shlibdeps")
            .current_dir(work)
            .args(["-O", "debian/tboxscope/usr/bin/tboxscope"]),
    )?;
    out.lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .map(|d| d.trim().to_owned())
        .context("dpkg-shlibdeps gave no shlibs:Depends")
}
