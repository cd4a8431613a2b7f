//! The report's plots, drawn by plotters' SVG backend (text is left to the browser's fonts).
//! Each function returns one `<svg>` element; a path keeps its colour in every plot.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use probe_user::engine::record::{HolIncident, OutageRecord, WindowRecord};
use probe_user::engine::snapshot::AmplificationView;

/// A point in the drawing, in pixels.
type BackendCoord = (i32, i32);

const WIDTH: u32 = 960;
const HEIGHT: u32 = 400;
const FONT: &str = "sans-serif";

/// Path colours, in the order of the summary's paths (then repeated).
const PATH_COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];
/// The combined (first copy) series and the prediction.
const COMBINED_COLOUR: RGBColor = RGBColor(20, 20, 20);
const HOL_COLOUR: RGBColor = RGBColor(214, 39, 40);
const RTO_COLOUR: RGBColor = RGBColor(188, 40, 150);

/// The colour of series `name` among `paths` (the combined one black).
fn colour(name: &str, paths: &[String]) -> RGBColor {
    match paths.iter().position(|p| p == name) {
        Some(i) => PATH_COLOURS[i % PATH_COLOURS.len()],
        None => COMBINED_COLOUR,
    }
}

/// A chart on `root` titled `title` (in `size` points), with room for the axes' labels.
fn builder<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    size: u32,
    y_labels: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, (FONT, size))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(y_labels);
    b
}

/// The chart's legend at `at`.
fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    at: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .label_font((FONT, 13))
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A legend key: a short line of colour `c`, `width` wide.
fn line_key(c: RGBColor, width: u32) -> impl Fn(BackendCoord) -> PathElement<BackendCoord> {
    move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(width))
}

/// Draws into a fresh SVG of the report's size; returns it.
fn svg(
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    Ok(out)
}

/// Up to `n` points of the CDF of sorted `v`: (value, share at or below it).
fn cdf_points(v: &[f64], n: usize) -> Vec<(f64, f64)> {
    if v.is_empty() {
        return Vec::new();
    }
    let len = v.len();
    let steps = n.min(len).max(1);
    (0..=steps)
        .map(|k| {
            let i = (k * (len - 1)) / steps;
            (v[i], (i + 1) as f64 / len as f64)
        })
        .collect()
}

/// The latency axis (ms, log scale) for sorted `series`: a little beyond their extremes.
fn latency_range(series: &[(String, Vec<f64>)]) -> (f64, f64) {
    let lo = series
        .iter()
        .filter_map(|(_, v)| v.first())
        .fold(f64::INFINITY, |a, &b| a.min(b));
    let lo = if lo.is_finite() {
        lo.max(0.05) * 0.8
    } else {
        0.1
    };
    let hi = series
        .iter()
        .filter_map(|(_, v)| v.last())
        .fold(1.0f64, |a, &b| a.max(b))
        * 1.2;
    (lo, hi.max(lo * 10.0))
}

/// Below this many copies a series' CDF marks each one.
const FEW: usize = 50;

