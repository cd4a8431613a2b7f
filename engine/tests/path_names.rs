//! Packets name their path by a small id whose label is declared once: outputs show the label,
//! ids with the same label are one path, an id never named is shown as `path#N`, and a name is
//! a declaration, not an observation.

#[expect(dead_code, reason = "each test uses some of the shared helpers")]
mod common;

use common::*;
use tboxscope_engine::{Config, Datagram, Engine, Observation, PacketMeta, PathId, PathName};

fn datagram(ts: u64, path: PathId, capture: u16) -> Observation {
    Observation::Datagram(Datagram {
        meta: PacketMeta {
            ts_ns: ts,
            path,
            capture,
            src: addr("10.0.0.2:40000"),
            dst: addr("192.0.2.1:9000"),
            wire_len: 100,
            ttl: 0,
        },
        payload_hash: ts,
        payload_len: 50,
        app_msg_id: None,
    })
}

fn name(id: u16, label: &str) -> Observation {
    Observation::PathName(PathName {
        ts_ns: T0,
        id: PathId(id),
        label: label.to_owned(),
    })
}

#[test]
fn path_ids_are_shown_by_their_declared_labels() {
    let mut e = Engine::new(Config::default());
    e.handle(name(0, "eth0"));
    e.handle(name(5, "eth0"));
    // A second name for an id already named does not rename it.
    e.handle(name(0, "eth9"));
    e.handle(datagram(T0 + 1, PathId(0), 0));
    e.handle(datagram(T0 + 2, PathId(5), 0));
    e.handle(datagram(T0 + 3, PathId(7), 1));
    let s = e.finish(T0 + 10);
    let mut labels: Vec<&str> = s.paths.iter().map(|p| p.label.as_str()).collect();
    labels.sort_unstable();
    assert_eq!(labels, ["eth0", "path#7"]);
    assert_eq!(s.health.observations, 3);
}
