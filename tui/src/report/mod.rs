//! The picture report (`analyze --report DIR`, `lab run --report DIR`): one self-contained
//! HTML page (no script, no network) with SVG plots drawn by plotters and the figures beside
//! each — latency CDF and tail with the independent-paths prediction, the timeline with
//! outages, HOL stalls and RTO backoffs, copies won per path, amplification per flow, the
//! kernel's TCP congestion window per connection, and the advice with its evidence. Each plot
//! is also written beside the page as an SVG file.

mod charts;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use probe_user::engine::advice::{self, Advice};
use probe_user::engine::input::{CongestionControl, TcpEvent, TcpEventKind};
use probe_user::engine::record::{Record, WindowRecord};
use probe_user::engine::snapshot::{LatencyKind, Percentiles};
use probe_user::engine::thinned::Thinned;
use probe_user::engine::Summary;

/// Copies a path needs for its tail (the share later than a latency) to be drawn.
const MIN_TAIL_SAMPLES: usize = 100;
/// TCP connections whose congestion window is drawn; the others are counted.
const MAX_TCP_TRACES: usize = 16;

/// What the report draws, collected from the engine's records and the kernel's TCP events
/// as a run goes (bounded: each series evenly thinned, see [`Thinned`]).
#[derive(Clone, Debug, Default)]
pub struct ReportData {
    /// Per path label: each copy's latency (µs).
    copies: BTreeMap<String, Thinned<u64>>,
    /// Messages carried on more than one path: their latency, first arrival (µs).
    combined: Thinned<u64>,
    /// The engine's one-second windows.
    windows: Thinned<WindowRecord>,
    /// Retransmission timeouts the captures saw: (time ns, path, backoff level).
    wire_rtos: Thinned<(u64, String, u8)>,
    /// Retransmission timeouts the kernel reported: (time ns, path, backoff level).
    kernel_rtos: Thinned<(u64, String, u8)>,
    /// Per TCP connection seen by the kernel's probes.
    tcp: BTreeMap<String, TcpTrace>,
    /// TCP connections beyond [`MAX_TCP_TRACES`], not drawn.
    tcp_not_drawn: u64,
    /// The span of what was collected (ns): the plots' time axis.
    span: Option<(u64, u64)>,
}

/// One TCP connection's congestion window over time, from the kernel.
#[derive(Clone, Debug, Default)]
struct TcpTrace {
    path: String,
    /// (time ns, cwnd, ssthresh) in segments.
    samples: Thinned<(u64, u32, u32)>,
    /// Retransmissions: (time ns, cwnd then).
    retransmits: Thinned<(u64, u32)>,
    /// Retransmission timeouts: (time ns, cwnd then, backoff level).
    timeouts: Thinned<(u64, u32, u8)>,
    /// The congestion-control algorithms the socket ran, in the order first seen (one, unless
    /// the program switched it).
    algorithms: Vec<CongestionControl>,
}

impl TcpTrace {
    /// "cubic", "cubic → bbr", or "algorithm unknown".
    fn algorithm(&self) -> String {
        if self.algorithms.is_empty() {
            return "algorithm unknown".to_owned();
        }
        let names: Vec<&str> = self
            .algorithms
            .iter()
            .map(CongestionControl::as_str)
            .collect();
        names.join(" → ")
    }
}

impl ReportData {
    fn saw(&mut self, ns: u64) {
        if ns == 0 {
            return;
        }
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(ns), b.max(ns)),
            None => (ns, ns),
        });
    }

    /// Takes what the report needs from one engine record.
    pub fn record(&mut self, r: &Record) {
        self.saw(r.ts_ns());
        match r {
            Record::Message(m) => {
                for c in &m.copies {
                    let Some(l) = c.latency_us else { continue };
                    match self.copies.get_mut(&c.path) {
                        Some(t) => t.push(l),
                        None => {
                            let mut t = Thinned::default();
                            t.push(l);
                            self.copies.insert(c.path.clone(), t);
                        }
                    }
                }
                if m.copies.len() > 1 {
                    if let Some(l) = m.latency_us {
                        self.combined.push(l);
                    }
                }
            }
            Record::Window(w) => self.windows.push(w.clone()),
            Record::TcpRto(t) => self.wire_rtos.push((t.ts_ns, t.path.clone(), t.backoff)),
            _ => {}
        }
    }

    /// Takes a kernel TCP event: the socket's congestion window, its retransmissions and
    /// timeouts.
    pub fn tcp_event(&mut self, e: &TcpEvent) {
        self.saw(e.ts_ns);
        let name = format!("{} → {}", e.local, e.remote);
        if !self.tcp.contains_key(&name) {
            if self.tcp.len() >= MAX_TCP_TRACES {
                self.tcp_not_drawn += 1;
                return;
            }
            self.tcp.insert(
                name.clone(),
                TcpTrace {
                    path: e.path.clone(),
                    ..TcpTrace::default()
                },
            );
        }
        let Some(t) = self.tcp.get_mut(&name) else {
            return;
        };
        let f = &e.figures;
        if let Some(cc) = f.congestion_control {
            if t.algorithms.last() != Some(&cc) && t.algorithms.len() < 8 {
                t.algorithms.push(cc);
            }
        }
        if f.cwnd > 0 {
            t.samples.push((e.ts_ns, f.cwnd, f.ssthresh));
        }
        match e.kind {
            TcpEventKind::Retransmit { .. } => t.retransmits.push((e.ts_ns, f.cwnd)),
            TcpEventKind::RtoExpired => {
                t.timeouts.push((e.ts_ns, f.cwnd, f.backoff));
                self.kernel_rtos.push((e.ts_ns, e.path.clone(), f.backoff));
            }
            _ => {}
        }
    }
}

