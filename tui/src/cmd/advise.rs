//! `tboxscope advise`: the captures decoded and matched as by `analyze`, every message record
//! and the summary made into evidence, each transport option replayed on it, the
//! recommendation written as a report or an `advice` JSON line.
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use probe_user::analyze::Analyzer;
use probe_user::correlate::{unmet_statements, FrameFeed};
use probe_user::engine::advice::{self, Advice, Limits};
use probe_user::engine::{Config as EngineConfig, Engine};
use probe_user::pipeline::{decode_and_match_fed, worth_a_thread};
use serde::Serialize;

use crate::cli::{files_engine_config, refuse_repeated_files, AdviseArgs};

/// The `advice` JSON line.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    advice: &'a Advice,
}

/// Runs `tboxscope advise`.
pub fn run(args: AdviseArgs) -> anyhow::Result<ExitCode> {
    refuse_repeated_files(&args.files)?;
    for (name, v) in [
        ("--sla-p99", args.sla_p99_ms),
        ("--uplink-kbps", args.uplink_kbps),
    ] {
        if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            anyhow::bail!("{name} must be a positive number");
        }
    }
    let mut analyzer = Analyzer::new(args.decode.dissect_config()?);
    let config = EngineConfig {
        collect_evidence: true,
        emit_messages: false,
        // No snapshot is taken: the event log would never be read.
        max_events: 0,
        ..files_engine_config(&args.decode, &args.timeout, &args.stated)?
    };
    let statements = args.stated.captures();
    let matched = decode_and_match_fed(
        &mut analyzer,
        &args.files,
        &statements,
        Engine::new(config),
        (),
        |_, ()| Ok::<(), io::Error>(()),
        worth_a_thread(),
        FrameFeed::default(),
    )?;
    let mut engine = matched.engine;
    for (label, end) in analyzer.capture_ends() {
        engine.capture_ended(label, end);
    }
    let summary = engine.finish(matched.last_ts);
    let evidence = engine.evidence(&summary);
    for e in &matched.file_errors {
        eprintln!("tboxscope: {e}");
    }
    let unknown = unmet_statements(&statements, analyzer.paths());
    if !unknown.is_empty() {
        anyhow::bail!(
            "no capture is labelled {} (the captures: {})",
            unknown.join(", "),
            analyzer.paths().join(", ")
        );
    }
    let limits = Limits {
        sla_p99_ms: args.sla_p99_ms,
        uplink_kbps: args.uplink_kbps,
    };
    let Some(advice) = evidence.and_then(|e| advice::advise(e, limits)) else {
        anyhow::bail!(
            "no advice: the captures hold no message whose delay could be measured on a path \
             (see `tboxscope analyze` of the same files: are they T-Box control traffic, is \
             --keylog needed for QUIC?)"
        );
    };
    match &args.json {
        Some(target) => {
            let mut out: Box<dyn Write> = if target == "-" {
                Box::new(io::stdout().lock())
            } else {
                Box::new(BufWriter::new(File::create(target).with_context(|| {
                    format!("cannot create JSON output {target}")
                })?))
            };
            serde_json::to_writer(
                &mut out,
                &Line {
                    kind: "advice",
                    advice: &advice,
                },
            )?;
            writeln!(out)?;
            out.flush()?;
        }
        None => print!("{}", advice::render(&advice)),
    }
    Ok(if matched.file_errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
