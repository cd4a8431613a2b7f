//! OTLP/HTTP export of the metric families: an `ExportMetricsServiceRequest` built from
//! OpenTelemetry's own protobuf definitions (crate `opentelemetry-proto`, encoded by prost),
//! POSTed as `application/x-protobuf` to the collector's `/v1/metrics`. Live modes push from a
//! thread of their own every interval ([`OtlpPusher`]); `analyze` pushes once at the end.
//! Failed attempts are retried with backoff (1 s, 2 s, 4 s) on connection errors and on the
//! statuses OTLP calls retryable (429, 502, 503, 504); an export given up, or a push skipped
//! because the previous one was still retrying, is counted as dropped.
//!
//! Why not the OpenTelemetry SDK's meters: they aggregate measurements as they are recorded,
//! while the engine hands over latency histograms already aggregated (its hdrhistogram-layout
//! counters), which no SDK instrument can take; the protobuf definitions carry them as they are.
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use probe_user::output::metrics::{MetricFamily, MetricKind, Sample, Value};
use prost::Message;

use super::MetricsHub;

/// How long one attempt may take (connect, send, answer).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Waits before the retries of an export.
const BACKOFF: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];
/// Largest answer read from the collector.
const MAX_ANSWER: u64 = 64 * 1024;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The URL is not one this exporter can send to.
    #[error("--otlp {url}: {why}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Connecting, sending or reading failed.
    #[error("OTLP export to {target}: {source}")]
    Io {
        /// host:port.
        target: String,
        /// The error.
        source: std::io::Error,
    },
    /// The collector answered with an error status.
    #[error("OTLP export to {target}: the collector answered {status}")]
    Status {
        /// host:port.
        target: String,
        /// The status line's code and reason.
        status: String,
        /// Whether OTLP says to retry it.
        retryable: bool,
    },
}

impl OtlpError {
    fn retryable(&self) -> bool {
        match self {
            OtlpError::Url { .. } => false,
            OtlpError::Io { .. } => true,
            OtlpError::Status { retryable, .. } => *retryable,
        }
    }
}

/// Where to send: an `http://host[:port][/path]` URL (`/v1/metrics` when no path is given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpTarget {
    /// host:port.
    pub authority: String,
    /// The request path.
    pub path: String,
}

impl OtlpTarget {
    /// Parses `url`. Only plain HTTP: on a T-Box the collector is a local agent (or one
    /// reached over the vehicle's VPN) that forwards with TLS.
    pub fn parse(url: &str) -> Result<Self, OtlpError> {
        let bad = |why| OtlpError::Url {
            url: url.to_owned(),
            why,
        };
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            bad(if url.starts_with("https://") {
                "https is not supported: send to a collector over http (an agent on the T-Box or its VPN), which forwards with TLS"
            } else {
                "expected http://HOST[:PORT][/PATH]"
            })
        })?;
        let (host, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let authority = if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host.to_owned()
        } else {
            format!("{host}:4318")
        };
        let path = if path.is_empty() || path == "/" {
            "/v1/metrics".to_owned()
        } else {
            path.to_owned()
        };
        Ok(Self { authority, path })
    }
}

/// Who sends: the OTLP resource attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// `host.name`.
    pub host_name: String,
    /// `tbox.id` (`--tbox-id`).
    pub tbox_id: Option<String>,
    /// `service.version`.
    pub version: String,
}

impl Origin {
    /// This host, with `tbox_id` and `version`.
    pub fn here(tbox_id: Option<String>, version: &str) -> Self {
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        Self {
            host_name,
            tbox_id,
            version: version.to_owned(),
        }
    }
}

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

fn attributes(s: &Sample) -> Vec<KeyValue> {
    s.labels.iter().map(|(k, v)| string_kv(k, v)).collect()
}

fn number_point(s: &Sample, v: f64, start_ns: u64, time_ns: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(s),
        start_time_unix_nano: start_ns,
        time_unix_nano: time_ns,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..NumberDataPoint::default()
    }
}

