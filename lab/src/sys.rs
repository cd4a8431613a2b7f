//! Small system helpers: running `ip`/`nft`/`tc`, entering a network namespace on the current
//! thread, turning off NIC offloads, and the clocks.
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

use crate::error::{LabError, Result};

/// Runs `program args…` and returns its standard output; a non-zero exit is an error.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| LabError::io(format!("cannot start `{program}`"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `ip netns exec NS program args…`.
pub fn run_in(ns: &str, program: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Feeds `script` to `nft -f -` inside namespace `ns`.
pub fn nft_script(ns: &str, script: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| LabError::io("cannot start `nft`", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| LabError::io("cannot write the nft script", e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::io("nft", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: format!("ip netns exec {ns} nft -f - <<{script}"),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Moves the calling thread into the named network namespace (`/run/netns/NAME`).
/// Sockets created afterwards on this thread belong to that namespace for their lifetime.
pub fn enter_netns(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).map_err(|e| LabError::io(format!("open {path}"), e))?;
    // SAFETY: setns on a valid namespace fd; it only changes this thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(LabError::io(
            format!("setns {name}"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Asks the kernel for the finest timer slack on this thread (1 ns), so sleeps end on time.
pub fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// CLOCK_MONOTONIC in nanoseconds (shared by all network namespaces of the host).
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch.
pub fn unix_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Legacy ethtool commands that switch one offload off.
const ETHTOOL_OFFLOADS: [(u32, &str); 5] = [
    (0x0000_0017, "tx-checksum"),          // ETHTOOL_STXCSUM
    (0x0000_0019, "scatter-gather"),       // ETHTOOL_SSG
    (0x0000_001f, "tcp-segmentation"),     // ETHTOOL_STSO
    (0x0000_0024, "generic-segmentation"), // ETHTOOL_SGSO
    (0x0000_002c, "generic-receive"),      // ETHTOOL_SGRO
];

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

/// Switches checksum, segmentation and receive offloads off on `iface` in the current thread's
/// namespace, so every frame on the wire is a complete, checksummed, MTU-sized packet (what the
/// delay line forwards and what a capture on the T-Box shows). Same as `ethtool -K IF tx off sg
/// off tso off gso off gro off`, without needing ethtool.
pub fn disable_offloads(iface: &str) -> Result<()> {
    let name =
        CString::new(iface).map_err(|_| LabError::Config(format!("bad interface {iface}")))?;
    let bytes = name.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return Err(LabError::Config(format!(
            "interface name too long: {iface}"
        )));
    }
    // SAFETY: a plain datagram socket used only for the SIOCETHTOOL ioctl below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(LabError::io(
            "socket for ethtool",
            std::io::Error::last_os_error(),
        ));
    }
    let mut result = Ok(());
    for (cmd, what) in ETHTOOL_OFFLOADS {
        let mut value = EthtoolValue { cmd, data: 0 };
        let mut req = IfreqData {
            name: [0; libc::IFNAMSIZ],
            data: &mut value,
            _pad: [0; 16],
        };
        for (dst, src) in req.name.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        // SAFETY: SIOCETHTOOL with an ifreq whose data points at a live ethtool_value.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            // Some drivers do not offer every offload; that one is then already off.
            if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                result = Err(LabError::io(format!("ethtool {what} off on {iface}"), err));
                break;
            }
        }
    }
    // SAFETY: closing the fd we opened above.
    unsafe { libc::close(fd) };
    result
}

/// Runs `f` on a new thread that first enters namespace `ns`; returns its result.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_netns(&ns)?;
        f()
    })
    .join()
    .map_err(|_| LabError::Config("a namespace helper thread panicked".into()))?
}

/// Gives the calling thread real-time (SCHED_FIFO) priority `prio`, so its timed wake-ups are
/// not delayed behind ordinary busy processes. The kernel's RT throttling still caps it.
pub fn set_realtime(prio: i32) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pid 0 = the calling thread; param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(LabError::io(
            "sched_setscheduler SCHED_FIFO",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Asks the kernel to stamp every received packet on `fd` (SO_TIMESTAMPNS, CLOCK_REALTIME).
pub fn enable_rx_timestamps(fd: std::os::fd::RawFd) -> Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: an int option passed by pointer with its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(LabError::io(
            "SO_TIMESTAMPNS",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Receives one packet with its kernel receive time (CLOCK_REALTIME ns) when the socket has
/// SO_TIMESTAMPNS on. `Ok(None)` when nothing is waiting (non-blocking `flags`).
pub fn recv_timestamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
) -> std::io::Result<Option<(usize, Option<u64>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; zeroed is a valid starting value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg into buffers we own, described by msg.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => Ok(None),
            _ => Err(err),
        };
    }
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote into `control`, with the libc
    // CMSG macros that bound every step by msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
                let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
                stamp = Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Some((usize::try_from(n).unwrap_or(0), stamp)))
}
