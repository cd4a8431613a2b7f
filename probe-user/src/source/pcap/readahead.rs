//! Reading a file ahead on a second thread: the kernel's copy out of the page cache (or the
//! disk wait) overlaps with decoding, chunks are handed over without a copy, and memory stays
//! bounded by a few fixed chunks.
use std::fs::File;
use std::io::{self, Read};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

/// File bytes per chunk: small enough that a chunk stays in a core's L2 cache while it is
/// decoded.
pub const CHUNK: usize = 256 << 10;
/// Free bytes in front of each chunk's data, where the consumer puts the unread tail of the
/// previous chunk (a record split between two chunks) so that the record is contiguous.
pub const HEADROOM: usize = 64 << 10;
/// Chunks in circulation (being filled, filled and waiting, being consumed): the memory bound is
/// `CHUNKS * (HEADROOM + CHUNK)`.
pub const CHUNKS: usize = 4;

/// A file read ahead by a background thread into a ring of [`CHUNKS`] chunks. Each chunk
/// holds up to [`CHUNK`] file bytes starting at index [`HEADROOM`]. Read errors reach the caller
/// after the bytes read before them; dropping the reader stops the thread.
pub struct ReadAhead {
    filled: Receiver<io::Result<Vec<u8>>>,
    empty: Sender<Vec<u8>>,
    done: bool,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts reading `file` from its current position on a new thread.
    pub fn new(file: File) -> io::Result<Self> {
        let (filled_tx, filled) = crossbeam_channel::bounded(CHUNKS);
        let (empty, empty_rx) = crossbeam_channel::bounded(CHUNKS);
        for _ in 0..CHUNKS {
            // Cannot fail: the channel has room for all of them and the receiver is alive.
            let _ = empty.send(Vec::with_capacity(HEADROOM + CHUNK));
        }
        let thread = std::thread::Builder::new()
            .name("pcap-readahead".to_owned())
            .spawn(move || fill_chunks(file, &filled_tx, &empty_rx))?;
        Ok(Self {
            filled,
            empty,
            done: false,
            thread: Some(thread),
        })
    }

    /// The next chunk (file bytes at `[HEADROOM..]`), `None` at the end of the file. Waits for
    /// the thread if it has not filled one yet.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        match self.filled.recv() {
            Ok(Ok(chunk)) if chunk.len() > HEADROOM => Ok(Some(chunk)),
            Ok(Ok(_)) => {
                self.done = true;
                Ok(None)
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(_) => {
                self.done = true;
                Err(io::Error::other("read-ahead thread ended"))
            }
        }
    }

    /// Gives a consumed chunk (or any buffer) back for reuse.
    pub fn recycle(&mut self, chunk: Vec<u8>) {
        // After the end of the file the thread is gone and the buffer is simply dropped.
        let _ = self.empty.try_send(chunk);
    }
}

/// The thread: fills empty chunks until the end of the file, an error, or the reader is gone.
fn fill_chunks(mut file: File, filled: &Sender<io::Result<Vec<u8>>>, empty: &Receiver<Vec<u8>>) {
    while let Ok(mut chunk) = empty.recv() {
        chunk.resize(HEADROOM + CHUNK, 0);
        let mut len = HEADROOM;
        let result = loop {
            match file.read(&mut chunk[len..]) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    len += k;
                    if len == chunk.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let end = len < chunk.len();
        chunk.truncate(len);
        // Bytes read before an error or the end are delivered first.
        if len > HEADROOM && filled.send(Ok(chunk)).is_err() {
            return;
        }
        match result {
            Err(e) => {
                let _ = filled.send(Err(e));
                return;
            }
            // A short chunk is the end of the file; an empty one tells the reader so.
            Ok(()) if end => {
                let _ = filled.send(Ok(Vec::new()));
                return;
            }
            Ok(()) => {}
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Unblock the thread: with the channels' other ends gone its next send or recv fails.
        let (_, dead) = crossbeam_channel::bounded(0);
        self.filled = dead;
        let (alive, _) = crossbeam_channel::bounded(0);
        self.empty = alive;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn chunks_hold_the_file_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17] {
            let path = dir.path().join(format!("f{len}"));
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            std::fs::File::create(&path)
                .unwrap()
                .write_all(&data)
                .unwrap();
            let mut r = ReadAhead::new(File::open(&path).unwrap()).unwrap();
            let mut got = Vec::new();
            while let Some(chunk) = r.next_chunk().unwrap() {
                got.extend_from_slice(&chunk[HEADROOM..]);
                r.recycle(chunk);
            }
            assert_eq!(got, data, "len {len}");
            assert!(r.next_chunk().unwrap().is_none());
        }
    }

    #[test]
    fn dropping_early_stops_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![1u8; 20 * CHUNK]).unwrap();
        let mut r = ReadAhead::new(File::open(&path).unwrap()).unwrap();
        assert!(r.next_chunk().unwrap().is_some());
        drop(r); // joins: would hang if the thread stayed blocked
    }
}
