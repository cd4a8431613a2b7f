//! `tcp_*` lines of a `capture --json` recording → the engine's [`TcpEvent`]: each line is
//! read as the record type `capture` wrote ([`Record::deserialize_as`]) and converted as the
//! live view converts it ([`Record::engine_event`]). A recording may name the socket's path
//! (`"path"`); without it the path is [`probe_user::capture::records::NO_PATH`].
use probe_user::capture::records::Record;
use serde_json::{Map, Value};
use tboxscope_engine::input::TcpEvent;

/// Converts one `tcp_*` line (record type `kind`, time `ts_ns`, its fields `map`) into a
/// kernel event; `Err` says why it cannot be used.
pub fn event(kind: &str, ts_ns: u64, map: &Map<String, Value>) -> Result<TcpEvent, String> {
    let record = Record::deserialize_as(kind, map)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("unknown TCP record {kind}"))?;
    let mut event = record.engine_event(ts_ns).map_err(|e| e.to_string())?;
    if let Some(path) = map.get("path").and_then(Value::as_str) {
        path.clone_into(&mut event.path);
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tboxscope_engine::input::{CongState, RetransmitKind, TcpEventKind};

    fn map(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json) {
            Ok(Value::Object(m)) => m,
            other => panic!("not an object: {other:?}"),
        }
    }

    const SOCK: &str = r#""conn":1,"src":"10.0.0.1:40000","dst":"[::1]:443","backoff":1,
        "retransmits":1,"total_retrans":3,"cwnd":1,"ssthresh":7,"srtt_us":50000,
        "packets_out":1,"lost_out":1,"retrans_out":0,"ca_state":"loss","state":"ESTABLISHED""#;

    #[test]
    fn retransmit_line_becomes_an_event() {
        let m = map(&format!(
            r#"{{"type":"tcp_retransmit","kind":"rto","err":0,"seq":1000,"rto_ms":408,{SOCK}}}"#
        ));
        let e = event("tcp_retransmit", 5, &m).unwrap();
        assert_eq!(e.figures.rto_us, 408_000);
        assert_eq!(e.figures.backoff, 1);
        assert_eq!(e.figures.retransmits, 3);
        assert_eq!(e.path, "-");
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
    fn a_resend_the_kernel_failed_to_send_is_no_retransmission() {
        let m = map(&format!(
            r#"{{"type":"tcp_retransmit","kind":"rto","err":-16,"seq":1000,"rto_ms":408,{SOCK}}}"#
        ));
        let e = event("tcp_retransmit", 5, &m).unwrap();
        assert_eq!(e.kind, TcpEventKind::Sample);
        assert_eq!(e.figures.rto_us, 408_000);
    }

    #[test]
    fn cong_state_line_reads_the_new_congestion_state() {
        let m = map(&format!(
            r#"{{"from":"loss","to":"open","path":"eth0",{SOCK}}}"#
        ));
        let e = event("tcp_cong_state", 5, &m).unwrap();
        assert_eq!(
            e.kind,
            TcpEventKind::CongState {
                state: CongState::Open
            }
        );
        assert_eq!(e.path, "eth0");
    }

    #[test]
    fn bad_lines_are_refused() {
        let no_src = SOCK.replace(r#""src":"10.0.0.1:40000","#, "");
        assert!(event("tcp_cwnd", 1, &map(&format!("{{{no_src}}}"))).is_err());
        let bad_src = SOCK.replace("10.0.0.1:40000", "x");
        assert!(event("tcp_cwnd", 1, &map(&format!("{{{bad_src}}}"))).is_err());
        let neg = SOCK.replace(r#""backoff":1"#, r#""backoff":-3"#);
        assert!(event("tcp_cwnd", 1, &map(&format!("{{{neg}}}"))).is_err());
        let unknown = format!(r#"{{"from":"open","to":"unknown",{SOCK}}}"#);
        assert!(event("tcp_cong_state", 1, &map(&unknown)).is_err());
        assert!(event("tcp_other", 1, &map(&format!("{{{SOCK}}}"))).is_err());
    }
}
