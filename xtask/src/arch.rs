//! The targets tboxscope ships for (the T-Box's aarch64 and the x86_64 build machine), and how
//! to build and run each from this x86_64 Debian machine: natively, or cross-linked against
//! Debian's arm64 libraries and run under qemu-user.
use std::path::{Path, PathBuf};
use std::process::Command;

/// One userspace target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// Rust target triple.
    pub triple: &'static str,
    /// Debian architecture name (the .deb's `Architecture`).
    pub deb: &'static str,
    /// GNU triplet: Debian's multiarch library directory and the cross tools' prefix.
    pub gnu: &'static str,
    /// `std::env::consts::ARCH` of a machine of this architecture.
    pub arch: &'static str,
}

/// The build machine's and CI's architecture.
pub const X86_64: Arch = Arch {
    triple: "x86_64-unknown-linux-gnu",
    deb: "amd64",
    gnu: "x86_64-linux-gnu",
    arch: "x86_64",
};

/// The T-Box's architecture.
pub const AARCH64: Arch = Arch {
    triple: "aarch64-unknown-linux-gnu",
    deb: "arm64",
    gnu: "aarch64-linux-gnu",
    arch: "aarch64",
};

/// Every target `cargo xtask dist` builds by default.
pub const ALL: [Arch; 2] = [X86_64, AARCH64];

impl Arch {
    /// The target named by its Rust triple.
    pub fn from_triple(triple: &str) -> Option<Arch> {
        ALL.into_iter().find(|a| a.triple == triple)
    }

    /// Whether this is the machine's own architecture (built without `--target`, run directly).
    pub fn is_host(self) -> bool {
        self.arch == std::env::consts::ARCH
    }

    /// `cargo ARGS` for this target: `--target` and the pkg-config/libpcap variables of a cross
    /// build (Debian's multiarch libpcap), nothing extra for the host.
    pub fn cargo(self, root: &Path, args: &[&str]) -> Command {
        // `--target` goes before a `--` that starts the test binaries' arguments.
        let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
        let (cargo_args, rest) = args.split_at(split);
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root).args(cargo_args);
        if !self.is_host() {
            let libdir = format!("/usr/lib/{}", self.gnu);
            cmd.args(["--target", self.triple])
                .env("PKG_CONFIG_ALLOW_CROSS", "1")
                .env("PKG_CONFIG_PATH", format!("{libdir}/pkgconfig"))
                .env("LIBPCAP_LIBDIR", libdir);
        }
        cmd.args(rest);
        cmd
    }

    /// Where cargo leaves this target's `profile` (`debug`, `release`) artifacts.
    pub fn out_dir(self, root: &Path, profile: &str) -> PathBuf {
        let target = root.join("target");
        if self.is_host() {
            target.join(profile)
        } else {
            target.join(self.triple).join(profile)
        }
    }

    /// A command that runs `binary` (of this architecture): directly on the host, under
    /// qemu-user otherwise. Its dynamic loader and libraries are Debian's multiarch ones
    /// (libc6:arm64), so no `-L` prefix: `-L /usr/aarch64-linux-gnu` pairs the cross package's
    /// loader (libc6-arm64-cross 2.36-8cross1) with libc6:arm64's libc.so.6 (2.36-9+deb12u14),
    /// and every libtest test hung that way here.
    pub fn run(self, binary: &Path) -> Command {
        if self.is_host() {
            Command::new(binary)
        } else {
            let mut cmd = Command::new(format!("qemu-{}-static", self.arch));
            cmd.arg(binary);
            cmd
        }
    }

    /// binutils' `strip` for this architecture.
    pub fn strip(self) -> String {
        if self.is_host() {
            "strip".to_owned()
        } else {
            format!("{}-strip", self.gnu)
        }
    }
}
