//! The aarch64 (T-Box) build checked on this x86_64 machine under qemu-user: the tests that need
//! no kernel hooks, and `tboxscope analyze` giving the same JSON Lines on both architectures
//! for every shared fixture. eBPF on arm64 cannot be checked here (qemu-user has no kernel).
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::arch::{Arch, AARCH64, X86_64};
use crate::run;

/// The tui integration tests that run in-process (no root, no kernel hooks): replay of JSON
/// Lines and of packet captures, and the whole-screen snapshots.
const TUI_TESTS: &[&str] = &["ui_screens", "replay_pcap", "replay_capture_json"];

/// Tests of those files that start the `tboxscope` binary: under qemu-user, without binfmt_misc,
/// an aarch64 test cannot exec another aarch64 binary. `analyze` is compared below instead.
const SPAWNING_TESTS: &[&str] =
    &["a_statement_about_an_unknown_capture_is_refused_before_the_ui_starts"];

/// Runs the aarch64 checks; fails on a failed test or on any difference in analyze's output.
pub fn check_aarch64(root: &Path) -> Result<()> {
    let started = Instant::now();
    let arch = AARCH64;
    println!("xtask: aarch64 under qemu-user: decode and engine tests");
    run(&mut arch.cargo(
        root,
        &[
            "test",
            "--no-fail-fast",
            "-p",
            "tboxscope-decode",
            "-p",
            "tboxscope-engine",
        ],
    ))?;
    println!("xtask: aarch64 under qemu-user: replay and screen tests");
    let mut args = vec!["test", "--no-fail-fast", "-p", "tboxscope"];
    for t in TUI_TESTS {
        args.extend(["--test", t]);
    }
    args.push("--");
    for t in SPAWNING_TESTS {
        args.extend(["--skip", t]);
    }
    run(&mut arch.cargo(root, &args))?;
    let build = ["build", "-p", "tboxscope", "--bin", "tboxscope"];
    run(&mut arch.cargo(root, &build))?;
    run(&mut X86_64.cargo(root, &build))?;
    let compared = compare_analyze(root)?;
    println!(
        "xtask: aarch64 checks passed in {:.0} s ({compared} analyze runs identical on x86_64 and aarch64)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `analyze --json -` (with and without `--packets`) of every fixture, and of each fixture with
/// embedded TLS secrets once more from a copy without them plus the secrets as a `--keylog`
/// file: the same bytes on both architectures (the header's `ts`, the time of the run, aside).
fn compare_analyze(root: &Path) -> Result<usize> {
    let fixtures_dir = root.join("../shared/fixtures");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&fixtures_dir)
        .with_context(|| format!("listing {}", fixtures_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    fixtures.sort();
    if fixtures.is_empty() {
        bail!("no .pcap/.pcapng fixtures in {}", fixtures_dir.display());
    }
    let scratch = root.join("target/cross-check");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)?;
    }
    std::fs::create_dir_all(&scratch)?;
    let mut runs: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
    for f in &fixtures {
        runs.push((f.clone(), None));
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let (secrets, bare_bytes) = split_tls_secrets(&bytes)
            .with_context(|| format!("reading the secrets blocks of {}", f.display()))?;
        if secrets.is_empty() {
            continue;
        }
        let stem = f
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let keylog = scratch.join(format!("{stem}.keys"));
        std::fs::write(&keylog, &secrets)?;
        let bare = scratch.join(format!("{stem}-no-secrets.pcapng"));
        std::fs::write(&bare, bare_bytes)?;
        runs.push((bare, Some(keylog)));
    }
    let host_bin = X86_64.out_dir(root, "debug").join("tboxscope");
    let arm_bin = AARCH64.out_dir(root, "debug").join("tboxscope");
    let mut compared = 0;
    for (file, keylog) in &runs {
        for packets in [true, false] {
            let mut args: Vec<String> = vec!["analyze".into(), "--json".into(), "-".into()];
            if packets {
                args.push("--packets".into());
            }
            if let Some(k) = keylog {
                args.push("--keylog".into());
                args.push(k.to_string_lossy().into_owned());
            }
            args.push(file.to_string_lossy().into_owned());
            let host = analyze(X86_64, &host_bin, &args)?;
            let arm = analyze(AARCH64, &arm_bin, &args)?;
            if let Some(diff) = first_difference(&host, &arm) {
                bail!(
                    "tboxscope {} differs between x86_64 and aarch64: {diff}",
                    args.join(" ")
                );
            }
            println!(
                "xtask: identical on x86_64 and aarch64: tboxscope {} ({} lines)",
                args.join(" "),
                host.stdout.lines().count()
            );
            compared += 1;
        }
    }
    if !runs.iter().any(|(_, keylog)| keylog.is_some()) {
        bail!("no fixture with embedded TLS secrets: no --keylog run was compared");
    }
    Ok(compared)
}

struct Analyzed {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

fn analyze(arch: Arch, binary: &Path, args: &[String]) -> Result<Analyzed> {
    let mut cmd = arch.run(binary);
    cmd.args(args);
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    let stdout = String::from_utf8(out.stdout).with_context(|| format!("{cmd:?}: non-UTF-8"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{cmd:?} failed: {}: {stderr}", out.status);
    }
    if !stdout.starts_with("{\"type\":\"header\"") {
        bail!("{cmd:?}: the output does not start with the header line");
    }
    Ok(Analyzed {
        status: out.status.code(),
        stdout,
        stderr,
    })
}

/// The first difference between two runs' exit status, standard error and JSON lines, the
/// header's `ts` blanked; `None` when they are the same.
fn first_difference(a: &Analyzed, b: &Analyzed) -> Option<String> {
    if a.status != b.status {
        return Some(format!("exit status {:?} vs {:?}", a.status, b.status));
    }
    if a.stderr != b.stderr {
        return Some(format!("standard error {:?} vs {:?}", a.stderr, b.stderr));
    }
    let mut la = a.stdout.split_inclusive('\n');
    let mut lb = b.stdout.split_inclusive('\n');
    let mut n = 0;
    loop {
        n += 1;
        match (la.next(), lb.next()) {
            (None, None) => return None,
            (Some(x), Some(y)) => {
                let (x, y) = if n == 1 {
                    (without_ts(x), without_ts(y))
                } else {
                    (x.to_owned(), y.to_owned())
                };
                if x != y {
                    return Some(format!("line {n}:\n  x86_64:  {x}  aarch64: {y}"));
                }
            }
            (x, y) => return Some(format!("line {n}: {x:?} vs {y:?}")),
        }
    }
}

/// The header line with its `"ts"` value (the time of the run) emptied.
fn without_ts(line: &str) -> String {
    const KEY: &str = "\"ts\":\"";
    let Some(start) = line.find(KEY).map(|i| i + KEY.len()) else {
        return line.to_owned();
    };
    match line.get(start..).and_then(|rest| rest.find('"')) {
        Some(len) => format!("{}{}", &line[..start], &line[start + len..]),
        None => line.to_owned(),
    }
}

/// The TLS key log lines of a pcapng file's Decryption Secrets Blocks (empty for a pcap or a
/// pcapng without them), and the file without those blocks (editcap 4.0's
/// `--discard-all-secrets` refuses these fixtures).
fn split_tls_secrets(bytes: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    const SHB: u32 = 0x0A0D_0D0A;
    const DSB: u32 = 0x0000_000A;
    const TLS_KEY_LOG: u32 = 0x544C_534B;
    let mut secrets = Vec::new();
    let mut big_endian = false;
    let mut at = 0usize;
    let word = |at: usize, big: bool| -> Result<u32> {
        let b: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .with_context(|| format!("truncated at byte {at}"))?;
        Ok(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    if word(0, false).ok() != Some(SHB) {
        return Ok((secrets, bytes.to_vec()));
    }
    let mut rest = Vec::with_capacity(bytes.len());
    while at < bytes.len() {
        if word(at, false)? == SHB {
            // Byte-order magic 0x1A2B3C4D, read little-endian.
            big_endian = word(at + 8, false)? != 0x1A2B_3C4D;
        }
        let kind = word(at, big_endian)?;
        let len = usize::try_from(word(at + 4, big_endian)?)?;
        if len < 12 || len % 4 != 0 {
            bail!("block of length {len} at byte {at}");
        }
        let block = bytes
            .get(at..at + len)
            .with_context(|| format!("block at byte {at} overruns the file"))?;
        if kind == DSB && word(at + 8, big_endian)? == TLS_KEY_LOG {
            let data_len = usize::try_from(word(at + 12, big_endian)?)?;
            let data = block
                .get(16..16 + data_len)
                .with_context(|| format!("secrets block at byte {at} overruns it"))?;
            secrets.extend_from_slice(data);
            if !secrets.ends_with(b"\n") {
                secrets.push(b'\n');
            }
        } else {
            rest.extend_from_slice(block);
        }
        at += len;
    }
    Ok((secrets, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_ts_is_blanked_and_nothing_else() {
        assert_eq!(
            without_ts("{\"type\":\"header\",\"ts\":\"2026-12-02T09:00:00.1Z\",\"a\":1}\n"),
            "{\"type\":\"header\",\"ts\":\"\",\"a\":1}\n"
        );
        assert_eq!(without_ts("{\"a\":1}"), "{\"a\":1}");
    }

    #[test]
    fn a_difference_names_its_line() {
        let run = |s: &str| Analyzed {
            status: Some(0),
            stdout: s.to_owned(),
            stderr: String::new(),
        };
        let a = run("{\"type\":\"header\",\"ts\":\"1\"}\n{\"x\":1}\n");
        let b = run("{\"type\":\"header\",\"ts\":\"2\"}\n{\"x\":1}\n");
        assert_eq!(first_difference(&a, &b), None);
        let c = run("{\"type\":\"header\",\"ts\":\"2\"}\n{\"x\":2}\n");
        assert!(first_difference(&a, &c).is_some_and(|d| d.starts_with("line 2")));
        let d = run("{\"type\":\"header\",\"ts\":\"2\"}\n");
        assert!(first_difference(&a, &d).is_some_and(|d| d.starts_with("line 2")));
    }

    #[test]
    fn secrets_blocks_are_split_off_and_a_pcap_has_none() {
        let mut f = Vec::new();
        // SHB (28 bytes, little-endian).
        f.extend_from_slice(&0x0A0D_0D0Au32.to_le_bytes());
        f.extend_from_slice(&28u32.to_le_bytes());
        f.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        f.extend_from_slice(&[1, 0, 0, 0]);
        f.extend_from_slice(&u64::MAX.to_le_bytes());
        f.extend_from_slice(&28u32.to_le_bytes());
        // DSB with 6 bytes of key log, padded to 8.
        f.extend_from_slice(&0x0Au32.to_le_bytes());
        f.extend_from_slice(&28u32.to_le_bytes());
        f.extend_from_slice(&0x544C_534Bu32.to_le_bytes());
        f.extend_from_slice(&6u32.to_le_bytes());
        f.extend_from_slice(b"A b c\n\0\0");
        f.extend_from_slice(&28u32.to_le_bytes());
        let shb = f[..28].to_vec();
        assert_eq!(split_tls_secrets(&f).ok(), Some((b"A b c\n".to_vec(), shb)));
        let pcap = [0xd4, 0xc3, 0xb2, 0xa1];
        assert_eq!(
            split_tls_secrets(&pcap).ok(),
            Some((Vec::new(), pcap.to_vec()))
        );
        f.truncate(40);
        assert!(split_tls_secrets(&f).is_err());
    }
}
