//! How often the kernel skipped one of our programs: `recursion_misses` of `struct
//! bpf_prog_info`, read with `bpf(BPF_OBJ_GET_INFO_BY_FD)` (aya 0.14's `ProgramInfo` does not
//! expose it).
//!
//! A raw tracepoint program does not run while it already runs on the same CPU (an interrupt
//! landed on it); the kernel counts each such skip only there. A retransmission whose hook was
//! skipped still goes on the wire.
use std::os::fd::{AsRawFd, BorrowedFd};

/// `BPF_OBJ_GET_INFO_BY_FD` (`enum bpf_cmd`).
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The leading part of the UAPI `struct bpf_prog_info` (linux/bpf.h), up to and including
/// `recursion_misses` (Linux 5.12). Pointer fields stay 0 so the kernel copies no arrays.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProgInfoPrefix {
    pub(crate) prog_type: u32,
    pub(crate) id: u32,
    pub(crate) tag: [u8; 8],
    pub(crate) jited_prog_len: u32,
    pub(crate) xlated_prog_len: u32,
    pub(crate) jited_prog_insns: u64,
    pub(crate) xlated_prog_insns: u64,
    pub(crate) load_time: u64,
    pub(crate) created_by_uid: u32,
    pub(crate) nr_map_ids: u32,
    pub(crate) map_ids: u64,
    pub(crate) name: [u8; 16],
    pub(crate) ifindex: u32,
    /// `gpl_compatible:1` and 31 bits of padding.
    pub(crate) gpl_compatible: u32,
    pub(crate) netns_dev: u64,
    pub(crate) netns_ino: u64,
    pub(crate) nr_jited_ksyms: u32,
    pub(crate) nr_jited_func_lens: u32,
    pub(crate) jited_ksyms: u64,
    pub(crate) jited_func_lens: u64,
    pub(crate) btf_id: u32,
    pub(crate) func_info_rec_size: u32,
    pub(crate) func_info: u64,
    pub(crate) nr_func_info: u32,
    pub(crate) nr_line_info: u32,
    pub(crate) line_info: u64,
    pub(crate) jited_line_info: u64,
    pub(crate) nr_jited_line_info: u32,
    pub(crate) line_info_rec_size: u32,
    pub(crate) jited_line_info_rec_size: u32,
    pub(crate) nr_prog_tags: u32,
    pub(crate) prog_tags: u64,
    pub(crate) run_time_ns: u64,
    pub(crate) run_cnt: u64,
    pub(crate) recursion_misses: u64,
}

/// Bytes the kernel must fill for `recursion_misses` to be there.
pub(crate) const NEEDED_LEN: usize =
    std::mem::offset_of!(ProgInfoPrefix, recursion_misses) + std::mem::size_of::<u64>();

/// The `info` member of `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C, align(8))]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Why a program's skip count could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgInfoError {
    /// The hook's program has no fd (not loaded).
    #[error("program: {0}")]
    Program(String),
    /// The syscall failed.
    #[error("bpf(BPF_OBJ_GET_INFO_BY_FD): {0}")]
    Syscall(String),
    /// The kernel filled fewer bytes than `recursion_misses` needs (before Linux 5.12).
    #[error("the kernel's bpf_prog_info has {got} bytes, recursion_misses needs {NEEDED_LEN}: not counted before Linux 5.12")]
    TooShort {
        /// Bytes the kernel returned.
        got: u32,
    },
}

/// The kernel's info length after the call → `Ok` when it covers `recursion_misses`.
pub(crate) fn check_len(info_len: u32) -> Result<(), ProgInfoError> {
    if usize::try_from(info_len).is_ok_and(|l| l >= NEEDED_LEN) {
        Ok(())
    } else {
        Err(ProgInfoError::TooShort { got: info_len })
    }
}

/// The program's `recursion_misses`: runs the kernel skipped since it was loaded.
pub fn recursion_misses(prog: BorrowedFd<'_>) -> Result<u64, ProgInfoError> {
    let mut info = ProgInfoPrefix::default();
    let fd = u32::try_from(prog.as_raw_fd())
        .map_err(|_| ProgInfoError::Syscall("negative program fd".into()))?;
    let mut attr = InfoAttr {
        bpf_fd: fd,
        // A compile-time constant of a few hundred bytes.
        info_len: std::mem::size_of::<ProgInfoPrefix>() as u32,
        info: std::ptr::addr_of_mut!(info) as u64,
    };
    // SAFETY: `attr` is a valid, initialised `bpf_attr.info` of the size passed; `info` points
    // to a writable `ProgInfoPrefix` of `info_len` bytes that outlives the call, and every
    // pointer field in it is 0, so the kernel writes nothing else.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<InfoAttr>(),
        )
    };
    if rc < 0 {
        return Err(ProgInfoError::Syscall(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    check_len(attr.info_len)?;
    Ok(info.recursion_misses)
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// Offsets of linux/bpf.h's `struct bpf_prog_info` (x86_64 and aarch64 alike: only fixed
    /// width fields, u64s 8-aligned).
    #[test]
    fn layout_matches_the_uapi_struct() {
        assert_eq!(offset_of!(ProgInfoPrefix, tag), 8);
        assert_eq!(offset_of!(ProgInfoPrefix, jited_prog_insns), 24);
        assert_eq!(offset_of!(ProgInfoPrefix, load_time), 40);
        assert_eq!(offset_of!(ProgInfoPrefix, map_ids), 56);
        assert_eq!(offset_of!(ProgInfoPrefix, name), 64);
        assert_eq!(offset_of!(ProgInfoPrefix, ifindex), 80);
        assert_eq!(offset_of!(ProgInfoPrefix, netns_dev), 88);
        assert_eq!(offset_of!(ProgInfoPrefix, jited_ksyms), 112);
        assert_eq!(offset_of!(ProgInfoPrefix, btf_id), 128);
        assert_eq!(offset_of!(ProgInfoPrefix, func_info), 136);
        assert_eq!(offset_of!(ProgInfoPrefix, line_info), 152);
        assert_eq!(offset_of!(ProgInfoPrefix, nr_jited_line_info), 168);
        assert_eq!(offset_of!(ProgInfoPrefix, prog_tags), 184);
        assert_eq!(offset_of!(ProgInfoPrefix, run_time_ns), 192);
        assert_eq!(offset_of!(ProgInfoPrefix, run_cnt), 200);
        assert_eq!(offset_of!(ProgInfoPrefix, recursion_misses), 208);
        assert_eq!(NEEDED_LEN, 216);
        assert_eq!(size_of::<ProgInfoPrefix>(), 216);
        assert_eq!(size_of::<InfoAttr>(), 16);
    }

    #[test]
    fn a_short_info_from_an_older_kernel_is_refused() {
        assert_eq!(check_len(216), Ok(()));
        assert_eq!(check_len(232), Ok(()));
        assert_eq!(
            check_len(208),
            Err(ProgInfoError::TooShort { got: 208 }),
            "run_cnt but no recursion_misses (Linux 5.1 to 5.11)"
        );
        assert_eq!(check_len(0), Err(ProgInfoError::TooShort { got: 0 }));
    }

    #[test]
    fn a_bad_fd_is_an_error_not_a_panic() {
        use std::os::fd::AsFd;
        let f = std::fs::File::open("/dev/null").unwrap();
        let r = recursion_misses(f.as_fd());
        assert!(matches!(r, Err(ProgInfoError::Syscall(_))), "{r:?}");
    }
}
