//! `tboxscope capture`: wires the command line to `probe_user::capture`.
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use probe_user::capture::{self, CaptureOptions};
use probe_user::source::ebpf::{denied_hooks, ProbeOptions, TcpFilter};

use crate::cli::CaptureArgs;

/// Parses `30s`, `2m`, `500ms`, `1h`, `1.5s`.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("bad duration {s:?}: use e.g. 30s, 2m, 500ms"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => anyhow::bail!("bad duration unit in {s:?}: use ms, s, m or h"),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 365.0 * 86400.0 {
        anyhow::bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Runs `tboxscope capture`.
pub fn run(args: CaptureArgs) -> anyhow::Result<ExitCode> {
    // Validate everything the user typed before touching the kernel.
    let filter = TcpFilter::parse(&args.filter.ports, &args.filter.hosts)?;
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;
    let cwnd_interval = parse_duration(&args.cwnd_interval)?;
    let deny = denied_hooks(&args.deny_hooks)?;
    // Open the output before attaching anything, so an unwritable path fails fast.
    let out: Box<dyn Write> = if args.json == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let f = File::create(&args.json)
            .with_context(|| format!("cannot write the JSON output {:?}", args.json))?;
        Box::new(BufWriter::new(f))
    };
    let opts = CaptureOptions {
        probe: ProbeOptions {
            filter,
            cwnd_interval_ns: u64::try_from(cwnd_interval.as_nanos()).unwrap_or(u64::MAX),
            deny,
            ..ProbeOptions::default()
        },
        duration,
        ..CaptureOptions::default()
    };
    let header = serde_json::json!({
        "command": "capture",
        "args": std::env::args().skip(1).collect::<Vec<_>>(),
        "filter": {"ports": args.filter.ports, "hosts": args.filter.hosts},
    });
    let summary = capture::run(opts, out, &header)?;
    log::info!(
        "capture ended ({:?}): {} events, {} connections, drops {:?}",
        summary.stopped_by,
        summary.events,
        summary.connections_seen,
        summary.drops
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("0s").is_err());
    }
}