/// The page's input: what was run, the engine's summary, what was collected, the advice.
pub struct Page<'a> {
    /// What produced it (`analyze a.pcap b.pcap`, `lab run S4`).
    pub title: String,
    /// The run's summary.
    pub summary: &'a Summary,
    /// The series.
    pub collected: &'a ReportData,
    /// The advice, when the run measured enough for one.
    pub advice: Option<&'a Advice>,
}

/// A plot: its file name, its SVG, and the figures shown beside it (HTML).
struct Plot {
    file: String,
    svg: String,
    caption: String,
}

/// Writes `DIR/report.html` and each plot as `DIR/NAME.svg`; returns the page's path.
pub fn write(dir: &Path, page: &Page) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create report directory {}", dir.display()))?;
    let sections = sections(page)?;
    let mut html = String::with_capacity(1 << 18);
    head(&mut html, page);
    for (id, heading, intro, plots) in &sections {
        let _ = write!(html, "<section id=\"{id}\"><h2>{}</h2>", escape(heading));
        html.push_str(intro);
        for p in plots {
            let _ = write!(
                html,
                "<figure>{}<figcaption>{}</figcaption></figure>",
                p.svg, p.caption
            );
            let path = dir.join(&p.file);
            std::fs::write(&path, &p.svg)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        html.push_str("</section>\n");
    }
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, html).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

type Section = (&'static str, &'static str, String, Vec<Plot>);

