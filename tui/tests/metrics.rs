#![expect(clippy::unwrap_used)]
//! The metrics outputs checked by tools tboxscope did not write: `promtool check metrics` on
//! `analyze --metrics`, an OTLP receiver that decodes with OpenTelemetry's official Python
//! protobuf definitions (`otlp/receiver.py`), and a real Prometheus server scraping
//! `lab run --metrics-listen` and answering queries through its own HTTP API. `xtask setup`
//! installs prometheus (with promtool) and the Python package.
mod four_captures;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

fn tboxscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(args)
        .output()
        .unwrap()
}

/// A child process killed (and waited for) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The OTLP receiver: its port, and the JSON lines it prints, one per request.
fn receiver(refuse_first: u32) -> (Killed, u16, Receiver<Value>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(refuse_first.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    (Killed(child), port, rx)
}

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// The families of a Prometheus text exposition with their types.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_owned(), t.to_owned())
        })
        .collect()
}

fn analyze_with_metrics(dir: &Path, extra: &[&str]) -> (Output, String) {
    let files = four_captures::write_captures(dir);
    let prom = dir.join("tboxscope.prom");
    let mut args: Vec<String> = vec!["analyze".into()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--metrics".into(), prom.display().to_string()]);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tboxscope(&args);
    let text = std::fs::read_to_string(&prom).unwrap_or_default();
    (out, text)
}

/// `analyze --metrics` of four captures (both ends of a 40 ms and a 25 ms path, one KCP flow
/// sent on both): promtool finds nothing to say, and the figures are the captures'.
#[test]
fn analyze_metrics_file_passes_promtool_and_holds_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = analyze_with_metrics(dir.path(), &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(promtool(&text), "", "{text}");
    let s = samples(&text);
    let n = f64::from(four_captures::MESSAGES);
    // Every copy took 40 ms on t-eth0 and 25 ms on t-eth1, one way.
    for (path, below, above) in [("t-eth0", "0.03", "0.05"), ("t-eth1", "0.02", "0.03")] {
        let bucket = |le: &str| {
            s[&format!("tboxscope_path_latency_seconds_bucket{{path=\"{path}\",le=\"{le}\"}}")]
        };
        assert_eq!(
            s[&format!("tboxscope_path_latency_seconds_count{{path=\"{path}\"}}")],
            n,
            "{text}"
        );
        assert_eq!(bucket(below), 0.0, "{path}\n{text}");
        assert_eq!(bucket(above), n, "{path}\n{text}");
        assert_eq!(s[&format!("tboxscope_path_up{{path=\"{path}\"}}")], 1.0);
        assert_eq!(
            s[&format!("tboxscope_path_outages_total{{path=\"{path}\"}}")],
            0.0
        );
    }
    let dup: Vec<_> = s
        .iter()
        .filter(|(k, _)| k.starts_with("tboxscope_flow_duplication_ratio{"))
        .collect();
    assert_eq!(dup.len(), 1, "{text}");
    assert_eq!(*dup[0].1, 1.0, "{text}");
    assert_eq!(s["tboxscope_flows_folded"], 0.0);
    assert_eq!(s["tboxscope_message_latency_seconds_count"], n, "{text}");
    // The health counters of copies held through outages: nothing held, late or regrouped.
    for name in HELD_AND_LATE {
        assert_eq!(s[&format!("{name}_total")], 0.0, "{name}\n{text}");
    }
}

/// The health counters of copies held through outages and of late copies (counters).
const HELD_AND_LATE: [&str; 4] = [
    "tboxscope_late_copies",
    "tboxscope_messages_held",
    "tboxscope_messages_held_too_long",
    "tboxscope_messages_regrouped",
];

fn attribute(attrs: &Value, key: &str) -> Option<String> {
    attrs.as_array()?.iter().find(|a| a["key"] == key).map(|a| {
        a["value"]["stringValue"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
}

/// The metrics of an OTLP request by name.
fn otlp_metrics(request: &Value) -> BTreeMap<String, Value> {
    request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_owned(), m.clone()))
        .collect()
}

/// The data point of `metric` whose attribute `key` is `value`.
fn point<'a>(metric: &'a Value, kind: &str, key: &str, value: &str) -> &'a Value {
    metric[kind]["dataPoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| attribute(&p["attributes"], key).as_deref() == Some(value))
        .unwrap_or_else(|| panic!("no {key}={value} in {metric}"))
}

fn as_u64(v: &Value) -> u64 {
    v.as_str()
        .map_or_else(|| v.as_u64().unwrap(), |s| s.parse().unwrap())
}

/// `analyze --otlp` sends what `--metrics` writes: the same families, the same figures, with
/// the resource attributes; the first attempt refused with 503 is retried.
#[test]
fn analyze_pushes_the_same_figures_over_otlp() {
    let (_receiver, port, requests) = receiver(1);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let (out, text) = analyze_with_metrics(dir.path(), &["--otlp", &url, "--tbox-id", "T-0042"]);
    assert!(out.status.success(), "{out:?}");
    let wait = Duration::from_secs(10);
    assert_eq!(requests.recv_timeout(wait).unwrap()["refused"], 503);
    let request = requests.recv_timeout(wait).unwrap();
    let resource = &request["resourceMetrics"][0]["resource"]["attributes"];
    assert_eq!(attribute(resource, "tbox.id").as_deref(), Some("T-0042"));
    assert_eq!(
        attribute(resource, "service.name").as_deref(),
        Some("tboxscope")
    );
    assert_eq!(
        attribute(resource, "service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        attribute(resource, "host.name").as_deref(),
        Some(host.trim())
    );
    let metrics = otlp_metrics(&request);
    // The same families: counters without `_total`, info with `_info`.
    let names: Vec<String> = types(&text)
        .into_iter()
        .map(|(n, t)| match t.as_str() {
            "counter" => n.strip_suffix("_total").unwrap().to_owned(),
            _ => n,
        })
        .collect();
    assert_eq!(metrics.keys().cloned().collect::<Vec<_>>(), {
        let mut n = names.clone();
        n.sort();
        n
    });
    let s = samples(&text);
    for path in ["t-eth0", "t-eth1"] {
        let packets = point(&metrics["tboxscope_path_packets"], "sum", "path", path);
        assert_eq!(
            packets["asDouble"].as_f64().unwrap(),
            s[&format!("tboxscope_path_packets_total{{path=\"{path}\"}}")]
        );
        let latency = &metrics["tboxscope_path_latency_seconds"];
        assert_eq!(latency["unit"], "s");
        let h = point(latency, "histogram", "path", path);
        assert_eq!(
            as_u64(&h["count"]) as f64,
            s[&format!("tboxscope_path_latency_seconds_count{{path=\"{path}\"}}")]
        );
        // Per-bucket counts in OTLP, cumulative in Prometheus: the same distribution.
        let bounds = h["explicitBounds"].as_array().unwrap();
        let counts: Vec<u64> = h["bucketCounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(as_u64)
            .collect();
        let mut cumulative = 0;
        for (bound, n) in bounds.iter().zip(&counts) {
            cumulative += n;
            let le = bound.as_f64().unwrap();
            let key = s
                .keys()
                .find(|k| {
                    k.starts_with(&format!(
                        "tboxscope_path_latency_seconds_bucket{{path=\"{path}\",le=\""
                    )) && k.ends_with("\"}")
                        && k.rsplit("le=\"")
                            .next()
                            .unwrap()
                            .trim_end_matches("\"}")
                            .parse::<f64>()
                            .ok()
                            == Some(le)
                })
                .unwrap();
            assert_eq!(cumulative as f64, s[key], "{key}");
        }
        assert_eq!(h["startTimeUnixNano"], four_captures::T0.to_string());
    }
    for name in HELD_AND_LATE {
        let sum = &metrics[name]["sum"];
        assert_eq!(sum["isMonotonic"], true, "{name}");
        assert_eq!(
            sum["dataPoints"][0]["asDouble"].as_f64(),
            Some(s[&format!("{name}_total")]),
            "{name}"
        );
    }
    let packets = &metrics["tboxscope_path_packets"]["sum"];
    assert_eq!(packets["isMonotonic"], true);
    assert_eq!(
        packets["aggregationTemporality"],
        "AGGREGATION_TEMPORALITY_CUMULATIVE"
    );
}

/// An unreachable collector fails `analyze --otlp` with the reason, after the retries.
#[test]
fn analyze_says_when_the_collector_cannot_be_reached() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/v1/metrics");
    let (out, _) = analyze_with_metrics(dir.path(), &["--otlp", &url]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("OTLP export to 127.0.0.1:{port}")),
        "{err}"
    );
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One GET on loopback; the body.
fn http_get(port: u16, target: &str) -> Option<String> {
    http_get_as(port, target, "*/*")
}

/// One GET on loopback with an `Accept` header; the body.
fn http_get_as(port: u16, target: &str, accept: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_owned())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' answer to an instant query: `(labels, value)` per series.
fn query(port: u16, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let body = http_get(
        port,
        &format!("/api/v1/query?query={}", percent_encode(promql)),
    )
    .unwrap_or_else(|| panic!("query {promql} failed"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels = r["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            let value = r["value"][1].as_str().unwrap().parse().unwrap();
            (labels, value)
        })
        .collect()
}

fn value_of(series: &[(BTreeMap<String, String>, f64)], path: &str) -> f64 {
    series
        .iter()
        .find(|(l, _)| l.get("path").map(String::as_str) == Some(path))
        .map_or_else(|| panic!("no path {path} in {series:?}"), |(_, v)| *v)
}

/// Takes the lab down when dropped, whatever happened.
struct LabDown(String);

impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .args(["lab", "--prefix", &self.0, "down"])
            .output();
    }
}

/// A real Prometheus scrapes `lab run S4 --metrics-listen` every second while an OTLP receiver
/// gets the same figures pushed every second: Prometheus' own query API shows the per-path
/// latency quantiles and the S4 outage of path A (5 s), and the last OTLP push says the same.
/// (Prometheus 2.42 asks for OpenMetrics first, so this reads the OpenMetrics form; promtool
/// above checks the Prometheus text form.)
#[test]
#[ignore = "needs root"]
fn lab_run_is_scraped_by_prometheus_and_pushed_over_otlp() {
    let dir = tempfile::tempdir().unwrap();
    let (metrics_port, prom_port) = (free_port(), free_port());
    let (_receiver, otlp_port, pushes) = receiver(0);
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tboxscope\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let data: PathBuf = dir.path().join("data");
    let _prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian package; cargo xtask setup installs it)"),
    );
    let prefix = format!("tbxmet{}-", std::process::id());
    let _down = LabDown(prefix.clone());
    let mut lab = Killed(
        Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .args(["lab", "--prefix", &prefix, "run", "S4", "--duration", "12s"])
            .args(["--transports", "tcp,kcp-dual,quic-redundant"])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .args(["--otlp", &format!("http://127.0.0.1:{otlp_port}")])
            .args(["--otlp-interval", "1s", "--tbox-id", "lab-tbox"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Bounded: 12 s of messages, the drain, setting up and taking down the lab.
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(s) = lab.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "lab run still running after 240 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut report = String::new();
    lab.0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut report)
        .unwrap();
    let mut err = String::new();
    lab.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    println!("{report}\n{err}");
    assert!(status.success(), "{report}\n{err}");
    // Prometheus scraped the run (the target is gone now: ranges see the samples it took).
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    println!("prometheus: {log}");
    let up = query(prom_port, "max_over_time(up{job=\"tboxscope\"}[10m])");
    assert_eq!(up.first().map(|s| s.1), Some(1.0), "{up:?}");
    // The S4 outage: path A down 5 s. (The live engine may also open a short outage while
    // the captures start or stop; the 5 s are on path A alone.)
    let outages = query(
        prom_port,
        "last_over_time(tboxscope_path_outages_total{job=\"tboxscope\"}[10m])",
    );
    assert!(value_of(&outages, "tbox-eth0") >= 1.0, "{outages:?}");
    let outage_s = query(
        prom_port,
        "last_over_time(tboxscope_path_outage_seconds_total{job=\"tboxscope\"}[10m])",
    );
    let (a_down, b_down) = (
        value_of(&outage_s, "tbox-eth0"),
        value_of(&outage_s, "tbox-eth1"),
    );
    println!("outages {outages:?}\noutage seconds {outage_s:?}");
    // As long as the one the lab injected (its own timing: about 5 s on a busy machine).
    let injected: f64 = report
        .lines()
        .find_map(|l| l.strip_prefix("outage injected on path A: "))
        .and_then(|l| l.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        a_down >= injected - 0.3 && a_down - b_down >= injected - 1.0,
        "injected {injected} s: {outage_s:?}"
    );
    let down = query(
        prom_port,
        "min_over_time(tboxscope_path_up{job=\"tboxscope\",path=\"tbox-eth0\"}[10m])",
    );
    assert_eq!(down.first().map(|s| s.1), Some(0.0), "seen down: {down:?}");
    let quantile = |q: f64| {
        query(
            prom_port,
            &format!(
                "histogram_quantile({q}, sum by (path, le) (last_over_time(tboxscope_path_latency_seconds_bucket{{job=\"tboxscope\"}}[10m])))"
            ),
        )
    };
    let (p50, p99) = (quantile(0.5), quantile(0.99));
    println!("P50 {p50:?}\nP99 {p99:?}");
    // Path A 40±10 ms one way, path B 25±8 ms.
    let (a50, b50) = (value_of(&p50, "tbox-eth0"), value_of(&p50, "tbox-eth1"));
    assert!((0.02..=0.075).contains(&a50), "{p50:?}");
    assert!((0.01..=0.05).contains(&b50), "{p50:?}");
    assert!(a50 > b50, "{p50:?}");
    for path in ["tbox-eth0", "tbox-eth1"] {
        let p = value_of(&p99, path);
        assert!(p >= value_of(&p50, path) && p <= 30.0, "{p99:?}");
    }
    // The kernel's view of the TCP baseline through the 5 s outage: retransmissions after
    // timeouts, the RTO backed off, head-of-line stalls.
    let scalar = |promql: &str| query(prom_port, promql).first().map_or(0.0, |s| s.1);
    let rto = scalar(
        "sum(last_over_time(tboxscope_tcp_retransmits_total{job=\"tboxscope\",kind=\"rto\"}[10m]))",
    );
    let backoff = scalar("max(max_over_time(tboxscope_tcp_backoff_level{job=\"tboxscope\"}[10m]))");
    let stalls = scalar(
        "last_over_time(tboxscope_hol_stalls_total{job=\"tboxscope\",protocol=\"tcp\"}[10m])",
    );
    let stall_s = scalar(
        "last_over_time(tboxscope_hol_stall_seconds_total{job=\"tboxscope\",protocol=\"tcp\"}[10m])",
    );
    println!(
        "TCP: {rto} RTO retransmissions, backoff up to {backoff}, {stalls} HOL stalls, {stall_s} s"
    );
    // The stalls hold the TCP stream through the outage: seconds, not milliseconds.
    assert!(rto >= 1.0 && backoff >= 2.0 && stalls >= 1.0 && stall_s >= 3.0);
    // The OTLP receiver got a push a second, the last one (at exit, after the last scrape)
    // with at least the outage Prometheus saw.
    let received: Vec<Value> = pushes.try_iter().collect();
    assert!(received.len() >= 10, "{} pushes", received.len());
    let last = otlp_metrics(received.last().unwrap());
    let resource = &received.last().unwrap()["resourceMetrics"][0]["resource"]["attributes"];
    assert_eq!(attribute(resource, "tbox.id").as_deref(), Some("lab-tbox"));
    let outage = point(
        &last["tboxscope_path_outage_seconds"],
        "sum",
        "path",
        "tbox-eth0",
    );
    assert!(outage["asDouble"].as_f64().unwrap() >= a_down, "{outage}");
    let latency = point(
        &last["tboxscope_path_latency_seconds"],
        "histogram",
        "path",
        "tbox-eth0",
    );
    assert!(as_u64(&latency["count"]) > 0);
    // Its own counters travel with it (a push over a second late on this busy machine is
    // counted as dropped, so only their presence is checked).
    let ok = point(&last["tboxscope_otlp_exports"], "sum", "result", "ok");
    assert!(ok["asDouble"].as_f64().unwrap() >= 9.0, "{ok}");
    assert!(last["tboxscope_otlp_dropped"]["sum"]["dataPoints"][0]["asDouble"].is_number());
}

/// `promtool check metrics` on `text`: what it says (nothing when it has nothing to say).
fn promtool(text: &str) -> String {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; cargo xtask setup installs it)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        said
    } else {
        format!("failed: {said}")
    }
}