/// The CDF of each series' latency (ms, log scale).
pub fn latency_cdf(series: &[(String, Vec<f64>)], paths: &[String]) -> anyhow::Result<String> {
    let (lo, hi) = latency_range(series);
    svg(HEIGHT, |root| {
        let mut chart = builder(root, "Latency CDF", 20, 55)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("latency (ms)")
            .y_desc("share of copies")
            .draw()?;
        for (name, v) in series {
            let c = colour(name, paths);
            let points = cdf_points(v, 600);
            if v.len() < FEW {
                // A few copies: each one shown.
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
            }
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(format!("{name} ({} copies)", v.len()))
                .legend(line_key(c, 2));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// The tail of each series (share later than x, log scale) and the independent-paths
/// prediction (`(ms, share)`) dashed.
pub fn latency_tail(
    series: &[(String, Vec<f64>)],
    predicted: &[(f64, f64)],
    paths: &[String],
) -> anyhow::Result<String> {
    let n_max = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let floor = (0.5 / n_max as f64).min(1e-3);
    let (lo, hi) = latency_range(series);
    svg(HEIGHT, |root| {
        let mut chart = builder(root, "Latency tail", 20, 65)
            .build_cartesian_2d((lo..hi).log_scale(), (floor..1.0).log_scale())?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("latency (ms)")
            .y_desc("share later than that")
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .draw()?;
        for (name, v) in series {
            let c = colour(name, paths);
            let len = v.len() as f64;
            let points: Vec<(f64, f64)> = cdf_points(v, 800)
                .into_iter()
                .map(|(x, at_or_below)| (x, 1.0 - at_or_below))
                .filter(|&(_, later)| later >= floor && later > 0.0)
                .chain(std::iter::once((
                    v.last().copied().unwrap_or(0.0),
                    1.0 / len,
                )))
                .collect();
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(name.clone())
                .legend(line_key(c, 2));
        }
        let predicted: Vec<(f64, f64)> = predicted
            .iter()
            .copied()
            .filter(|&(x, p)| p >= floor && x >= lo && x <= hi)
            .collect();
        if !predicted.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(
                    predicted,
                    8,
                    5,
                    COMBINED_COLOUR.stroke_width(2),
                ))?
                .label("independent paths predict")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], COMBINED_COLOUR));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}

/// Seconds since `start_ns`.
fn secs(ns: u64, start_ns: u64) -> f64 {
    ns.saturating_sub(start_ns) as f64 / 1e9
}

/// Per window each path's P50 and P99 (ms, log scale), outages shaded, HOL stalls and RTO
/// backoffs marked.
pub fn timeline(
    start_ns: u64,
    end_ns: u64,
    windows: &[WindowRecord],
    outages: &[OutageRecord],
    hol: &[HolIncident],
    rtos: &[(u64, String, u8)],
    paths: &[String],
) -> anyhow::Result<String> {
    let span = secs(end_ns, start_ns).max(1.0);
    let top = windows
        .iter()
        .flat_map(|w| w.per_path.iter().map(|(_, p)| p.p99_us))
        .max()
        .unwrap_or(1000) as f64
        / 1000.0
        * 3.0;
    let top = top.max(10.0);
    let bottom = windows
        .iter()
        .flat_map(|w| {
            w.per_path
                .iter()
                .filter(|(_, p)| p.count > 0)
                .map(|(_, p)| p.p50_us)
        })
        .min()
        .map_or(0.1, |us| (us as f64 / 1000.0 / 3.0).max(0.05));
    svg(HEIGHT + 40, |root| {
        let mut chart = builder(root, "Timeline", 20, 55)
            .build_cartesian_2d(0.0..span, (bottom..top).log_scale())?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("time (s)")
            .y_desc("latency (ms)")
            .draw()?;
        for o in outages {
            let c = colour(&o.path, paths);
            let from = secs(o.start_ns, start_ns);
            let to = secs(o.start_ns.saturating_add(o.duration_ns), start_ns);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(from, bottom), (to.max(from + span / 500.0), top)],
                    c.mix(0.18).filled(),
                )))?
                .label(format!("outage on {}", o.path))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 20, y + 5)], c.mix(0.3).filled())
                });
        }
        for (i, path) in paths.iter().enumerate() {
            let c = PATH_COLOURS[i % PATH_COLOURS.len()];
            let of = |q: fn(&probe_user::engine::snapshot::Percentiles) -> u64| -> Vec<(f64, f64)> {
                windows
                    .iter()
                    .filter_map(|w| {
                        let (_, p) = w.per_path.iter().find(|(l, _)| l == path)?;
                        (p.count > 0)
                            .then(|| (secs(w.end_ns, start_ns), (q(p) as f64 / 1000.0).max(bottom)))
                    })
                    .collect()
            };
            let p99 = of(|p| p.p99_us);
            if p99.is_empty() {
                continue;
            }
            if p99.len() < FEW {
                // A few seconds with messages: each one shown.
                chart.draw_series(p99.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
            }
            chart
                .draw_series(LineSeries::new(of(|p| p.p50_us), c.stroke_width(1)))?
                .label(format!("{path} P50"))
                .legend(line_key(c, 1));
            chart
                .draw_series(LineSeries::new(p99, c.stroke_width(3)))?
                .label(format!("{path} P99"))
                .legend(line_key(c, 3));
        }
        if !hol.is_empty() {
            let y = top / 1.6;
            chart
                .draw_series(hol.iter().map(|h| {
                    TriangleMarker::new((secs(h.start_ns, start_ns), y), 6, HOL_COLOUR.filled())
                }))?
                .label(format!("HOL stall ({})", hol.len()))
                .legend(|(x, y)| TriangleMarker::new((x + 10, y), 6, HOL_COLOUR.filled()));
        }
        if !rtos.is_empty() {
            let y = top / 3.5;
            chart
                .draw_series(rtos.iter().map(|(ts, _, backoff)| {
                    EmptyElement::at((secs(*ts, start_ns), y))
                        + Cross::new((0, 0), 5, RTO_COLOUR.stroke_width(2))
                        + Text::new(format!("{backoff}"), (-3, -18), (FONT, 12).into_font())
                }))?
                .label(format!("RTO backoff ({})", rtos.len()))
                .legend(|(x, y)| Cross::new((x + 10, y), 5, RTO_COLOUR.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
}

/// Per window, the share of messages whose first copy came over each path (%).
pub fn wins(
    start_ns: u64,
    end_ns: u64,
    windows: &[WindowRecord],
    paths: &[String],
) -> anyhow::Result<String> {
    let span = secs(end_ns, start_ns).max(1.0);
    svg(HEIGHT - 100, |root| {
        let mut chart = builder(root, "Copies won per path", 20, 55)
            .build_cartesian_2d(0.0..span, 0.0..105.0)?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("time (s)")
            .y_desc("first copy (%)")
            .draw()?;
        for path in paths {
            let points: Vec<(f64, f64)> = windows
                .iter()
                .filter(|w| w.messages > 0)
                .filter_map(|w| {
                    let (_, r) = w.win_rates.iter().find(|(l, _)| l == path)?;
                    Some((secs(w.end_ns, start_ns), r * 100.0))
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let c = colour(path, paths);
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(path.clone())
                .legend(line_key(c, 2));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}

/// Flows drawn in the amplification plot (the most wire bytes first).
const MAX_FLOWS: usize = 12;

/// Per flow, wire bytes per unique payload byte, stacked by what they were.
pub fn amplification(flows: &[AmplificationView]) -> anyhow::Result<String> {
    let mut flows: Vec<&AmplificationView> = flows
        .iter()
        .filter(|a| a.unique_payload_bytes > 0)
        .collect();
    flows.sort_by_key(|a| std::cmp::Reverse(a.wire_bytes));
    flows.truncate(MAX_FLOWS);
    let n = flows.len();
    let max = flows.iter().map(|a| a.ratio).fold(1.0f64, f64::max) * 1.1;
    let parts = [
        ("payload", RGBColor(31, 119, 180)),
        ("retransmissions", RGBColor(214, 39, 40)),
        ("ACK-only", RGBColor(255, 187, 120)),
        ("FEC and other", RGBColor(148, 103, 189)),
        ("headers and copies", RGBColor(170, 170, 170)),
    ];
    let names: Vec<String> = flows.iter().map(|a| a.flow.clone()).collect();
    svg(120 + 40 * n as u32, |root| {
        let mut chart = builder(root, "Bandwidth amplification per flow", 20, 230)
            .build_cartesian_2d(0.0..max, (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .disable_y_mesh()
            .x_desc("wire bytes per unique payload byte")
            .y_labels(n.max(1))
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        for (k, (label, c)) in parts.iter().enumerate() {
            let bars: Vec<Rectangle<(f64, SegmentValue<usize>)>> = flows
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let u = a.unique_payload_bytes as f64;
                    let shares = [
                        1.0,
                        a.retransmit_bytes as f64 / u,
                        a.ack_bytes as f64 / u,
                        a.overhead_bytes as f64 / u,
                    ];
                    let known: f64 = shares.iter().sum();
                    let rest = (a.ratio - known).max(0.0);
                    let from: f64 = shares.iter().take(k).sum();
                    let width = shares.get(k).copied().unwrap_or(rest);
                    let mut bar = Rectangle::new(
                        [
                            (from, SegmentValue::Exact(i)),
                            (from + width, SegmentValue::Exact(i + 1)),
                        ],
                        c.filled(),
                    );
                    bar.set_margin(6, 6, 0, 0);
                    bar
                })
                .collect();
            let c = *c;
            chart
                .draw_series(bars)?
                .label(*label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], c.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// Linux's "no threshold yet" slow-start threshold and anything near it: not drawn.
const SSTHRESH_UNSET: u32 = 1 << 30;

/// One connection's congestion window and slow-start threshold (segments) over time, its
/// retransmissions (dots on the window) and timeouts (crosses with the backoff level).
pub fn tcp_window(
    title: &str,
    start_ns: u64,
    end_ns: u64,
    samples: &[(u64, u32, u32)],
    retransmits: &[(u64, u32)],
    timeouts: &[(u64, u32, u8)],
) -> anyhow::Result<String> {
    let span = secs(end_ns, start_ns).max(1.0);
    let top = f64::from(
        samples
            .iter()
            .map(|&(_, c, s)| if s < SSTHRESH_UNSET { c.max(s) } else { c })
            .max()
            .unwrap_or(10)
            .max(4),
    ) * 1.15;
    let cwnd: Vec<(f64, f64)> = samples
        .iter()
        .map(|&(t, c, _)| (secs(t, start_ns), f64::from(c)))
        .collect();
    let ssthresh: Vec<(f64, f64)> = samples
        .iter()
        .filter(|&&(_, _, s)| s < SSTHRESH_UNSET)
        .map(|&(t, _, s)| (secs(t, start_ns), f64::from(s)))
        .collect();
    let window = RGBColor(31, 119, 180);
    let threshold = RGBColor(44, 160, 44);
    svg(HEIGHT - 60, |root| {
        let mut chart = builder(root, title, 18, 55).build_cartesian_2d(0.0..span, 0.0..top)?;
        chart
            .configure_mesh()
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("time (s)")
            .y_desc("segments")
            .draw()?;
        chart
            .draw_series(LineSeries::new(cwnd, window.stroke_width(2)))?
            .label("cwnd")
            .legend(line_key(window, 2));
        if !ssthresh.is_empty() {
            chart
                .draw_series(DashedLineSeries::new(
                    ssthresh,
                    6,
                    4,
                    threshold.stroke_width(2),
                ))?
                .label("ssthresh")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], threshold));
        }
        if !retransmits.is_empty() {
            chart
                .draw_series(retransmits.iter().map(|&(t, c)| {
                    Circle::new((secs(t, start_ns), f64::from(c)), 3, HOL_COLOUR.filled())
                }))?
                .label("retransmission")
                .legend(|(x, y)| Circle::new((x + 10, y), 3, HOL_COLOUR.filled()));
        }
        if !timeouts.is_empty() {
            chart
                .draw_series(timeouts.iter().map(|&(t, c, b)| {
                    EmptyElement::at((secs(t, start_ns), f64::from(c)))
                        + Cross::new((0, 0), 6, RTO_COLOUR.stroke_width(2))
                        + Text::new(format!("{b}"), (-3, -20), (FONT, 12).into_font())
                }))?
                .label("RTO (backoff level)")
                .legend(|(x, y)| Cross::new((x + 10, y), 5, RTO_COLOUR.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}