fn sections(page: &Page) -> anyhow::Result<Vec<Section>> {
    let s = page.summary;
    let c = page.collected;
    let paths: Vec<String> = s.paths.iter().map(|p| p.label.clone()).collect();
    let (start_ns, end_ns) = span(page);
    let mut out = Vec::new();

    // The advice first: it is the page's conclusion.
    let advice_html = match page.advice {
        Some(a) => format!("<pre>{}</pre>", escape(&advice::render(a))),
        None => "<p>No advice: no path's delay was measured (the advice needs a flow's \
                 copies seen at both ends, or the T-Box's own with acknowledgments).</p>"
            .to_owned(),
    };
    out.push((
        "advice",
        "The transport this link wants",
        advice_html,
        Vec::new(),
    ));

    // Latency.
    let kind = latency_words(s.latency.kind);
    let mut series: Vec<(String, Vec<f64>)> = c
        .copies
        .iter()
        .map(|(p, t)| (p.clone(), sorted_ms(t.kept())))
        .collect();
    if c.combined.seen() > 0 {
        series.push((COMBINED.to_owned(), sorted_ms(c.combined.kept())));
    }
    let mut table = String::from(
        "<table><tr><th>path</th><th>copies</th><th>P50</th><th>P90</th><th>P99</th>\
         <th>P999</th><th>max</th></tr>",
    );
    for p in &s.paths {
        percentile_row(&mut table, &p.label, &p.latency);
    }
    if s.latency.combined.count > 0 {
        percentile_row(&mut table, "first copy (combined)", &s.latency.combined);
    }
    table.push_str("</table>");
    let thinned: u64 = c
        .copies
        .values()
        .map(|t| t.seen() - t.kept().len() as u64)
        .sum();
    let intro = format!(
        "<p>Latency is {kind}.</p>{table}{}",
        if thinned > 0 {
            format!(
                "<p class=\"note\">The curves draw an even sample of the copies ({thinned} \
                 not drawn); the table is over all of them.</p>"
            )
        } else {
            String::new()
        }
    );
    let mut plots = Vec::new();
    if series.iter().any(|(_, v)| !v.is_empty()) {
        plots.push(Plot {
            file: "latency-cdf.svg".into(),
            svg: charts::latency_cdf(&series, &paths)?,
            caption: format!(
                "Share of copies delivered within a latency ({kind}), per path \
                              and for the first copy of messages carried on several paths."
            ),
        });
    }
    let tail_worth = series.iter().any(|(_, v)| v.len() >= MIN_TAIL_SAMPLES);
    if tail_worth {
        let predicted: Vec<(f64, f64)> = s
            .latency
            .tail
            .iter()
            .map(|t| (t.t_us as f64 / 1000.0, t.predicted))
            .collect();
        plots.push(Plot {
            file: "latency-tail.svg".into(),
            svg: charts::latency_tail(&series, &predicted, &paths)?,
            caption: format!(
                "The tail: share of copies later than a latency (log scale). Dashed: what \
                 independent paths predict for the first copy (the product of the paths' \
                 tails). {}",
                escape(&s.latency.verdict)
            ),
        });
    }
    let intro = if tail_worth || series.is_empty() {
        intro
    } else {
        format!(
            "{intro}<p class=\"note\">No tail plot: fewer than {MIN_TAIL_SAMPLES} copies on \
             every path.</p>"
        )
    };
    out.push(("latency", "Latency", intro, plots));

    // Timeline. The kernel's timeouts where its probes ran (the captures see the same ones
    // again), else the wire's.
    let (rtos, rto_source) = if c.kernel_rtos.seen() > 0 {
        (&c.kernel_rtos, "the kernel's")
    } else {
        (&c.wire_rtos, "seen on the wire")
    };
    let mut intro = String::new();
    let _ = write!(
        intro,
        "<p>{} outage(s), {} HOL incident(s), {} TCP retransmission timeout(s) ({rto_source}).</p>",
        s.outages_total,
        s.incidents_total,
        rtos.seen()
    );
    if !s.outages.is_empty() {
        intro.push_str(
            "<table><tr><th>path</th><th>from (s)</th><th>lasted</th><th>carried by the \
             others</th><th>lost</th><th>seen as</th></tr>",
        );
        for o in &s.outages {
            let _ = write!(
                intro,
                "<tr><td>{}</td><td>{:.1}</td><td>{:.2} s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&o.path),
                o.start_ns.saturating_sub(start_ns) as f64 / 1e9,
                o.duration_ns as f64 / 1e9,
                o.carried_by_others,
                o.lost,
                escape(&o.evidence)
            );
        }
        intro.push_str("</table>");
    }
    let mut plots = Vec::new();
    if c.windows.seen() > 0 || !s.outages.is_empty() {
        plots.push(Plot {
            file: "timeline.svg".into(),
            svg: charts::timeline(
                start_ns,
                end_ns,
                c.windows.kept(),
                &s.outages,
                &s.hol_incidents,
                rtos.kept(),
                &paths,
            )?,
            caption: "Per second, each path's P50 (thin) and P99 (thick) latency; outages \
                      shaded in the path's colour; HOL stalls (triangles) and RTO backoffs \
                      (crosses, the backoff level above) marked when they began."
                .into(),
        });
    }
    // Which path won says something only where messages went over several.
    if c.windows.kept().iter().any(|w| w.win_rates.len() > 1) {
        plots.push(Plot {
            file: "copies-won.svg".into(),
            svg: charts::wins(start_ns, end_ns, c.windows.kept(), &paths)?,
            caption: "Per second, the share of messages whose first copy came over each path."
                .into(),
        });
    }
    out.push(("timeline", "Timeline", intro, plots));

    // Amplification.
    let mut intro = String::from(
        "<table><tr><th>flow</th><th>protocol</th><th>wire bytes</th><th>unique payload</th>\
         <th>ratio</th><th>retransmissions</th><th>ACK-only</th><th>FEC and other</th></tr>",
    );
    for a in &s.amplification {
        let _ = write!(
            intro,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}×</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&a.flow),
            escape(&a.protocol),
            a.wire_bytes,
            a.unique_payload_bytes,
            a.ratio,
            a.retransmit_bytes,
            a.ack_bytes,
            a.overhead_bytes
        );
    }
    intro.push_str("</table>");
    let mut plots = Vec::new();
    if s.amplification.iter().any(|a| a.unique_payload_bytes > 0) {
        plots.push(Plot {
            file: "amplification.svg".into(),
            svg: charts::amplification(&s.amplification)?,
            caption: "Wire bytes per byte of unique payload, per flow: the payload itself, \
                      retransmissions, ACK-only packets, FEC and other overhead, and the rest \
                      (headers, and the copies redundant sending adds)."
                .into(),
        });
    }
    out.push(("amplification", "Bandwidth amplification", intro, plots));

    // TCP.
    let mut plots = Vec::new();
    for (i, (name, t)) in c.tcp.iter().enumerate() {
        if t.samples.seen() == 0 {
            continue;
        }
        plots.push(Plot {
            file: format!("tcp-{}.svg", i + 1),
            svg: charts::tcp_window(
                &format!("{name} on {} · {}", t.path, t.algorithm()),
                start_ns,
                end_ns,
                t.samples.kept(),
                t.retransmits.kept(),
                t.timeouts.kept(),
            )?,
            caption: format!(
                "{} on {}, congestion control <b>{}</b>: the kernel's congestion window and \
                 slow-start threshold (segments), {} retransmission(s) (dots) and {} \
                 timeout(s) (crosses, the backoff level above).",
                escape(name),
                escape(&t.path),
                escape(&t.algorithm()),
                t.retransmits.seen(),
                t.timeouts.seen()
            ),
        });
    }
    let intro = if c.tcp.is_empty() {
        "<p>No kernel TCP events in this input: the congestion window is known to the kernel \
         only (its eBPF probes in <code>lab run</code>, the live UI and <code>capture \
         --json</code>, whose recording <code>analyze</code> takes beside the captures). The \
         wire's TCP view is in the timeline (RTO backoffs) and in the text report.</p>"
            .to_owned()
    } else if c.tcp_not_drawn > 0 {
        format!(
            "<p class=\"note\">{} event(s) of connections beyond the first {MAX_TCP_TRACES} \
             were not drawn.</p>",
            c.tcp_not_drawn
        )
    } else {
        String::new()
    };
    out.push(("tcp", "TCP congestion window", intro, plots));

    // Health.
    let h = &s.health;
    let intro = format!(
        "<p>{} observations; evicted {} flow(s), {} message(s), {} stream(s); {} record(s) \
         dropped; {} packet(s) dropped by libpcap; {} QUIC packet(s) not decrypted.</p>{}",
        h.observations,
        h.evicted_flows,
        h.evicted_messages,
        h.evicted_streams,
        h.dropped_records,
        h.pcap_dropped,
        h.decrypt_failures,
        h.inferences
            .iter()
            .map(|i| format!("<p class=\"note\">{}</p>", escape(i)))
            .collect::<String>()
    );
    out.push(("health", "Capture health", intro, Vec::new()));
    Ok(out)
}

