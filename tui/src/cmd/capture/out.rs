//! The destinations of `capture` (JSON Lines, pcapng): whole lines or blocks only, whatever
//! stops the run. Lines are collected in memory and written to the file at least once per
//! second ([`LineOut::flush`] by the caller) or when 64 KiB wait; a write that fails half-way
//! (full disk) is cut back to the last whole line, and from then on nothing more is written:
//! the lines that could not be written are counted instead. With a [`Rotation`], the file is
//! renamed `STEM.N.EXT` when it is big or old enough and a new one started with the same
//! preamble (the JSON header line; the pcapng section header and key log), keeping a bounded
//! number of renamed files.
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// When a file is closed and a new one started, and how many closed ones are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// At this size (bytes).
    pub max_bytes: Option<u64>,
    /// At this age.
    pub max_age: Option<Duration>,
    /// Closed files kept (the oldest deleted beyond this).
    pub keep: usize,
}

impl Rotation {
    /// Parses `100MB`, `1h`, or both comma-separated (`100MB,1h`); sizes in B, kB, MB, GB
    /// (powers of 1000), KiB, MiB, GiB; ages as `--duration`.
    pub fn parse(spec: &str, keep: usize) -> anyhow::Result<Self> {
        let mut r = Rotation {
            max_bytes: None,
            max_age: None,
            keep,
        };
        for part in spec.split(',').map(str::trim) {
            let split = part
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(part.len());
            let (num, unit) = part.split_at(split);
            let scale: Option<f64> = match unit.to_ascii_lowercase().as_str() {
                "b" => Some(1.0),
                "kb" => Some(1e3),
                "mb" => Some(1e6),
                "gb" => Some(1e9),
                "kib" => Some(1024.0),
                "mib" => Some(1024.0 * 1024.0),
                "gib" => Some(1024.0 * 1024.0 * 1024.0),
                _ => None,
            };
            match scale {
                Some(scale) => {
                    let n: f64 = num
                        .parse()
                        .map_err(|_| anyhow::anyhow!("bad --rotate size {part:?}"))?;
                    let bytes = n * scale;
                    if !(4000.0..1e15).contains(&bytes) {
                        anyhow::bail!("--rotate size {part:?} out of range (4 kB or more)");
                    }
                    r.max_bytes = Some(bytes as u64);
                }
                None => r.max_age = Some(super::parse_duration(part)?),
            }
        }
        Ok(r)
    }
}

/// `STEM.N.EXT` beside `path` for the first `N` from `next` on that names no file (never over
/// an earlier run's file); `next` moves past it.
fn free_name(path: &Path, next: &mut u64) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    loop {
        let name = path.with_file_name(format!("{stem}.{next}{ext}"));
        *next += 1;
        if !name.exists() {
            return name;
        }
    }
}

/// Creates `path` for writing. When rotating, a non-empty file already there (an earlier run
/// of a restarted service) is first renamed `STEM.N.EXT` rather than overwritten.
pub fn create(path: &Path, rotation: Option<Rotation>) -> io::Result<File> {
    if rotation.is_some() && std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        std::fs::rename(path, free_name(path, &mut 1))?;
    }
    File::create(path)
}

/// A file being rotated: its path, policy and the closed files kept.
struct Rotating {
    path: PathBuf,
    rotation: Rotation,
    opened: Instant,
    closed: VecDeque<PathBuf>,
    next: u64,
}

/// Bytes collected before they are written without waiting for the next flush.
const WRITE_AT: usize = 1 << 16;

/// Where the lines go.
enum Target {
    /// A regular file (cut back to its last whole line after a failed write).
    File(File),
    /// Standard output.
    Stdout(io::Stdout),
}