/// One family as an OTLP metric: counters as cumulative monotonic sums, gauges and info as
/// gauges, histograms with explicit bounds (per-bucket counts, the last one past the bounds).
fn metric(f: &MetricFamily, start_ns: u64, time_ns: u64) -> Metric {
    let numbers = || {
        f.samples
            .iter()
            .filter_map(|s| match &s.value {
                Value::Number(v) => Some(number_point(s, *v, start_ns, time_ns)),
                Value::Histogram(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let data = match f.kind {
        MetricKind::Counter => metric::Data::Sum(Sum {
            data_points: numbers(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        MetricKind::Gauge | MetricKind::Info => metric::Data::Gauge(Gauge {
            data_points: numbers(),
        }),
        MetricKind::Histogram => metric::Data::Histogram(Histogram {
            data_points: f
                .samples
                .iter()
                .filter_map(|s| match &s.value {
                    Value::Histogram(h) => {
                        let mut counts = Vec::with_capacity(h.buckets.len() + 1);
                        let mut below = 0_u64;
                        for (_, n) in &h.buckets {
                            counts.push(n.saturating_sub(below));
                            below = below.max(*n);
                        }
                        counts.push(h.count.saturating_sub(below));
                        Some(HistogramDataPoint {
                            attributes: attributes(s),
                            start_time_unix_nano: start_ns,
                            time_unix_nano: time_ns,
                            count: h.count,
                            sum: Some(h.sum),
                            bucket_counts: counts,
                            explicit_bounds: h.buckets.iter().map(|(le, _)| *le).collect(),
                            ..HistogramDataPoint::default()
                        })
                    }
                    Value::Number(_) => None,
                })
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    };
    let name = match f.kind {
        MetricKind::Info => format!("{}_info", f.name),
        _ => f.name.to_owned(),
    };
    Metric {
        name,
        description: f.help.to_owned(),
        unit: f.unit.ucum().to_owned(),
        data: Some(data),
        ..Metric::default()
    }
}

/// The export request of `families`, measured from `start_ns` to `time_ns` (Unix ns).
pub fn request(
    families: &[MetricFamily],
    origin: &Origin,
    start_ns: u64,
    time_ns: u64,
) -> ExportMetricsServiceRequest {
    let mut attributes = vec![
        string_kv("service.name", "tboxscope"),
        string_kv("service.version", &origin.version),
        string_kv("host.name", &origin.host_name),
    ];
    if let Some(id) = &origin.tbox_id {
        attributes.push(string_kv("tbox.id", id));
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "tboxscope".to_owned(),
                    version: origin.version.clone(),
                    ..InstrumentationScope::default()
                }),
                metrics: families
                    .iter()
                    .map(|f| metric(f, start_ns, time_ns))
                    .collect(),
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

/// One POST of `body`.
fn post(target: &OtlpTarget, body: &[u8]) -> Result<(), OtlpError> {
    let io = |source| OtlpError::Io {
        target: target.authority.clone(),
        source,
    };
    let addr = target
        .authority
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| io(std::io::Error::other("the host has no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, ATTEMPT_TIMEOUT).map_err(io)?;
    stream.set_read_timeout(Some(ATTEMPT_TIMEOUT)).map_err(io)?;
    stream
        .set_write_timeout(Some(ATTEMPT_TIMEOUT))
        .map_err(io)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tboxscope/{}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        target.path,
        target.authority,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .map_err(io)?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_once(' '))
        .map(|(_, s)| s.trim().to_owned())
        .unwrap_or_default();
    let code: u16 = status
        .split(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if (200..300).contains(&code) {
        return Ok(());
    }
    Err(OtlpError::Status {
        target: target.authority.clone(),
        status: if status.is_empty() {
            "nothing".to_owned()
        } else {
            status
        },
        retryable: matches!(code, 0 | 429 | 502 | 503 | 504),
    })
}

/// Sends `body`, retrying with backoff while the error is retryable and `stop` is not set,
/// counting each failed attempt in `hub`. Returns the last error when it gave up.
pub fn export(
    target: &OtlpTarget,
    body: &[u8],
    hub: Option<&MetricsHub>,
    stop: Option<&AtomicBool>,
) -> Result<(), OtlpError> {
    let counts = hub.and_then(MetricsHub::otlp_counts);
    let mut waits = BACKOFF.iter();
    loop {
        match post(target, body) {
            Ok(()) => {
                if let Some(c) = counts {
                    c.exported.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(());
            }
            Err(e) => {
                if let Some(c) = counts {
                    c.failed_attempts.fetch_add(1, Ordering::Relaxed);
                }
                log::warn!("{e}");
                let stopping = stop.is_some_and(|s| s.load(Ordering::Relaxed));
                match waits.next() {
                    Some(wait) if e.retryable() && !stopping => sleep_unless(*wait, stop),
                    _ => {
                        if let Some(c) = counts {
                            c.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// Sleeps `d`, waking early when `stop` is set.
fn sleep_unless(d: Duration, stop: Option<&AtomicBool>) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
    }
}

/// The encoded request for the hub's newest snapshot; `now_ns` when the engine has no time yet.
fn encode(hub: &MetricsHub, origin: &Origin, now_ns: u64) -> Vec<u8> {
    let snapshot = hub.latest();
    let time = if snapshot.ts_ns > 0 {
        snapshot.ts_ns
    } else {
        now_ns
    };
    let start = if snapshot.started_ns > 0 {
        snapshot.started_ns
    } else {
        time
    };
    request(&hub.families(), origin, start, time).encode_to_vec()
}

/// A live mode's pusher: every interval, the hub's newest figures; once more when stopped.
#[derive(Debug)]
pub struct OtlpPusher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpPusher {
    /// Starts pushing `hub` to `target` every `interval` from a thread of its own.
    pub fn start(
        target: OtlpTarget,
        interval: Duration,
        hub: MetricsHub,
        origin: Origin,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tboxscope-otlp".into())
            .spawn(move || push_loop(&target, interval, &hub, &origin, &flag))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for OtlpPusher {
    /// Pushes the last figures (one attempt) and stops.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn push_loop(
    target: &OtlpTarget,
    interval: Duration,
    hub: &MetricsHub,
    origin: &Origin,
    stop: &AtomicBool,
) {
    let interval = interval.max(Duration::from_millis(100));
    let mut next = Instant::now() + interval;
    loop {
        sleep_unless(next.saturating_duration_since(Instant::now()), Some(stop));
        let stopping = stop.load(Ordering::Relaxed);
        let now_ns = probe_user::capture::clock::WallClock::unix_now();
        let body = encode(hub, origin, now_ns);
        // Retried until the next push is due at the latest; the last push gets one attempt.
        let _ = export(target, &body, Some(hub), Some(stop));
        if stopping {
            return;
        }
        next += interval;
        // Whole intervals that went by while this push was retried: those pushes are skipped,
        // counted; a push due less than an interval ago goes at once.
        let late = Instant::now().saturating_duration_since(next);
        let skipped = (late.as_nanos() / interval.as_nanos()) as u64;
        if skipped > 0 {
            if let Some(c) = hub.otlp_counts() {
                c.dropped.fetch_add(skipped, Ordering::Relaxed);
            }
            let ahead = u32::try_from(skipped)
                .ok()
                .and_then(|n| interval.checked_mul(n))
                .unwrap_or(late);
            next += ahead;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_user::output::metrics::{Histogram as Hist, Unit};

    #[test]
    fn urls() {
        let t = OtlpTarget::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("127.0.0.1:4318", "/v1/metrics")
        );
        let t = OtlpTarget::parse("http://collector/otlp/v1/metrics").unwrap();
        assert_eq!(
            (t.authority.as_str(), t.path.as_str()),
            ("collector:4318", "/otlp/v1/metrics")
        );
        assert!(OtlpTarget::parse("https://c:4318")
            .unwrap_err()
            .to_string()
            .contains("https"));
        assert!(OtlpTarget::parse("c:4318").is_err());
        assert!(OtlpTarget::parse("http:///v1/metrics").is_err());
    }

    #[test]
    fn histograms_go_as_per_bucket_counts() {
        let f = MetricFamily {
            name: "tboxscope_path_latency_seconds",
            help: "h",
            kind: MetricKind::Histogram,
            unit: Unit::Seconds,
            samples: vec![Sample {
                labels: vec![("path", "4G".to_owned())],
                value: Value::Histogram(Hist {
                    buckets: vec![(0.001, 1), (0.01, 5), (0.1, 5)],
                    count: 7,
                    sum: 0.5,
                }),
            }],
        };
        let m = metric(&f, 1, 2);
        assert_eq!(m.unit, "s");
        let Some(metric::Data::Histogram(h)) = m.data else {
            panic!("not a histogram: {m:?}");
        };
        let p = &h.data_points[0];
        assert_eq!(p.bucket_counts, [1, 4, 0, 2]);
        assert_eq!(p.explicit_bounds, [0.001, 0.01, 0.1]);
        assert_eq!((p.count, p.sum), (7, Some(0.5)));
    }

    /// Nobody listening: each attempt fails, the export is given up and counted as dropped.
    #[test]
    fn a_refused_export_is_counted_as_dropped() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let target = OtlpTarget::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let hub = MetricsHub::new(probe_user::output::metrics::MetricsOptions::default(), true);
        let stop = AtomicBool::new(true);
        assert!(export(&target, b"x", Some(&hub), Some(&stop)).is_err());
        let c = hub.otlp_counts().unwrap();
        assert_eq!(c.failed_attempts.load(Ordering::Relaxed), 1);
        assert_eq!(c.dropped.load(Ordering::Relaxed), 1);
    }
}
