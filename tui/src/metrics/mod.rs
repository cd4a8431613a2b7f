//! Live metrics: the newest engine snapshot kept for the metrics outputs ([`MetricsHub`]),
//! served at `/metrics` for Prometheus by a thread of its own ([`serve`]). The capture thread
//! only stores a pointer to each snapshot it publishes; the conversion to metric families
//! (`probe_user::output::metrics`) runs on the reader's thread, so a slow or stuck scraper never
//! holds up the capture. The same families are pushed over OTLP ([`otlp`]).
pub mod otlp;
pub mod serve;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use probe_user::output::metrics::{
    families, Figures, MetricFamily, MetricKind, MetricsOptions, Sample, Unit, Value,
};
use tboxscope_engine::snapshot::Snapshot;

/// What the OTLP pusher did, counted (shown as metrics themselves).
#[derive(Debug, Default)]
pub struct OtlpCounts {
    /// Exports the receiver accepted.
    pub exported: AtomicU64,
    /// Attempts that failed (each retry counted).
    pub failed_attempts: AtomicU64,
    /// Exports given up after the retries, or skipped because the previous one was still
    /// being retried.
    pub dropped: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    latest: Mutex<Arc<Snapshot>>,
    options: MetricsOptions,
    otlp: Option<OtlpCounts>,
}

/// The newest snapshot for the metrics outputs; cheap to clone and share between threads.
#[derive(Debug, Clone)]
pub struct MetricsHub {
    inner: Arc<Inner>,
}

impl MetricsHub {
    /// A hub converting with `options`; `otlp` when an OTLP pusher reports into it.
    pub fn new(options: MetricsOptions, otlp: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                latest: Mutex::new(Arc::new(Snapshot::default())),
                options,
                otlp: otlp.then(OtlpCounts::default),
            }),
        }
    }

    /// Replaces the snapshot (a pointer swap under a short lock).
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        *self
            .inner
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = snapshot;
    }

    /// The newest snapshot.
    pub fn latest(&self) -> Arc<Snapshot> {
        Arc::clone(
            &self
                .inner
                .latest
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The conversion options.
    pub fn options(&self) -> &MetricsOptions {
        &self.inner.options
    }

    /// The OTLP pusher's counters, when there is one.
    pub fn otlp_counts(&self) -> Option<&OtlpCounts> {
        self.inner.otlp.as_ref()
    }

    /// The metric families of the newest snapshot, with the OTLP pusher's counters.
    pub fn families(&self) -> Vec<MetricFamily> {
        let snapshot = self.latest();
        let mut out = families(&Figures::from(&*snapshot), &self.inner.options);
        if let Some(c) = &self.inner.otlp {
            out.extend(otlp_families(c));
        }
        out
    }
}

fn counter(name: &'static str, help: &'static str, samples: Vec<Sample>) -> MetricFamily {
    MetricFamily {
        name,
        help,
        kind: MetricKind::Counter,
        unit: Unit::None,
        samples,
    }
}

fn otlp_families(c: &OtlpCounts) -> Vec<MetricFamily> {
    let n = |a: &AtomicU64| Value::Number(a.load(Ordering::Relaxed) as f64);
    let sample = |labels, value| Sample { labels, value };
    vec![
        counter(
            "tboxscope_otlp_exports",
            "OTLP exports by result: ok (accepted), failed (an attempt that failed; retried).",
            vec![
                sample(vec![("result", "ok".to_owned())], n(&c.exported)),
                sample(vec![("result", "failed".to_owned())], n(&c.failed_attempts)),
            ],
        ),
        counter(
            "tboxscope_otlp_dropped",
            "OTLP exports dropped: given up after the retries, or skipped while one was retried.",
            vec![sample(Vec::new(), n(&c.dropped))],
        ),
    ]
}
