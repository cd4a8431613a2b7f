//! Reading a recorded capture: JSON Lines written by tboxscope (`header`, `tcp_*`, `drops`,
//! `message`, `window`, `outage`, `hol_incident`, `summary`, ...). Lines are validated one by
//! one; a line that cannot be used is skipped and counted by reason, never fatal.
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use probe_user::capture::records::DropsRecord;
use serde_json::{Map, Value};
use tboxscope_engine::input::TcpEvent;
use tboxscope_engine::record::{
    HolIncident, LateCopyRecord, MessageRecord, OutageRecord, Summary, WindowRecord,
};

use super::tcp;

/// Why a recording could not be opened at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// A packet capture that cannot be read.
    #[error("cannot replay {path}: {reason}")]
    Capture {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Several files given, but not all are packet captures.
    #[error("{path}: only packet captures (.pcap/.pcapng) can be replayed together; a JSON Lines recording is replayed alone")]
    Mixed {
        /// The file that is not a packet capture.
        path: String,
    },
    /// A statement (`--pair`, `--host`, `--clock-offset`) about a capture label no file has.
    #[error("no capture is labelled {labels} (the captures: {captures})")]
    UnknownCapture {
        /// The labels stated but not found.
        labels: String,
        /// The captures' labels.
        captures: String,
    },
    /// Nothing in the file could be replayed.
    #[error("{path}: no replayable record (skipped: {skipped})")]
    Empty {
        /// The file.
        path: String,
        /// Skip reasons and counts.
        skipped: String,
    },
}

/// One replayable thing.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A closed message with its copies.
    Message(Box<MessageRecord>),
    /// A closed window.
    Window(Box<WindowRecord>),
    /// An outage, revealed at its start.
    Outage(Box<OutageRecord>),
    /// A HOL incident, revealed at its start.
    Hol(Box<HolIncident>),
    /// The final summary.
    Summary(Box<Summary>),
    /// A kernel TCP event, fed to the engine.
    Tcp(Box<TcpEvent>),
    /// The kernel probes' drop counters (cumulative), as `capture` writes them.
    Drops(DropsRecord),
    /// What `capture` says about its own capture (an interface lost, captured again).
    CaptureNote(String),
    /// A copy seen after its message closed without it.
    LateCopy(Box<LateCopyRecord>),
}

/// An item at its replay time.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    /// When it happens in the recording (Unix epoch ns).
    pub ts_ns: u64,
    /// What.
    pub item: Item,
}

/// A whole recording, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// Items sorted by time (stable: equal times keep file order).
    pub items: Vec<Timed>,
    /// Lines skipped, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// The header line's fields, if any.
    pub header: Option<Map<String, Value>>,
}

impl Recording {
    /// Time of the first item.
    pub fn start_ns(&self) -> u64 {
        self.items.first().map_or(0, |t| t.ts_ns)
    }

    /// Time of the last item.
    pub fn end_ns(&self) -> u64 {
        self.items.last().map_or(0, |t| t.ts_ns)
    }

