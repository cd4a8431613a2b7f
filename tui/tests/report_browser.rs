#![expect(clippy::unwrap_used)]
//! The picture report in a real browser. `analyze --report DIR` of captures (two paths at both
//! ends, and Chrome's public QUIC capture) writes one self-contained page: headless Chromium
//! (Debian's) renders it and each of its SVG plots without a console error or a failed load,
//! each plot is drawn (its screenshot is not blank), and each SVG is valid XML with the paths'
//! labels in it. `lab run S4 --report DIR` (root) draws the handover's outage and the TCP
//! baseline's congestion window from the kernel.

mod four_captures;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tboxscope_test_support::fixture;

/// Runs `tboxscope analyze FILES... --report DIR`; the report's directory listing.
fn analyze_report(files: &[PathBuf], extra: &[&str], dir: &Path) -> Vec<PathBuf> {
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .arg("analyze")
        .args(files)
        .args(extra)
        .arg("--report")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("picture report written to"), "{stderr}");
    listing(dir)
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Headless Chromium shows `target` at `size` into `png`; its log (stderr).
fn screenshot(target: &Path, size: (u32, u32), png: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "60", "chromium"])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", target.display()))
        .output()
        .expect("chromium (Debian package `chromium`; `cargo xtask setup` installs it)");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {log}");
    for bad in ["CONSOLE", "Failed to load", "net::ERR_", "Uncaught"] {
        assert!(
            !log.lines().any(|l| l.contains(bad)),
            "{} logged {bad}: {log}",
            target.display()
        );
    }
    log
}

/// The share of a PNG's pixels that are not (near) white, the share that are coloured (not
/// grey: the data's lines and bars, not the axes and the grid), and how many distinct colours
/// it has.
fn ink(png: &Path) -> (f64, f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let (mut inked, mut coloured, mut total) = (0u64, 0u64, 0u64);
    let mut colours = HashSet::new();
    for p in pixels.chunks_exact(channels) {
        total += 1;
        let (r, g, b) = (p[0], p[1], p[2]);
        if r.min(g).min(b) < 235 {
            inked += 1;
        }
        if r.max(g).max(b) - r.min(g).min(b) > 60 {
            coloured += 1;
        }
        colours.insert((r >> 3, g >> 3, b >> 3));
    }
    let total = total.max(1) as f64;
    (inked as f64 / total, coloured as f64 / total, colours.len())
}

/// The SVG's root attributes (width, height) and all its text, after checking it is valid XML
/// whose root is an `svg` element with something drawn in it.
fn parse_svg(path: &Path) -> ((u32, u32), String) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not valid XML: {e}", path.display()));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg", "{}", path.display());
    let size = (
        root.attribute("width").unwrap().parse().unwrap(),
        root.attribute("height").unwrap().parse().unwrap(),
    );
    let shapes = root
        .descendants()
        .filter(|n| {
            matches!(
                n.tag_name().name(),
                "polyline" | "rect" | "circle" | "path" | "line"
            )
        })
        .count();
    assert!(shapes > 20, "{}: {shapes} shapes", path.display());
    let words: String = root
        .descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" ");
    (size, words)
}

/// Every SVG of the report: valid, rendered by Chromium without errors and not blank (at
/// least `data` of each plot's pixels coloured: its lines, dots and bars, not only axes and
/// grid); the page too, self-contained, holding every plot. Returns each SVG's text by file
/// name.
fn check_report(dir: &Path, data_share: f64) -> Vec<(String, String)> {
    let files = listing(dir);
    let page = dir.join("report.html");
    assert!(files.contains(&page), "{files:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing loaded from anywhere (the SVG namespace is a name, not a load).
    let without_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for needle in ["http://", "https://", "src=", "href=", "<script", "<link"] {
        assert!(!without_ns.contains(needle), "report.html holds {needle}");
    }
    let shots = tempfile::tempdir().unwrap();
    let mut texts = Vec::new();
    for svg in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "svg"))
    {
        let name = svg.file_name().unwrap().to_string_lossy().into_owned();
        let (size, words) = parse_svg(svg);
        // The page holds this very plot.
        let body = std::fs::read_to_string(svg).unwrap();
        assert!(html.contains(body.trim()), "report.html lacks {name}");
        let png = shots.path().join(format!("{name}.png"));
        screenshot(svg, size, &png);
        let (share, data, colours) = ink(&png);
        assert!(
            share > 0.02 && data >= data_share && colours >= 4,
            "{name} rendered blank: {share:.4} inked, {data:.4} coloured, {colours} colours"
        );
        texts.push((name, words));
    }
    let png = shots.path().join("page.png");
    screenshot(&page, (1100, 3000), &png);
    let (share, data, colours) = ink(&png);
    assert!(
        share > 0.05 && data >= data_share && colours >= 8,
        "page: {share:.4} inked, {data:.4} coloured, {colours} colours"
    );
    texts
}

