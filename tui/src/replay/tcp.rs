//! `tcp_*` lines of a `capture` file → the engine's [`TcpEvent`]. Field names follow the
//! capture schema (`src`, `dst` as `addr:port`, `rto_ms`, `backoff`, `cwnd`, `ssthresh`,
//! `srtt_us`); a few spellings are accepted for the optional ones.
use std::net::SocketAddr;

use serde_json::{Map, Value};
use tboxscope_engine::input::{CongState, RetransmitKind, TcpEvent, TcpEventKind, TcpFigures};

fn text<'a>(map: &'a Map<String, Value>, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| map.get(*n).and_then(Value::as_str))
}

fn number(map: &Map<String, Value>, names: &[&str]) -> Option<f64> {
    names
        .iter()
        .find_map(|n| map.get(*n).and_then(Value::as_f64))
}

fn uint<T: TryFrom<u64> + Default>(map: &Map<String, Value>, names: &[&str]) -> T {
    names
        .iter()
        .find_map(|n| map.get(*n).and_then(Value::as_u64))
        .and_then(|v| T::try_from(v).ok())
        .unwrap_or_default()
}

fn addr(map: &Map<String, Value>, names: &[&str]) -> Result<SocketAddr, String> {
    let raw = text(map, names).ok_or_else(|| format!("no {}", names[0]))?;
    raw.parse()
        .map_err(|_| format!("{} is not addr:port", names[0]))
}

/// The congestion state named `name` (`open`, `disorder`, `cwr`, `recovery`, `loss`).
pub fn cong_state(name: &str) -> Option<CongState> {
    match name.to_ascii_lowercase().trim_start_matches("tcp_ca_") {
        "open" => Some(CongState::Open),
        "disorder" => Some(CongState::Disorder),
        "cwr" => Some(CongState::Cwr),
        "recovery" => Some(CongState::Recovery),
        "loss" => Some(CongState::Loss),
        _ => None,
    }
}

fn retransmit_kind(name: Option<&str>) -> RetransmitKind {
    match name.map(str::to_ascii_lowercase).as_deref() {
        Some("rto" | "timer" | "timeout") => RetransmitKind::Rto,
        Some("loss_recovery") => RetransmitKind::LossRecovery,
        Some("fast" | "recovery" | "fast_retransmit") => RetransmitKind::Fast,
        Some("tlp" | "loss_probe" | "probe") => RetransmitKind::Tlp,
        _ => RetransmitKind::Unknown,
    }
}

/// Converts one `tcp_*` line (record type `kind`, time `ts_ns`) into a kernel event.
pub fn event(kind: &str, ts_ns: u64, map: &Map<String, Value>) -> Result<TcpEvent, String> {
    let local = addr(map, &["src", "local", "saddr"])?;
    let remote = addr(map, &["dst", "remote", "daddr"])?;
    let event = match kind {
        "tcp_retransmit" => TcpEventKind::Retransmit {
            kind: retransmit_kind(text(map, &["kind", "reason", "cause"])),
            seq: uint(map, &["seq"]),
            len: uint(map, &["len", "length"]),
        },
        "tcp_rto" => TcpEventKind::RtoExpired,
        "tcp_backoff_end" => TcpEventKind::BackoffEnd,
        "tcp_cong_state" => {
            let name = text(map, &["state", "cong_state", "new"]).ok_or("no state")?;
            TcpEventKind::CongState {
                state: cong_state(name).ok_or_else(|| format!("unknown state {name}"))?,
            }
        }
        "tcp_state" => TcpEventKind::StateChange {
            old: text(map, &["old", "old_state", "oldstate"])
                .unwrap_or("?")
                .to_owned(),
            new: text(map, &["new", "new_state", "newstate", "state"])
                .unwrap_or("?")
                .to_owned(),
        },
        _ => TcpEventKind::Sample,
    };
    let rto_us = number(map, &["rto_us"])
        .or_else(|| number(map, &["rto_ms"]).map(|ms| ms * 1_000.0))
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(0, |v| v.min(f64::from(u32::MAX)) as u32);
    Ok(TcpEvent {
        ts_ns,
        path: text(map, &["path", "iface", "interface"])
            .unwrap_or("-")
            .to_owned(),
        local,
        remote,
        kind: event,
        figures: TcpFigures {
            cwnd: uint(map, &["cwnd", "snd_cwnd"]),
            ssthresh: uint(map, &["ssthresh", "snd_ssthresh"]),
            srtt_us: uint(map, &["srtt_us"]),
            rto_us,
            backoff: uint(map, &["backoff"]),
            // `total_retrans` (the connection's total) wins over `retransmits`, which a
            // capture file uses for icsk_retransmits (timeouts in a row).
            retransmits: uint(map, &["total_retrans", "retransmits", "retrans"]),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json).unwrap() {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn retransmit_line_becomes_an_event() {
        let m = map(
            r#"{"src":"10.0.0.1:40000","dst":"[::1]:443","kind":"rto","seq":1000,
                "rto_ms":408,"backoff":1,"cwnd":1,"ssthresh":7,"srtt_us":50000,"retransmits":3}"#,
        );
        let e = event("tcp_retransmit", 5, &m).unwrap();
        assert_eq!(e.figures.rto_us, 408_000);
        assert_eq!(e.figures.backoff, 1);
        assert_eq!(
            e.kind,
            TcpEventKind::Retransmit {
                kind: RetransmitKind::Rto,
                seq: 1000,
                len: 0
            }
        );
    }

    #[test]
    fn missing_or_bad_addresses_are_refused() {
        assert!(event("tcp_cwnd", 1, &map(r#"{"dst":"1.2.3.4:5"}"#)).is_err());
        assert!(event("tcp_cwnd", 1, &map(r#"{"src":"x","dst":"1.2.3.4:5"}"#)).is_err());
        let neg = map(r#"{"src":"1.2.3.4:1","dst":"1.2.3.4:5","rto_ms":-3,"backoff":999}"#);
        let e = event("tcp_cwnd", 1, &neg).unwrap();
        assert_eq!((e.figures.rto_us, e.figures.backoff), (0, 0));
    }
}