/// The time span the plots cover (ns): from the earliest of what was collected and the
/// summary's start to the latest end.
fn span(page: &Page) -> (u64, u64) {
    let s = page.summary;
    let known = |ns: u64| (ns > 0).then_some(ns);
    let (first, last) = page.collected.span.unwrap_or((0, 0));
    let start = [known(first), known(s.start_ns)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0);
    (start, last.max(s.end_ns).max(start))
}

/// The combined series' name.
const COMBINED: &str = "first copy (combined)";

fn head(html: &mut String, page: &Page) {
    let (start_ns, end_ns) = span(page);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tboxscope report — {title}</title><style>\
         body{{font-family:sans-serif;max-width:1100px;margin:1em auto;color:#222}}\
         h1{{margin-bottom:0}} .sub,.note{{color:#666}} figure{{margin:1em 0}}\
         figure svg{{max-width:100%;height:auto;border:1px solid #ddd}}\
         table{{border-collapse:collapse;margin:.5em 0}} td,th{{border:1px solid #ccc;\
         padding:2px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}\
         pre{{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}}\
         </style></head><body><h1>tboxscope report</h1><p class=\"sub\">{title} — {:.1} s \
         of traffic from {}, tboxscope {}</p>\n",
        end_ns.saturating_sub(start_ns) as f64 / 1e9,
        chrono::DateTime::from_timestamp_nanos(i64::try_from(start_ns).unwrap_or(i64::MAX))
            .format("%Y-%m-%d %H:%M:%S UTC"),
        env!("CARGO_PKG_VERSION"),
        title = escape(&page.title),
    );
}

fn percentile_row(table: &mut String, name: &str, p: &Percentiles) {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
    let _ = write!(
        table,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        escape(name),
        p.count,
        ms(p.p50_us),
        ms(p.p90_us),
        ms(p.p99_us),
        ms(p.p999_us),
        ms(p.max_us)
    );
}

fn latency_words(kind: LatencyKind) -> &'static str {
    match kind {
        LatencyKind::OneWay => "one-way: first send to first arrival, both ends captured",
        LatencyKind::AckRtt => {
            "measured from one end: first send to its first acknowledgment (ACK delay removed \
             for QUIC)"
        }
    }
}

fn sorted_ms(us: &[u64]) -> Vec<f64> {
    let mut v: Vec<f64> = us.iter().map(|&u| u as f64 / 1000.0).collect();
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// `s` with HTML's special characters escaped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(ch),
        }
    }
    out
}
