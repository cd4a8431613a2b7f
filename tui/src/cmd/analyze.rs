//! `tboxscope analyze`: decode capture files; JSON Lines per packet and a summary, or a short
//! readable report.
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use probe_user::analyze::{write_record, Analyzer, FileSummary};
use probe_user::capture::clock::WallClock;
use probe_user::correlate::{unmet_statements, CaptureHint, Correlator, FrameFeed};
use probe_user::dissect::DissectStats;
use probe_user::engine::{
    self as tboxscope_engine, advice, report, Config as EngineConfig, Engine, Host,
};
use probe_user::output::qlog::QlogExport;
use probe_user::output::{JsonLinesWriter, OutputError};
use probe_user::pipeline::{decode_and_match_fed, worth_a_thread, Matched};
use serde::Serialize;

use crate::cli::{files_engine_config, refuse_repeated_files, AnalyzeArgs};
use tboxscope::options::changed_nothing;
use tboxscope::report::{Page, ReportData};

/// Runs `tboxscope analyze`.
pub fn run(mut args: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    refuse_repeated_files(&args.files)?;
    let (captures, kernel) = kernel_recordings(&args.files)?;
    args.files = captures;
    if args.files.is_empty() {
        anyhow::bail!(
            "no packet capture given: a capture --json recording is analysed beside the \
             captures of its time (tboxscope analyze t-eth0.pcap kernel.jsonl)"
        );
    }
    if let Some(dir) = &args.qlog {
        // Before the files are read, not after.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create qlog directory {}", dir.display()))?;
    }
    super::metrics::check_otlp(&args.otlp)?;
    let mut config = args.decode.dissect_config()?;
    config.unknown_udp = args.unknown_udp;
    let mut analyzer = Analyzer::new(config);
    let json_target = match (&args.json, args.packets) {
        (Some(t), _) => Some(t.clone()),
        (None, true) => Some("-".to_owned()),
        (None, false) => None,
    };
    let config = EngineConfig {
        // The text report shows only the summary: per-message records would be dropped
        // (the picture report draws them).
        emit_messages: json_target.is_some() || args.report.is_some(),
        // The advice after the report (and its record).
        collect_evidence: true,
        // No snapshot is taken: the event log would never be read.
        max_events: 0,
        ..files_engine_config(&args.decode, &args.timeout, &args.stated)?
    };
    let statements = args.stated.captures();
    let mut pictures = args.report.as_ref().map(|_| {
        let mut c = ReportData::default();
        kernel.events.iter().for_each(|e| c.tcp_event(e));
        c
    });
    let mut ineffective = Vec::new();
    let mut hosts = HashMap::new();
    let ok = match json_target {
        Some(target) => {
            let out: Box<dyn Write + Send> = if target == "-" {
                Box::new(BufWriter::with_capacity(1 << 16, io::stdout()))
            } else {
                let file = File::create(&target)
                    .with_context(|| format!("cannot create JSON output {target}"))?;
                Box::new(BufWriter::with_capacity(1 << 16, file))
            };
            run_json(
                &args,
                &mut analyzer,
                config,
                kernel,
                &statements,
                out,
                &mut ineffective,
                &mut hosts,
                &mut pictures,
            )?
        }
        None => {
            let matched = decode_and_match_fed(
                &mut analyzer,
                &args.files,
                &statements,
                kernel.engine(&config),
                pictures.take(),
                |r, pictures| {
                    collect_record(r, pictures);
                    Ok::<(), io::Error>(())
                },
                worth_a_thread(),
                kernel.feed(),
            )?;
            print_report(&analyzer)?;
            let mut engine = matched.engine;
            pictures = matched.state;
            for (label, end) in analyzer.capture_ends() {
                engine.capture_ended(label, end);
            }
            let summary = engine.finish(matched.last_ts);
            collect_records(&mut engine, &mut pictures);
            let advice = advice_of(&engine, &summary);
            write_pictures(&args, pictures.as_ref(), &summary, advice.as_ref())?;
            writeln!(std::io::stdout())?;
            write!(std::io::stdout(), "{}", report::render(&summary))?;
            if let Some(a) = &advice {
                write!(
                    std::io::stdout(),
                    "\nthe transport this link wants (as `tboxscope advise`, without limits):\n{}",
                    advice::render(a)
                )?;
            }
            export_metrics(&args, &analyzer, &summary)?;
            ineffective = changed_nothing(&config, analyzer.dissector().app_ids_read(), &summary);
            hosts = capture_hosts(&summary);
            for e in &matched.file_errors {
                eprintln!("tboxscope: {e}");
            }
            matched.file_errors.is_empty()
        }
    };
    if let Some(dir) = &args.qlog {
        write_qlog(&args, dir, hosts)?;
    }
    // A statement about a capture no file has was not applied: say so, and fail the run.
    let unknown = unmet_statements(&statements, analyzer.paths());
    if !unknown.is_empty() {
        eprintln!(
            "tboxscope: no capture is labelled {} (the captures: {}); those statements were not applied",
            unknown.join(", "),
            analyzer.paths().join(", ")
        );
    }
    for e in &ineffective {
        eprintln!("tboxscope: {e}");
    }
    Ok(if ok && unknown.is_empty() && ineffective.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The kernel's TCP events of the `capture --json` recordings given beside the captures.
#[derive(Debug, Default)]
struct KernelRecording {
    /// In time order.
    events: Vec<probe_user::engine::TcpEvent>,
    /// The last line of the recordings (the probes ran until then).
    end_ns: Option<u64>,
}

impl KernelRecording {
    /// An engine that joins these events with the captures'.
    fn engine(&self, config: &EngineConfig) -> Engine {
        let mut engine = Engine::new(config.clone());
        if let Some(end) = self.end_ns {
            engine.kernel_ended(end);
        }
        engine
    }

    /// A feed putting the events between the packets, in time order.
    fn feed(&self) -> FrameFeed {
        FrameFeed::with_kernel(self.events.clone())
    }
}

/// Whether `path` holds JSON Lines (a `capture --json` recording) rather than a packet
/// capture: its first byte that is not white space opens a JSON object.
fn is_json_lines(path: &Path) -> bool {
    use std::io::Read;
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(64);
    if file.take(64).read_to_end(&mut head).is_err() {
        return false;
    }
    head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Splits `files` into packet captures and `capture --json` recordings, and reads the kernel's
/// TCP events of the latter (lines that cannot be used are named on standard error).
fn kernel_recordings(files: &[PathBuf]) -> anyhow::Result<(Vec<PathBuf>, KernelRecording)> {
    let mut captures = Vec::new();
    let mut kernel = KernelRecording::default();
    for path in files {
        if !is_json_lines(path) {
            captures.push(path.clone());
            continue;
        }
        let recording = tboxscope::replay::load::load(path)?;
        let before = kernel.events.len();
        for timed in &recording.items {
            if let tboxscope::replay::load::Item::Tcp(e) = &timed.item {
                kernel.events.push((**e).clone());
            }
        }
        let bad: Vec<String> = recording
            .skipped
            .iter()
            .filter(|(reason, _)| reason.starts_with("bad tcp_"))
            .map(|(reason, n)| format!("{reason}: {n}"))
            .collect();
        if !bad.is_empty() {
            eprintln!(
                "tboxscope: {}: kernel TCP lines not used: {}",
                path.display(),
                bad.join(", ")
            );
        }
        if kernel.events.len() == before {
            eprintln!(
                "tboxscope: {}: no kernel TCP event (tcp_* lines of capture --json with its probes)",
                path.display()
            );
        }
        let end = recording.end_ns();
        kernel.end_ns = Some(kernel.end_ns.map_or(end, |e| e.max(end)));
    }
    kernel.events.sort_by_key(|e| e.ts_ns);
    Ok((captures, kernel))
}

/// The final `summary` record.
#[derive(Serialize)]
struct Summary<'a> {
    files: &'a [FileSummary],
    /// Path labels of the files' interfaces (the engine's per-path figures are in `paths`).
    path_labels: &'a [String],
    frames: &'a DissectStats,
    kcp: KcpSummary,
    quic: &'a probe_user::decode::quic::QuicStats,
    fragments: probe_user::decode::net::FragmentStats,
    errors: Vec<String>,
    warnings: &'a [String],
    /// The engine's whole-run figures (flows, paths, redundancy, latency, outages, HOL).
    #[serde(flatten)]
    engine: &'a tboxscope_engine::Summary,
}

/// The `kcp` part of a `summary` record (also written by `capture`).
#[derive(Serialize)]
pub(crate) struct KcpSummary {
    raw: u64,
    kcpgo: u64,
    kcpgo_parity: u64,
    kcpgo_oob: u64,
    encrypted_or_unknown: u64,
    segments: u64,
    rejected: std::collections::BTreeMap<&'static str, u64>,
}

fn kcp_summary(analyzer: &Analyzer) -> KcpSummary {
    kcp_counts(analyzer.dissector())
}

/// The KCP detector's counters of `dissector`, as summaries write them.
pub(crate) fn kcp_counts(dissector: &probe_user::dissect::Dissector) -> KcpSummary {
    let s = dissector.kcp_stats();
    KcpSummary {
        raw: s.raw,
        kcpgo: s.kcpgo,
        kcpgo_parity: s.kcpgo_parity,
        kcpgo_oob: s.kcpgo_oob,
        encrypted_or_unknown: s.encrypted_or_unknown,
        segments: s.segments,
        rejected: s
            .rejections()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.as_str(), n))
            .collect(),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the run's inputs and what it reports back"
)]
fn run_json(
    args: &AnalyzeArgs,
    analyzer: &mut Analyzer,
    config: EngineConfig,
    kernel: KernelRecording,
    statements: &[(String, CaptureHint)],
    out: Box<dyn Write + Send>,
    ineffective: &mut Vec<String>,
    hosts: &mut HashMap<String, Host>,
    pictures: &mut Option<ReportData>,
) -> anyhow::Result<bool> {
    #[derive(Serialize)]
    struct Header<'a> {
        command: &'a str,
        files: Vec<String>,
        packets: bool,
    }
    let header = Header {
        command: "analyze",
        files: probe_user::analyze::file_list(&args.files),
        packets: args.packets,
    };
    let writer = JsonLinesWriter::new(out, WallClock::unix_now(), &header)?;
    let engine = kernel.engine(&config);
    let matched = if args.packets {
        // Each packet's line is followed by the records it completed: one thread.
        let mut correlator = Correlator::with_sink(engine);
        correlator.state_all(statements);
        let mut sink = (writer, pictures.take());
        let mut feed = kernel.feed();
        let file_errors = analyzer.run_files(&args.files, &mut |r| {
            feed.observe(&mut correlator, &r);
            write_record(&mut sink.0, &r)?;
            write_and_collect(correlator.engine_mut(), &mut sink)
        })?;
        feed.flush_kernel(&mut correlator);
        write_and_collect(correlator.engine_mut(), &mut sink)?;
        Matched {
            engine: correlator.into_sink(),
            state: sink,
            file_errors,
            last_ts: feed.last_ts(),
            waits: None,
        }
    } else {
        decode_and_match_fed(
            analyzer,
            &args.files,
            statements,
            engine,
            (writer, pictures.take()),
            write_and_collect_one,
            worth_a_thread(),
            kernel.feed(),
        )?
    };
    let Matched {
        mut engine,
        state: mut sink,
        file_errors: errors,
        last_ts,
        ..
    } = matched;
    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
    for (label, end) in analyzer.capture_ends() {
        engine.capture_ended(label, end);
    }
    let engine_summary = engine.finish(last_ts);
    *ineffective = changed_nothing(
        &config,
        analyzer.dissector().app_ids_read(),
        &engine_summary,
    );
    *hosts = capture_hosts(&engine_summary);
    write_and_collect(&mut engine, &mut sink)?;
    let (mut writer, collected) = sink;
    *pictures = collected;
    let kcp = kcp_summary(analyzer);
    let fragments = analyzer.dissector().fragment_stats();
    let summary = Summary {
        files: analyzer.files(),
        path_labels: analyzer.paths(),
        frames: analyzer.stats(),
        kcp,
        quic: analyzer.dissector().quic_stats(),
        fragments,
        errors: errors.clone(),
        warnings: analyzer.warnings(),
        engine: &engine_summary,
    };
    let advice = advice_of(&engine, &engine_summary);
    if let Some(a) = &advice {
        writer.write("advice", last_ts, a)?;
    }
    writer.write("summary", last_ts, &summary)?;
    write_pictures(args, pictures.as_ref(), &engine_summary, advice.as_ref())?;
    writer.flush()?;
    export_metrics(args, analyzer, &engine_summary)?;
    for e in &errors {
        eprintln!("tboxscope: {e}");
    }
    Ok(errors.is_empty())
}

