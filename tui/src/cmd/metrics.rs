//! `--metrics-listen`, `--otlp` and `analyze --metrics`: the metrics outputs started from the
//! command line.
use anyhow::Context;
use probe_user::output::metrics::{write_textfile, MetricFamily, MetricsOptions};
use prost::Message;
use tboxscope::metrics::otlp::{self, Origin, OtlpPusher, OtlpTarget};
use tboxscope::metrics::serve::MetricsServer;
use tboxscope::metrics::MetricsHub;

use crate::cli::{LiveMetricsArgs, OtlpArgs};

/// How often live modes push over OTLP unless --otlp-interval says.
const DEFAULT_OTLP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// The conversion options of `args`.
pub fn options(args: &OtlpArgs) -> MetricsOptions {
    MetricsOptions {
        tbox_id: args.tbox_id.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..MetricsOptions::default()
    }
}

/// A live mode's metrics outputs; they stop when dropped.
pub struct LiveMetrics {
    /// Where the live mode publishes its snapshots.
    pub hub: MetricsHub,
    _server: Option<MetricsServer>,
    _pusher: Option<OtlpPusher>,
}

impl LiveMetrics {
    /// Starts what `args` asks for (nothing: `None`). A port that cannot be listened on is
    /// an error before any capture starts.
    pub fn start(args: &LiveMetricsArgs) -> anyhow::Result<Option<Self>> {
        if args.listen.is_none() && args.otlp.otlp.is_none() {
            return Ok(None);
        }
        let otlp_target = args
            .otlp
            .otlp
            .as_deref()
            .map(OtlpTarget::parse)
            .transpose()?;
        let interval = match &args.otlp_interval {
            Some(i) => super::capture::parse_duration(i)?,
            None => DEFAULT_OTLP_INTERVAL,
        };
        let hub = MetricsHub::new(options(&args.otlp), otlp_target.is_some());
        let server = match args.listen {
            Some(addr) => {
                let server = MetricsServer::start(addr, hub.clone())
                    .with_context(|| format!("cannot serve metrics on {addr}"))?;
                eprintln!(
                    "tboxscope: metrics at http://{}/metrics",
                    server.local_addr()
                );
                Some(server)
            }
            None => None,
        };
        let pusher = match otlp_target {
            Some(target) => {
                let origin = Origin::here(args.otlp.tbox_id.clone(), env!("CARGO_PKG_VERSION"));
                Some(
                    OtlpPusher::start(target, interval, hub.clone(), origin)
                        .context("starting the OTLP thread")?,
                )
            }
            None => None,
        };
        Ok(Some(Self {
            hub,
            _server: server,
            _pusher: pusher,
        }))
    }
}

/// Refuses an `--otlp` URL this exporter cannot send to, before any work.
pub fn check_otlp(args: &OtlpArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.otlp {
        OtlpTarget::parse(url)?;
    }
    Ok(())
}

/// `analyze --metrics FILE`: writes `families` for node_exporter's textfile collector.
pub fn write_file(path: &std::path::Path, families: &[MetricFamily]) -> anyhow::Result<()> {
    write_textfile(path, families)
        .with_context(|| format!("cannot write the metrics file {}", path.display()))
}

/// `analyze --otlp URL`: pushes `families`, measured from `start_ns` to `end_ns`, once (with
/// the retries).
pub fn push_once(
    args: &OtlpArgs,
    families: &[MetricFamily],
    (start_ns, end_ns): (u64, u64),
) -> anyhow::Result<()> {
    let Some(url) = &args.otlp else {
        return Ok(());
    };
    let target = OtlpTarget::parse(url)?;
    let origin = Origin::here(args.tbox_id.clone(), env!("CARGO_PKG_VERSION"));
    let body = otlp::request(families, &origin, start_ns, end_ns).encode_to_vec();
    otlp::export(&target, &body, None, None)?;
    Ok(())
}