/// A line-buffered destination that never leaves half a line behind.
pub struct LineOut {
    target: Target,
    buf: Vec<u8>,
    /// Bytes written to the destination (all whole lines).
    written_bytes: u64,
    /// Lines written to the destination.
    written: u64,
    /// Lines given but not written (after the failure).
    lost: u64,
    /// Lines (units) collected in `buf`.
    pending: u64,
    /// The write that failed, if one did.
    failure: Option<io::Error>,
    /// Units written at the start of every file (after a rotation too).
    preamble: Vec<u8>,
    preamble_units: u64,
    rotating: Option<Rotating>,
}

impl LineOut {
    /// Writes to `file` (opened for writing, empty).
    pub fn file(file: File) -> Self {
        Self::new(Target::File(file))
    }

    /// Writes to standard output.
    pub fn stdout() -> Self {
        Self::new(Target::Stdout(io::stdout()))
    }

    fn new(target: Target) -> Self {
        Self {
            target,
            buf: Vec::with_capacity(WRITE_AT * 2),
            written_bytes: 0,
            written: 0,
            lost: 0,
            pending: 0,
            failure: None,
            preamble: Vec::new(),
            preamble_units: 0,
            rotating: None,
        }
    }

    /// Rotates the file at `path` (the one [`LineOut::file`] writes) as `rotation` says.
    pub fn rotate_as(&mut self, path: &Path, rotation: Rotation) {
        self.rotating = Some(Rotating {
            path: path.to_path_buf(),
            rotation,
            opened: Instant::now(),
            closed: VecDeque::new(),
            next: 1,
        });
    }

    /// Makes what was pushed and not written yet (the header line) the start of every new file.
    pub fn keep_pending_as_preamble(&mut self) {
        self.preamble = self.buf.clone();
        self.preamble_units = self.pending;
    }

    /// Adds `bytes` (`units` whole units) to what every new file starts with; they are not
    /// written now (push them too).
    pub fn add_preamble(&mut self, bytes: &[u8], units: u64) {
        self.preamble.extend_from_slice(bytes);
        self.preamble_units += units;
    }

    /// Closes the file and starts a new one when it is big or old enough; true when it did.
    /// A failure to rename or create is kept as the output's failure.
    pub fn rotate_if_due(&mut self) -> bool {
        let Some(r) = self.rotating.as_ref() else {
            return false;
        };
        let size = self.written_bytes + self.buf.len() as u64;
        let due = r.rotation.max_bytes.is_some_and(|m| size >= m)
            || r.rotation.max_age.is_some_and(|a| r.opened.elapsed() >= a);
        if !due || self.failure.is_some() {
            return false;
        }
        self.write_out();
        if self.failure.is_some() {
            return false;
        }
        match self.start_next() {
            Ok(()) => true,
            Err(e) => {
                self.failure = Some(e);
                false
            }
        }
    }

    fn start_next(&mut self) -> io::Result<()> {
        let Some(r) = self.rotating.as_mut() else {
            return Ok(());
        };
        let closed = free_name(&r.path, &mut r.next);
        std::fs::rename(&r.path, &closed)?;
        r.closed.push_back(closed);
        while r.closed.len() > r.rotation.keep {
            if let Some(old) = r.closed.pop_front() {
                // Already gone (removed by hand) is fine.
                let _ = std::fs::remove_file(old);
            }
        }
        let file = File::create(&r.path)?;
        r.opened = Instant::now();
        self.target = Target::File(file);
        self.written_bytes = 0;
        let preamble = std::mem::take(&mut self.preamble);
        self.push(&preamble, self.preamble_units);
        self.preamble = preamble;
        Ok(())
    }

    /// The write that failed, if one did (nothing is written after it).
    pub fn failure(&self) -> Option<&io::Error> {
        self.failure.as_ref()
    }

    /// Lines written to the destination.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Lines not written because a write failed.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Takes `bytes` holding `units` whole units (lines, pcapng blocks): collected, written
    /// when 64 KiB wait; counted as lost after a failure.
    pub fn push(&mut self, bytes: &[u8], units: u64) {
        if self.failure.is_some() {
            self.lost += units;
            return;
        }
        self.buf.extend_from_slice(bytes);
        self.pending += units;
        if self.buf.len() >= WRITE_AT {
            self.write_out();
        }
    }

