//! The kernel TCP probes read on the caller's thread, without an async runtime: for the live
//! UI, whose capture thread polls this beside libpcap. Same records as `capture --json`.
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use aya::maps::{MapData, RingBuf};

use super::clock::WallClock;
use super::records::Record;
use super::tracker::Tracker;
use super::KernelRecords;
use crate::source::ebpf::{HookStatus, KernelDrops, ProbeError, ProbeOptions, TcpProbes};

/// Loaded, attached TCP probes with their ring buffer and connection bookkeeping; detached on
/// drop.
pub struct TcpWatch {
    ring: RingBuf<MapData>,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    kernel: KernelRecords,
    // Dropped last: the programs stay attached while the maps above are read.
    probes: TcpProbes,
}

impl TcpWatch {
    /// Loads and attaches the probes (each hook on its own; see [`TcpWatch::hooks`]).
    pub fn start(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        let mut probes = TcpProbes::load(opts)?;
        let ring = probes.take_events()?;
        let logger = probes.take_logger();
        let kernel = KernelRecords::new(Tracker::new(probes.hz(), 4096, 256), WallClock::measure());
        Ok(Self {
            ring,
            logger,
            kernel,
            probes,
        })
    }

    /// Each hook's outcome.
    pub fn hooks(&self) -> &[HookStatus] {
        self.probes.hooks()
    }

    /// Kernel events lost so far (ring buffer full, failed reads) and hook runs the kernel
    /// skipped. Two map lookups, during which this CPU's hooks are skipped: about once a
    /// second, not per poll.
    pub fn drops(&self) -> KernelDrops {
        self.probes.drops()
    }

    /// Kernel events decoded so far.
    pub fn events(&self) -> u64 {
        self.kernel.events()
    }

    /// Events the decoder refused (wrong length, kind or family).
    pub fn rejected(&self) -> u64 {
        self.kernel.rejected().total()
    }

    /// Connections evicted from the bounded connection tables so far.
    pub fn evicted(&self) -> u64 {
        self.kernel.tracker.evicted
    }

    /// Retransmitted segments the kernel counted with no record, so far.
    pub fn unrecorded_retrans(&self) -> u64 {
        self.kernel.tracker.unrecorded_retrans
    }

    /// Congestion-state changes no hook run reported (seen in a later snapshot), so far.
    pub fn unrecorded_cong_changes(&self) -> u64 {
        self.kernel.tracker.unrecorded_cong_changes
    }

    /// Per-connection totals so far: the closed connections kept, then the open ones.
    pub fn connections(&self) -> Vec<super::tracker::ConnTotals> {
        self.kernel.tracker.totals()
    }

    /// The kernel's CONFIG_HZ, when known (RTOs in jiffies are converted with it).
    pub fn config_hz(&self) -> Option<u32> {
        self.probes.hz()
    }

    /// Waits at most `timeout` for kernel events, then hands every record they produce, with
    /// its Unix time in ns, to `emit`. Returns how many kernel events were read. Frequent
    /// events (cwnd samples, socket states) do not wake the poll until many wait
    /// (`probe_common::RING_WAKE_BYTES`), so they arrive at the latest after `timeout`.
    pub fn poll(
        &mut self,
        timeout: Duration,
        emit: &mut dyn FnMut(u64, &Record),
    ) -> std::io::Result<usize> {
        let mut fds = vec![libc::pollfd {
            fd: self.ring.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(l) = &self.logger {
            fds.push(libc::pollfd {
                fd: l.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a live array of initialised pollfd of the given length; the fds
        // belong to maps this struct owns and keeps open.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
        let mut read = 0;
        while let Some(item) = self.ring.next() {
            read += 1;
            let Ok(()) = self.kernel.item(&item, &mut |ts, r| {
                emit(ts, r);
                Ok::<(), std::convert::Infallible>(())
            });
        }
        Ok(read)
    }
}
