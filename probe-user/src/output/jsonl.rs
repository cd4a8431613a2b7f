//! JSON Lines: one record per line, each with `"type"` and `"ts"` first; the first line names the
//! schema. A line is built whole in memory and written with one call, so a reader never sees half
//! a record, whatever stops the run.

use std::io::{self, Write};

use serde::Serialize;

/// Schema name and version written in the first line of every JSON Lines output.
pub const SCHEMA: &str = "tboxscope/1";

/// Why a record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The destination refused the bytes (disk full, closed pipe, ...).
    #[error("writing JSON output: {0}")]
    Io(io::Error),
    /// The record's fields did not serialize to a JSON object.
    #[error("record `{record_type}` is not a JSON object")]
    NotAnObject {
        /// The record type that failed.
        record_type: String,
    },
    /// serde_json refused the record.
    #[error("encoding record: {0}")]
    Encode(serde_json::Error),
}

// The messages say the inner error; `source()` is left empty so that a printed chain names it
// once.
impl From<io::Error> for OutputError {
    fn from(e: io::Error) -> Self {
        OutputError::Io(e)
    }
}

impl From<serde_json::Error> for OutputError {
    fn from(e: serde_json::Error) -> Self {
        OutputError::Encode(e)
    }
}

/// Formats Unix-epoch nanoseconds as RFC 3339 UTC with nanoseconds, e.g.
/// `2026-11-30T01:02:03.000000004Z`.
pub fn format_ts(ts_ns: u64) -> String {
    let secs = (ts_ns / 1_000_000_000) as i64;
    let nanos = (ts_ns % 1_000_000_000) as u32;
    match chrono::DateTime::from_timestamp(secs, nanos) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        // Unreachable for u64 input (year < 2600), kept total rather than panicking.
        None => format!("{secs}.{nanos:09}"),
    }
}

/// Appends [`format_ts`]'s text to `buf`, formatting the date and time only when the second
/// differs from the one in `cache` (records come many per second: no allocation, no calendar
/// arithmetic per record).
fn push_ts(buf: &mut Vec<u8>, ts_ns: u64, cache: &mut Option<(u64, String)>) {
    let secs = ts_ns / 1_000_000_000;
    let nanos = (ts_ns % 1_000_000_000) as u32;
    let prefix = match cache {
        Some((s, p)) if *s == secs => p,
        _ => {
            let full = format_ts(secs * 1_000_000_000);
            // "YYYY-MM-DDTHH:MM:SS" + ".000000000Z": keep the part before the fraction.
            let head = full
                .split_once('.')
                .map_or(full.as_str(), |(h, _)| h)
                .to_owned();
            &mut cache.insert((secs, head)).1
        }
    };
    buf.extend_from_slice(prefix.as_bytes());
    let mut frac = *b".000000000Z";
    let mut n = nanos;
    for d in frac[1..10].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    buf.extend_from_slice(&frac);
}

/// Writes schema-versioned JSON Lines records.
pub struct JsonLinesWriter<W: Write> {
    out: W,
    line: Vec<u8>,
    records: u64,
    /// The formatted date and time of the last second written.
    ts_cache: Option<(u64, String)>,
}

impl<W: Write> JsonLinesWriter<W> {
    /// Starts an output: writes the header line (`"type":"header"`, schema, tool version) stamped
    /// `ts_ns`, with `fields` (e.g. the command line, sources) merged in.
    pub fn new<T: Serialize>(out: W, ts_ns: u64, fields: &T) -> Result<Self, OutputError> {
        #[derive(Serialize)]
        struct Header<'a, T: Serialize> {
            schema: &'a str,
            tool: &'a str,
            version: &'a str,
            #[serde(flatten)]
            fields: &'a T,
        }
        let mut writer = Self {
            out,
            line: Vec::with_capacity(512),
            records: 0,
            ts_cache: None,
        };
        writer.write(
            "header",
            ts_ns,
            &Header {
                schema: SCHEMA,
                tool: "tboxscope",
                version: env!("CARGO_PKG_VERSION"),
                fields,
            },
        )?;
        Ok(writer)
    }

    /// Writes one record: `{"type":record_type,"ts":…,<fields>}` and a newline.
    pub fn write<T: Serialize>(
        &mut self,
        record_type: &str,
        ts_ns: u64,
        fields: &T,
    ) -> Result<(), OutputError> {
        self.line.clear();
        self.line.extend_from_slice(b"{\"type\":");
        serde_json::to_writer(&mut self.line, record_type)?;
        self.line.extend_from_slice(b",\"ts\":\"");
        push_ts(&mut self.line, ts_ns, &mut self.ts_cache);
        self.line.push(b'"');
        let start = self.line.len();
        serde_json::to_writer(&mut self.line, fields)?;
        let body = &self.line[start..];
        if body.first() != Some(&b'{') {
            return Err(OutputError::NotAnObject {
                record_type: record_type.to_owned(),
            });
        }
        if body == b"{}" {
            self.line.truncate(start);
        } else {
            // Replace the body's opening brace with the comma joining it to "type"/"ts".
            self.line[start] = b',';
            self.line.pop();
        }
        self.line.extend_from_slice(b"}\n");
        self.out.write_all(&self.line)?;
        self.records += 1;
        Ok(())
    }

    /// Number of records written, header included.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes buffered lines to the destination.
    pub fn flush(&mut self) -> Result<(), OutputError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the destination.
    pub fn into_inner(mut self) -> Result<W, OutputError> {
        self.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn ts_is_rfc3339_utc_nanoseconds() {
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            format_ts(1_796_000_523_000_000_004),
            "2026-11-30T01:02:03.000000004Z"
        );
    }

    #[test]
    fn cached_ts_matches_format_ts() {
        let mut cache = None;
        for ts in [
            0,
            1_796_000_523_000_000_004,
            1_796_000_523_999_999_999,
            1_796_000_524_000_000_000,
            1_796_000_524_123_456_789,
            1_796_000_523_500_000_000,
        ] {
            let mut buf = Vec::new();
            push_ts(&mut buf, ts, &mut cache);
            assert_eq!(String::from_utf8(buf).unwrap(), format_ts(ts), "{ts}");
        }
    }

    #[test]
    fn lines_carry_type_and_ts_first_and_header_names_schema() {
        let mut w = JsonLinesWriter::new(Vec::new(), 5, &json!({"command": "capture"})).unwrap();
        w.write(
            "tcp_rto",
            1_000_000_001,
            &json!({"rto_ms": 400, "backoff": 1}),
        )
        .unwrap();
        w.write("drops", 7, &json!({})).unwrap();
        assert_eq!(w.records(), 3);
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with(r#"{"type":"tcp_rto","ts":"1970-01-01T00:00:01.000000001Z","#));
        assert_eq!(
            lines[2],
            r#"{"type":"drops","ts":"1970-01-01T00:00:00.000000007Z"}"#
        );
        let header: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(header["schema"], SCHEMA);
        assert_eq!(header["command"], "capture");
        let rto: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(rto["backoff"], 1);
    }

    #[test]
    fn non_object_fields_are_refused_without_writing() {
        let mut w = JsonLinesWriter::new(Vec::new(), 0, &json!({})).unwrap();
        assert!(matches!(
            w.write("x", 0, &3),
            Err(OutputError::NotAnObject { .. })
        ));
        assert_eq!(
            w.into_inner()
                .unwrap()
                .iter()
                .filter(|b| **b == b'\n')
                .count(),
            1
        );
    }
}