    /// Writes what was collected; on failure, cuts the file back to its last whole unit,
    /// counts the collected units as lost and keeps the error.
    pub fn write_out(&mut self) {
        if self.buf.is_empty() || self.failure.is_some() {
            return;
        }
        let lines = std::mem::take(&mut self.pending);
        let result = match &mut self.target {
            Target::File(f) => f.write_all(&self.buf),
            Target::Stdout(s) => s.write_all(&self.buf).and_then(|()| s.flush()),
        };
        match result {
            Ok(()) => {
                self.written_bytes += self.buf.len() as u64;
                self.written += lines;
            }
            Err(e) => {
                if let Target::File(f) = &mut self.target {
                    // A short write left part of a line: cut it off. If even that fails, the
                    // error already said what is wrong with the destination.
                    let _ = f.set_len(self.written_bytes);
                }
                self.lost += lines;
                self.failure = Some(e);
            }
        }
        self.buf.clear();
    }
}

impl Write for LineOut {
    /// Takes one whole line (the JSON Lines writer hands each line in one call).
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let lines = line.iter().filter(|b| **b == b'\n').count() as u64;
        self.push(line, lines);
        Ok(line.len())
    }

    /// Writes the collected lines; never fails (see [`LineOut::failure`]).
    fn flush(&mut self) -> io::Result<()> {
        self.write_out();
        Ok(())
    }
}

impl Drop for LineOut {
    fn drop(&mut self) {
        self.write_out();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_leaves_whole_lines_and_counts_the_rest() {
        // /dev/full: every write fails with ENOSPC.
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return;
        };
        let mut out = LineOut::file(full);
        out.write_all(b"{\"a\":1}\n").unwrap();
        out.write_all(b"{\"a\":2}\n").unwrap();
        out.flush().unwrap();
        assert_eq!(out.written(), 0);
        assert_eq!(out.lost(), 2);
        assert_eq!(
            out.failure().and_then(io::Error::raw_os_error),
            Some(libc::ENOSPC)
        );
        out.write_all(b"{\"a\":3}\n").unwrap();
        assert_eq!(out.lost(), 3);
    }

    #[test]
    fn rotation_starts_new_files_with_the_preamble_and_keeps_a_few() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let r = Rotation::parse("4kB", 2).unwrap();
        assert_eq!(r.max_bytes, Some(4000));
        let mut out = LineOut::file(File::create(&path).unwrap());
        out.rotate_as(&path, r);
        out.write_all(b"{\"type\":\"header\"}\n").unwrap();
        out.keep_pending_as_preamble();
        let line = format!("{{\"x\":\"{}\"}}\n", "a".repeat(990));
        let mut rotations = 0;
        for _ in 0..20 {
            out.write_all(line.as_bytes()).unwrap();
            rotations += u32::from(out.rotate_if_due());
        }
        out.flush().unwrap();
        assert_eq!(rotations, 5, "20 lines of 1 kB, 4 kB per file");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["out.4.jsonl", "out.5.jsonl", "out.jsonl"]);
        for n in &names {
            let text = std::fs::read_to_string(dir.path().join(n)).unwrap();
            assert!(text.starts_with("{\"type\":\"header\"}\n"), "{n}");
            assert!(text.ends_with("}\n"), "{n}");
        }
        // A restart keeps the file it finds (renamed past the existing numbers).
        drop(out);
        drop(create(&path, Some(r)).unwrap());
        assert!(dir.path().join("out.1.jsonl").exists());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert!(Rotation::parse("1h", 3).unwrap().max_age == Some(Duration::from_secs(3600)));
        assert!(Rotation::parse("12 parsecs", 3).is_err());
        assert!(Rotation::parse("10B", 3).is_err());
    }

    #[test]
    fn lines_reach_the_file_on_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let mut out = LineOut::file(File::create(&path).unwrap());
        out.write_all(b"{}\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        out.flush().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
        assert_eq!(out.written(), 1);
    }
}
