//! The ABI shared by the eBPF programs (`probe-ebpf`) and user space (`probe-user`).
#![no_std]