fn text_of<'a>(texts: &'a [(String, String)], name: &str) -> &'a str {
    &texts
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| {
            panic!(
                "no {name} among {:?}",
                texts.iter().map(|t| &t.0).collect::<Vec<_>>()
            )
        })
        .1
}

#[test]
fn analyze_report_of_two_paths_at_both_ends_renders_in_chromium() {
    let caps = tempfile::tempdir().unwrap();
    let files = four_captures::write_captures(caps.path());
    let dir = tempfile::tempdir().unwrap();
    let written = analyze_report(&files, &["--kcp-port", "7101"], dir.path());
    let names: Vec<String> = written
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "amplification.svg",
        "copies-won.svg",
        "latency-cdf.svg",
        "latency-tail.svg",
        "report.html",
        "timeline.svg",
    ] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let texts = check_report(dir.path(), 0.0008);
    // Each path by its label, and the first copy of messages on both.
    let cdf = text_of(&texts, "latency-cdf.svg");
    for label in ["t-eth0", "t-eth1", "first copy (combined)"] {
        assert!(cdf.contains(label), "latency-cdf.svg lacks {label}: {cdf}");
    }
    let timeline = text_of(&texts, "timeline.svg");
    assert!(
        timeline.contains("t-eth0 P99") && timeline.contains("t-eth1 P50"),
        "{timeline}"
    );
    let won = text_of(&texts, "copies-won.svg");
    assert!(won.contains("t-eth0") && won.contains("t-eth1"), "{won}");
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("The transport this link wants"), "{html}");
}

#[test]
fn analyze_report_of_a_public_quic_capture_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    analyze_report(
        &[fixture("chrome-cloudflare-quic-with-secrets.pcapng")],
        &[],
        dir.path(),
    );
    // Two messages in it: little to draw but the axes, a dot or two and the bars.
    let texts = check_report(dir.path(), 0.0);
    assert!(text_of(&texts, "amplification.svg").contains("quic"));
}

#[test]
#[ignore = "needs root"]
fn lab_report_draws_the_handover_and_the_tcp_window_per_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("tr{}-", std::process::id() % 10_000);
    let out = Command::new(env!("CARGO_BIN_EXE_tboxscope"))
        .args(["lab", "run", "S4", "--duration", "20s"])
        .args(["--transports", "quic-redundant,tcp", "--prefix", &prefix])
        .args(["--tcp-cc", "cubic,bbr"])
        .arg("--report")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("picture report:"), "{stdout}");
    let texts = check_report(dir.path(), 0.0008);
    let timeline = text_of(&texts, "timeline.svg");
    assert!(timeline.contains("outage on tbox-eth0"), "{timeline}");
    let tail = text_of(&texts, "latency-tail.svg");
    assert!(tail.contains("independent paths predict"), "{tail}");
    // The TCP baseline once per algorithm: a table row and a window chart each, the chart
    // labelled with the algorithm the kernel's probe read from the socket.
    for row in ["tcp-cubic", "tcp-bbr"] {
        assert!(stdout.contains(row), "no {row} row: {stdout}");
    }
    let tcp: Vec<&(String, String)> = texts
        .iter()
        .filter(|(n, _)| n.starts_with("tcp-"))
        .collect();
    assert_eq!(
        tcp.len(),
        2,
        "one TCP plot per algorithm: {:?}",
        texts.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    for algorithm in ["cubic", "bbr"] {
        let plot = tcp
            .iter()
            .find(|(_, t)| t.contains(&format!("tbox-eth0 · {algorithm}")))
            .unwrap_or_else(|| panic!("no TCP plot labelled {algorithm}: {tcp:?}"));
        assert!(plot.1.contains("cwnd"), "{}", plot.1);
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("congestion control <b>bbr</b>"), "{html}");
}