/// Hands the engine's finished records to the picture report's collection, if any.
fn collect_records(engine: &mut Engine, pictures: &mut Option<ReportData>) {
    engine
        .drain_records()
        .for_each(|r| collect_record(&r, pictures));
}

/// Hands one of the engine's finished records to the picture report's collection, if any.
fn collect_record(record: &tboxscope_engine::Record, pictures: &mut Option<ReportData>) {
    if let Some(c) = pictures {
        c.record(record);
    }
}

/// Writes one of the engine's finished records as a JSON line, handing it to the picture
/// report's collection too.
fn write_and_collect_one<W: Write>(
    record: &tboxscope_engine::Record,
    (writer, pictures): &mut (JsonLinesWriter<W>, Option<ReportData>),
) -> Result<(), OutputError> {
    collect_record(record, pictures);
    writer.write(record.kind(), record.ts_ns(), record)
}

/// Writes the engine's finished records as JSON Lines, handing each to the picture report's
/// collection too.
fn write_and_collect<W: Write>(
    engine: &mut Engine,
    sink: &mut (JsonLinesWriter<W>, Option<ReportData>),
) -> Result<(), OutputError> {
    engine
        .drain_records()
        .try_for_each(|r| write_and_collect_one(&r, sink))
}

/// With `--report DIR`, the picture report of the run.
fn write_pictures(
    args: &AnalyzeArgs,
    pictures: Option<&ReportData>,
    summary: &tboxscope_engine::Summary,
    advice: Option<&advice::Advice>,
) -> anyhow::Result<()> {
    let (Some(dir), Some(collected)) = (&args.report, pictures) else {
        return Ok(());
    };
    let files: Vec<String> = args.files.iter().map(|f| f.display().to_string()).collect();
    let page = Page {
        title: format!("analyze {}", files.join(" ")),
        summary,
        collected,
        advice,
    };
    let path = tboxscope::report::write(dir, &page)?;
    eprintln!("tboxscope: picture report written to {}", path.display());
    Ok(())
}

