//! The destinations of `capture` (JSON Lines, pcapng): whole lines or blocks only, whatever
//! stops the run. Lines
//! are collected in memory and written to the file at least once per second
//! ([`LineOut::flush`] by the caller) or when 64 KiB wait; a write that fails half-way (full
//! disk) is cut back to the last whole line, and from then on nothing more is written: the
//! lines that could not be written are counted instead.
use std::fs::File;
use std::io::{self, Write};

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
        }
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