    /// Skip reasons as one line (`unknown type kcp_segment: 12, bad json: 1`).
    pub fn skipped_text(&self) -> String {
        if self.skipped.is_empty() {
            return "none".to_owned();
        }
        self.skipped
            .iter()
            .map(|(reason, n)| format!("{reason}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Parses an RFC 3339 timestamp to Unix epoch ns.
pub fn parse_ts(text: &str) -> Option<u64> {
    let t = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    u64::try_from(t.timestamp_nanos_opt()?).ok()
}

fn body<T: serde::de::DeserializeOwned>(map: &Map<String, Value>) -> Result<T, String> {
    let mut fields = map.clone();
    fields.remove("type");
    fields.remove("ts");
    serde_json::from_value(Value::Object(fields)).map_err(|e| e.to_string())
}

/// Turns one line into items; `Err(reason)` when it cannot be used.
fn parse_line(line: &str, recording: &mut Recording) -> Result<Option<Timed>, String> {
    let value: Value = serde_json::from_str(line).map_err(|_| "bad json".to_owned())?;
    let Value::Object(map) = value else {
        return Err("not an object".to_owned());
    };
    let kind = map
        .get("type")
        .and_then(Value::as_str)
        .ok_or("no type")?
        .to_owned();
    let ts_ns = map
        .get("ts")
        .and_then(Value::as_str)
        .and_then(parse_ts)
        .ok_or("bad ts")?;
    let bad = |e: String| format!("bad {kind}: {}", e.split(" at line").next().unwrap_or(""));
    let item = match kind.as_str() {
        "header" => {
            recording.header = Some(map);
            return Ok(None);
        }
        "message" => Item::Message(Box::new(body(&map).map_err(bad)?)),
        "window" => Item::Window(Box::new(body(&map).map_err(bad)?)),
        "outage" => {
            let outage: OutageRecord = body(&map).map_err(bad)?;
            return Ok(Some(Timed {
                ts_ns: outage.start_ns,
                item: Item::Outage(Box::new(outage)),
            }));
        }
        "hol_incident" => {
            let hol: HolIncident = body(&map).map_err(bad)?;
            return Ok(Some(Timed {
                ts_ns: hol.start_ns,
                item: Item::Hol(Box::new(hol)),
            }));
        }
        "late_copy" => Item::LateCopy(Box::new(body(&map).map_err(bad)?)),
        // `capture` without packets ends with a summary of its own counters; its drop
        // counters are in the `drops` line written just before it. With packets, the summary
        // also holds the engine's whole-run figures (`redundancy`, ...), read as analyze's.
        "summary" if map.contains_key("stopped_by") && !map.contains_key("redundancy") => {
            return Ok(None)
        }
        "summary" => Item::Summary(Box::new(body(&map).map_err(bad)?)),
        "drops" => Item::Drops(body(&map).map_err(bad)?),
        "capture_lost" | "capture_gap" => {
            let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("?").to_owned();
            Item::CaptureNote(if kind == "capture_lost" {
                format!(
                    "{}: capture lost ({}); reopening",
                    text("path"),
                    text("reason")
                )
            } else {
                let gap = map.get("gap_s").and_then(Value::as_f64).unwrap_or(0.0);
                format!("{}: captured again after {gap:.1} s", text("path"))
            })
        }
        // The join of the kernel's retransmissions with the wire's is in the summary.
        "tcp_disagreement" => return Ok(None),
        // TCP retransmissions seen on the wire are in the summary's `tcp_wire` figures; the
        // TCP screen shows the kernel's (the wire's are not on it yet).
        k if k.starts_with("tcp_") && map.get("source").and_then(Value::as_str) == Some("wire") => {
            return Ok(None)
        }
        k if k.starts_with("tcp_") => Item::Tcp(Box::new(tcp::event(k, ts_ns, &map).map_err(bad)?)),
        other => return Err(format!("not replayed: {other}")),
    };
    Ok(Some(Timed { ts_ns, item }))
}

/// Reads JSON Lines from `reader`.
pub fn parse(reader: impl BufRead) -> Recording {
    let mut recording = Recording::default();
    for line in reader.lines() {
        let Ok(line) = line else {
            *recording
                .skipped
                .entry("unreadable line".to_owned())
                .or_default() += 1;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(&line, &mut recording) {
            Ok(Some(timed)) => recording.items.push(timed),
            Ok(None) => {}
            Err(reason) => *recording.skipped.entry(reason).or_default() += 1,
        }
    }
    recording.items.sort_by_key(|t| t.ts_ns);
    recording
}

/// Opens a JSON Lines recording (packet captures are replayed by [`super::packets`]).
pub fn load(path: &Path) -> Result<Recording, LoadError> {
    let name = path.display().to_string();
    let io = |cause| LoadError::Io {
        path: name.clone(),
        cause,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let reader = std::io::BufReader::new(file);
    let recording = parse(reader);
    if recording.items.is_empty() {
        return Err(LoadError::Empty {
            skipped: recording.skipped_text(),
            path: name,
        });
    }
    Ok(recording)
}

#[cfg(test)]
mod tests {
    use probe_user::output::jsonl::JsonLinesWriter;
    use tboxscope_engine::record::Record;

    use super::*;

    /// A `late_copy` line is written as the engine's other records are, and a recording
    /// holding one replays without a skipped line.
    #[test]
    fn a_late_copy_line_is_written_typed_and_replayed_without_a_skip() {
        let ts = 1_796_000_007_500_000_000;
        let late = Record::LateCopy(LateCopyRecord {
            id: "hash 0000000000c00078".to_owned(),
            flow: "kcp :7401 (per-path sessions)".to_owned(),
            path: "eth1".to_owned(),
            seen_ns: ts,
            after_close_us: 2_500_000,
        });
        let mut w = JsonLinesWriter::new(Vec::new(), ts, &serde_json::json!({})).unwrap();
        w.write(late.kind(), late.ts_ns(), &late).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let line: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(line["type"], "late_copy");
        assert_eq!(line["path"], "eth1");
        assert_eq!(line["id"], "hash 0000000000c00078");
        assert_eq!(line["after_close_us"], 2_500_000);
        let recording = parse(text.as_bytes());
        assert!(recording.skipped.is_empty(), "{:?}", recording.skipped);
    }
}