/// `capture --metrics-listen` on loopback while a KCP exchange runs over it: the endpoint
/// answers while the capture goes on, with the path's packets and ACK-timed latency, in a form
/// promtool finds nothing to say about, and in OpenMetrics when asked; SIGTERM ends both.
#[test]
#[ignore = "needs root"]
fn capture_serves_its_live_figures() {
    use tboxscope_test_support::pcap::kcp_segment;
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    // The sender is the end with the higher port (a client's ephemeral port beside a
    // server's), as on a T-Box: the engine times its pushes to the ACKs.
    let (mut peer, mut tbox) = (
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
    );
    if tbox.local_addr().unwrap().port() < peer.local_addr().unwrap().port() {
        std::mem::swap(&mut peer, &mut tbox);
    }
    let udp_port = peer.local_addr().unwrap().port();
    let json = dir.path().join("capture.jsonl");
    let mut capture = Killed(
        Command::new(env!("CARGO_BIN_EXE_tboxscope"))
            .args(["capture", "-i", "lo=loop", "--no-tcp", "--kcp-port"])
            .arg(udp_port.to_string())
            .args([
                "--filter",
                &format!("udp port {udp_port}"),
                "--duration",
                "60s",
            ])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .arg("--json")
            .arg(&json)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(metrics_port, "/metrics").is_none() {
        assert!(Instant::now() < deadline, "no /metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Give libpcap time to open lo, then 100 messages acknowledged 2 ms later.
    std::thread::sleep(Duration::from_secs(1));
    for sn in 0..100_u32 {
        let push = kcp_segment(9, 81, 0, 128, sn, sn, sn, &[0x42; 200]);
        tbox.send_to(&push, ("127.0.0.1", udp_port)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let ack = kcp_segment(9, 82, 0, 128, sn, sn, sn + 1, &[]);
        peer.send_to(&ack, tbox.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(8));
    }
    // Messages of a flow seen on one path close after the message timeout: their latency
    // comes a few seconds after their packets.
    let packets = "tboxscope_path_packets_total{path=\"loop\"}";
    let latency = "tboxscope_path_latency_seconds_count{path=\"loop\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = http_get(metrics_port, "/metrics").unwrap();
        let s = samples(&text);
        if s.get(packets).copied().unwrap_or(0.0) >= 200.0
            && s.get(latency).copied().unwrap_or(0.0) >= 100.0
        {
            break text;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(promtool(&text), "", "{text}");
    let s = samples(&text);
    assert_eq!(
        s["tboxscope_path_latency_seconds_bucket{path=\"loop\",le=\"0.001\"}"], 0.0,
        "{text}"
    );
    let om = http_get_as(
        metrics_port,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    )
    .unwrap();
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE tboxscope_path_packets counter\n"));
    let pid = capture.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = capture.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        http_get(metrics_port, "/metrics").is_none(),
        "the endpoint ended with the capture"
    );
}

/// The metrics options are refused where they would mean nothing, and a URL this exporter
/// cannot send to fails before any decoding.
#[test]
fn metrics_options_are_refused_where_they_mean_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = four_captures::write_captures(dir.path());
    let file = files[0].display().to_string();
    let out = tboxscope(&["--metrics-listen", "127.0.0.1:0", "analyze", &file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--metrics-listen"),
        "{err}"
    );
    let out = tboxscope(&["analyze", &file, "--otlp", "https://collector:4318"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("https is not supported"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "refused before decoding");
    let out = tboxscope(&[
        "lab",
        "run",
        "S4",
        "--no-capture",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not with --no-capture"),
        "{err}"
    );
}
