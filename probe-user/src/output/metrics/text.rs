//! Metric families as text: the Prometheus exposition format 0.0.4 and OpenMetrics 1.0, and
//! the node_exporter textfile written atomically.
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use super::{MetricFamily, MetricKind, Sample, Unit, Value};

/// Which text format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (what node_exporter's textfile collector reads).
    Prometheus,
    /// OpenMetrics 1.0 text (`# UNIT` lines, `# EOF`).
    OpenMetrics,
}

impl Format {
    /// The format a scraper asks for in its `Accept` header: OpenMetrics when it names it.
    pub fn from_accept(accept: &str) -> Self {
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The HTTP `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A float as both formats write it (`+Inf`, `-Inf`, `NaN`, else Rust's shortest form).
fn number(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// A bucket bound as an `le` label value, always with a decimal point (`1.0`, `0.005`).
fn bound(v: f64) -> String {
    let mut s = String::new();
    number(&mut s, v);
    if v.is_finite() && !s.contains(['.', 'e']) {
        s.push_str(".0");
    }
    s
}

/// Escapes a label value (backslash, double quote, newline).
fn escape_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Escapes HELP text (backslash, newline).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn labels(out: &mut String, labels: &[(&'static str, String)], extra: Option<(&str, &str)>) {
    if labels.is_empty() && extra.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    let all = labels.iter().map(|(k, v)| (*k, v.as_str())).chain(extra);
    for (k, v) in all {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_value(out, v);
        out.push('"');
    }
    out.push('}');
}

fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    sample: &Sample,
    extra: Option<(&str, &str)>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    labels(out, &sample.labels, extra);
    out.push(' ');
    number(out, v);
    out.push('\n');
}

/// The families as text in `format`.
pub fn render(families: &[MetricFamily], format: Format) -> String {
    let mut out = String::with_capacity(8192);
    for f in families {
        family(&mut out, f, format);
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

fn family(out: &mut String, f: &MetricFamily, format: Format) {
    let (suffix, type_name) = match (f.kind, format) {
        (MetricKind::Counter, _) => ("_total", "counter"),
        (MetricKind::Gauge, _) => ("", "gauge"),
        (MetricKind::Histogram, _) => ("", "histogram"),
        (MetricKind::Info, Format::Prometheus) => ("_info", "gauge"),
        (MetricKind::Info, Format::OpenMetrics) => ("_info", "info"),
    };
    // The Prometheus format names the family as its samples are named; OpenMetrics names
    // it without the `_total` / `_info` suffix.
    let described = match format {
        Format::Prometheus => format!("{}{suffix}", f.name),
        Format::OpenMetrics => f.name.to_owned(),
    };
    let help = escape_help(f.help);
    match format {
        Format::Prometheus => {
            let _ = writeln!(out, "# HELP {described} {help}");
            let _ = writeln!(out, "# TYPE {described} {type_name}");
        }
        Format::OpenMetrics => {
            let _ = writeln!(out, "# TYPE {described} {type_name}");
            if f.unit != Unit::None {
                let _ = writeln!(out, "# UNIT {described} {}", f.unit.name());
            }
            let _ = writeln!(out, "# HELP {described} {help}");
        }
    }
    for s in &f.samples {
        match &s.value {
            Value::Number(v) => line(out, f.name, suffix, s, None, *v),
            Value::Histogram(h) => {
                for (le, n) in &h.buckets {
                    line(
                        out,
                        f.name,
                        "_bucket",
                        s,
                        Some(("le", &bound(*le))),
                        *n as f64,
                    );
                }
                line(
                    out,
                    f.name,
                    "_bucket",
                    s,
                    Some(("le", "+Inf")),
                    h.count as f64,
                );
                line(out, f.name, "_sum", s, None, h.sum);
                line(out, f.name, "_count", s, None, h.count as f64);
            }
        }
    }
}

/// Writes the families in the Prometheus text format to `path` for node_exporter's textfile
/// collector: into a temporary file beside it (a name the collector skips, it reads `*.prom`),
/// synced, then renamed over `path`, so a scrape never reads half a file.
pub fn write_textfile(path: &Path, families: &[MetricFamily]) -> std::io::Result<()> {
    let text = render(families, Format::Prometheus);
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