/// The advice on the run's evidence, without limits (`advise` takes them), when the captures
/// measured some path's delay.
fn advice_of(engine: &Engine, summary: &tboxscope_engine::Summary) -> Option<advice::Advice> {
    advice::advise(engine.evidence(summary)?, advice::Limits::default())
}

/// The host of each capture, as stated or inferred by the engine.
fn capture_hosts(summary: &tboxscope_engine::Summary) -> HashMap<String, Host> {
    summary
        .health
        .captures
        .iter()
        .map(|c| (c.name.clone(), c.host))
        .collect()
}

/// `--qlog DIR`: decodes the files again, now that the engine has said which host each capture
/// is on, and writes each decrypted QUIC connection's packets per capture end.
fn write_qlog(args: &AnalyzeArgs, dir: &Path, hosts: HashMap<String, Host>) -> anyhow::Result<()> {
    let mut analyzer = Analyzer::new(args.decode.dissect_config()?);
    let title = format!(
        "tboxscope analyze {}",
        probe_user::analyze::file_list(&args.files).join(" ")
    );
    let mut export = QlogExport::new(dir, hosts, title)?;
    analyzer.run_files(&args.files, &mut |r| export.record(&r))?;
    let s = export.finish()?;
    let mut left_out = Vec::new();
    if s.not_decrypted > 0 {
        left_out.push(format!(
            "{} QUIC packets not decrypted left out",
            s.not_decrypted
        ));
    }
    if s.out_of_order > 0 {
        left_out.push(format!(
            "{} events captured over 20 ms out of time order, written as they came",
            s.out_of_order
        ));
    }
    if s.frames_cut_short > 0 {
        left_out.push(format!(
            "{} packets' frames cut short at a bad frame",
            s.frames_cut_short
        ));
    }
    eprintln!(
        "tboxscope: qlog: {} files for {} QUIC connections, {} packet events, in {}{}{}",
        s.files,
        s.connections,
        s.packet_events,
        dir.display(),
        if left_out.is_empty() { "" } else { "; " },
        left_out.join(", ")
    );
    Ok(())
}

