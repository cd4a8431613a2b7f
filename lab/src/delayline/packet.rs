//! A raw AF_PACKET socket bound to one interface: receives every frame arriving on it (not the
//! ones it sends itself) and transmits whole Ethernet frames.
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{LabError, Result};

const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// A bound, non-blocking packet socket.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
    iface: String,
}

fn last(what: String) -> LabError {
    LabError::io(what, std::io::Error::last_os_error())
}

impl PacketSocket {
    /// Opens a socket on `iface` in the calling thread's namespace.
    pub fn open(iface: &str) -> Result<Self> {
        let cname =
            CString::new(iface).map_err(|_| LabError::Config(format!("bad interface {iface}")))?;
        // SAFETY: if_nametoindex reads a NUL-terminated string we own.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(last(format!("no interface {iface}")));
        }
        let ifindex = i32::try_from(ifindex).map_err(|_| LabError::Config("ifindex".into()))?;
        // SAFETY: creating a socket; the fd is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                // Protocol 0: receive nothing until bound to the one interface below (a socket
                // opened with ETH_P_ALL would see every interface's frames until then).
                0,
            )
        };
        if raw < 0 {
            return Err(last("AF_PACKET socket".into()));
        }
        // SAFETY: raw is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sock = PacketSocket {
            fd,
            ifindex,
            iface: iface.to_string(),
        };
        sock.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            "PACKET_IGNORE_OUTGOING",
        )?;
        sock.setsockopt(
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            8 << 20,
            "SO_RCVBUFFORCE",
        )?;
        sock.setsockopt(
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            8 << 20,
            "SO_SNDBUFFORCE",
        )?;
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid starting value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL_BE;
        addr.sll_ifindex = ifindex;
        // SAFETY: binding with a correctly sized sockaddr_ll.
        let rc = unsafe {
            libc::bind(
                sock.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(last(format!("bind AF_PACKET to {iface}")));
        }
        Ok(sock)
    }

    fn setsockopt(&self, level: i32, name: i32, value: i32, what: &str) -> Result<()> {
        // SAFETY: an int option, passed by pointer with its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(last(format!("{what} on {}", self.iface)));
        }
        Ok(())
    }

    /// Receives one frame into `buf` with its kernel receive time (CLOCK_REALTIME ns);
    /// `None` when nothing is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<(usize, Option<u64>)>> {
        crate::sys::recv_timestamped(
            self.fd.as_raw_fd(),
            buf,
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
        .map_err(|e| LabError::io(format!("recv on {}", self.iface), e))
    }

    /// Sends one whole Ethernet frame; returns false when the kernel refused it (queue full,
    /// interface down), which the delay line counts as a drop.
    pub fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid starting value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        // SAFETY: sendto from a buffer we own, with a correctly sized sockaddr_ll.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        n >= 0
    }

    /// The raw fd, for polling.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
