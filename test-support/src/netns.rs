//! Network namespaces and veth pairs for live tests: unique names (process id + a tag), removed by
//! a Drop guard whatever happens, and threads that run inside a namespace.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::thread::JoinHandle;

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `ip -n NS ARGS`.
pub fn ip_in(ns: &str, args: &[&str]) {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    ip(&all);
}

/// Two namespaces ("tbox" and "cloud") joined by veth pairs; everything is deleted on drop.
pub struct Lab {
    /// The T-Box side namespace (where capture runs).
    pub tbox: String,
    /// The gateway side namespace.
    pub cloud: String,
    /// Per pair: (tbox-side interface, cloud-side interface, tbox address, cloud address).
    pub links: Vec<(String, String, String, String)>,
}

impl Lab {
    /// Creates the namespaces and `pairs` veth pairs; pair `i` uses 10.(50+i).`subnet`.0/24.
    pub fn new(tag: &str, pairs: usize) -> Lab {
        let pid = std::process::id();
        let lab = Lab {
            tbox: format!("tbx{tag}t{pid}"),
            cloud: format!("tbx{tag}c{pid}"),
            links: (0..pairs)
                .map(|i| {
                    let sub = pid % 200 + 20;
                    (
                        format!("t{tag}{i}{pid}"),
                        format!("c{tag}{i}{pid}"),
                        format!("10.{}.{sub}.1", 50 + i),
                        format!("10.{}.{sub}.2", 50 + i),
                    )
                })
                .collect(),
        };
        ip(&["netns", "add", &lab.tbox]);
        ip(&["netns", "add", &lab.cloud]);
        ip_in(&lab.tbox, &["link", "set", "lo", "up"]);
        ip_in(&lab.cloud, &["link", "set", "lo", "up"]);
        for i in 0..pairs {
            lab.add_pair(i);
        }
        lab
    }

    /// (Re)creates veth pair `i` with its addresses, up.
    pub fn add_pair(&self, i: usize) {
        let (t, c, ta, ca) = &self.links[i];
        assert!(t.len() <= 15 && c.len() <= 15, "interface name too long");
        ip_in(
            &self.tbox,
            &[
                "link",
                "add",
                t,
                "type",
                "veth",
                "peer",
                "name",
                c,
                "netns",
                &self.cloud,
            ],
        );
        ip_in(&self.tbox, &["addr", "add", &format!("{ta}/24"), "dev", t]);
        ip_in(&self.cloud, &["addr", "add", &format!("{ca}/24"), "dev", c]);
        ip_in(&self.tbox, &["link", "set", t, "up"]);
        ip_in(&self.cloud, &["link", "set", c, "up"]);
    }

    /// Deletes veth pair `i` (both ends go).
    pub fn delete_pair(&self, i: usize) {
        ip_in(&self.tbox, &["link", "del", &self.links[i].0]);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.tbox, &self.cloud] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Moves the calling thread into namespace `ns` (threads it spawns afterwards inherit it).
pub fn enter(ns: &str) {
    let f = File::open(format!("/var/run/netns/{ns}")).expect("open netns");
    // SAFETY: setns on a valid namespace fd affects only the calling thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
}

/// Spawns a thread that runs `f` inside namespace `ns`.
pub fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter(&ns);
        f()
    })
}