/// `--metrics FILE`, `--otlp URL`: the run's figures as metrics, the QUIC packets the
/// decoders could not decrypt among the capture's health.
fn export_metrics(
    args: &AnalyzeArgs,
    analyzer: &Analyzer,
    summary: &tboxscope_engine::Summary,
) -> anyhow::Result<()> {
    use probe_user::output::metrics::{families, Figures};
    if args.metrics.is_none() && args.otlp.otlp.is_none() {
        return Ok(());
    }
    let mut health = summary.health.clone();
    health.decrypt_failures = analyzer.dissector().quic_stats().not_decrypted_total();
    let figures = Figures {
        health: &health,
        ..Figures::from(summary)
    };
    let families = families(&figures, &super::metrics::options(&args.otlp));
    if let Some(path) = &args.metrics {
        super::metrics::write_file(path, &families)?;
    }
    super::metrics::push_once(&args.otlp, &families, (summary.start_ns, summary.end_ns))
}

fn print_report(analyzer: &Analyzer) -> io::Result<()> {
    let mut out = io::stdout().lock();
    for f in analyzer.files() {
        let format = match f.format {
            Some(fmt) => serde_json::to_value(fmt)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            None => "unreadable".to_owned(),
        };
        writeln!(
            out,
            "{} ({format}): {} frames, paths: {}",
            f.file,
            f.frames,
            f.paths.join(", ")
        )?;
        writeln!(
            out,
            "  kcp segments {:>9}   quic packets {:>9}   other udp {:>9}",
            f.kcp_segments, f.quic_packets, f.other_udp
        )?;
        if let Some(e) = &f.error {
            writeln!(out, "  error: {e}")?;
        }
    }
    let s = analyzer.stats();
    let r = &s.net_rejected;
    writeln!(
        out,
        "total: {} frames, {} UDP datagrams: {} KCP ({} segments), {} QUIC ({} packets), {} other",
        s.frames,
        s.udp,
        s.kcp_datagrams,
        s.kcp_segments,
        s.quic_datagrams,
        s.quic_packets,
        s.other_udp
    )?;
    if s.udp_cut > 0 {
        writeln!(
            out,
            "UDP: {} datagrams cut short by the capture's snap length, KCP decoded from its headers as far as captured{}{}",
            s.udp_cut,
            if s.kcp_cut_unseen > 0 {
                format!(
                    " ({} with segments past the cut, not seen)",
                    s.kcp_cut_unseen
                )
            } else {
                String::new()
            },
            if s.kcp_cut_unnamed > 0 {
                format!(
                    "; {} data segments cut before the bytes naming their message (matched within their session only)",
                    s.kcp_cut_unnamed
                )
            } else {
                String::new()
            }
        )?;
    }
    if s.tcp + s.tcp_rejected.total() > 0 {
        let rejected = s.tcp_rejected.listed();
        let mtu_rejected = s.path_mtu_rejected.listed();
        writeln!(
            out,
            "TCP: {} segments{}{}{}",
            s.tcp,
            if s.tcp_cut > 0 {
                format!(
                    " ({} cut short by the capture's snap length: lengths from the IP header)",
                    s.tcp_cut
                )
            } else {
                String::new()
            },
            if rejected.is_empty() {
                String::new()
            } else {
                format!("; not decoded: {}", rejected.join(", "))
            },
            match (s.path_mtu, mtu_rejected.is_empty()) {
                (0, true) => String::new(),
                (n, true) => format!("; {n} ICMP too-big signals about segments"),
                (n, false) => format!(
                    "; {n} ICMP too-big signals about segments ({} unreadable)",
                    mtu_rejected.join(", ")
                ),
            }
        )?;
    }
    let q = analyzer.dissector().quic_stats();
    if q.packets > 0 {
        let why: Vec<String> = q
            .not_decrypted
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        writeln!(
            out,
            "QUIC: {} packets, {} decrypted{}{}",
            q.packets,
            q.decrypted,
            if why.is_empty() {
                ""
            } else {
                "; not decrypted: "
            },
            why.join(", ")
        )?;
    }
    if let Some(line) = tboxscope::feed::hunt_line(&q.hunt) {
        writeln!(out, "{line}")?;
    }
    if let Some(line) = tboxscope::feed::framing_line(analyzer.dissector()) {
        writeln!(out, "{line}")?;
    }
    for w in analyzer.warnings() {
        writeln!(out, "warning: {w}")?;
    }
    let kcp = kcp_summary(analyzer);
    if !kcp.rejected.is_empty() {
        let reasons: Vec<String> = kcp
            .rejected
            .iter()
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        writeln!(
            out,
            "UDP not KCP, by first failed rule: {}",
            reasons.join(", ")
        )?;
    }
    writeln!(
        out,
        "not decoded: {} not IP, {} neither UDP nor TCP, {} truncated, {} malformed, {} fragments, {} bad fragments, {} unsupported link",
        r.not_ip, r.not_udp, r.truncated, r.malformed, r.fragment, r.bad_fragment, s.unsupported_link
    )?;
    Ok(())
}
