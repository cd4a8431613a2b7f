//! Options that were given but changed nothing, found after a run over capture files
//! (`analyze`, and each pass of `replay`), so that they are named instead of silently ignored.
use tboxscope_engine::{Config, Summary};

/// The matching options in `config` that changed nothing in the run that ended with `summary`,
/// each with why: a `--match` that no flow took up (no flow it selects, or a mode the flow
/// cannot be matched by), an `--app-id` that found no id in any message (`app_ids_read`: the
/// ids the decoders read with it).
pub fn changed_nothing(config: &Config, app_ids_read: u64, summary: &Summary) -> Vec<String> {
    let mut out = Vec::new();
    let flows: Vec<String> = summary
        .redundancy
        .iter()
        .map(|r| {
            let mode = r.mode.map_or("no mode", |m| m.name());
            format!("{} by {mode}", r.flow)
        })
        .collect();
    for o in &config.mode_overrides {
        let s = &o.selector;
        // Flows are named after their KCP conversation or QUIC connection; a port selects
        // flows of any name.
        let fits = |flow: &str| match (&s.conv, &s.conn) {
            (Some(c), _) => flow == format!("kcp conv {c}"),
            (_, Some(c)) => flow == format!("quic {c}"),
            _ => true,
        };
        let applied = summary
            .redundancy
            .iter()
            .any(|r| r.mode_forced && r.mode == Some(o.mode) && fits(&r.flow));
        if !applied {
            let selector = match (s.port, s.conv, &s.conn) {
                (Some(p), _, _) => format!("port:{p}"),
                (_, Some(c), _) => format!("conv:{c}"),
                (_, _, Some(c)) => format!("conn:{c}"),
                _ => "?".to_owned(),
            };
            out.push(format!(
                "--match {selector}={mode} changed nothing: no flow it selects can be matched by \
                 {mode} (the flows: {})",
                if flows.is_empty() {
                    "none".to_owned()
                } else {
                    flows.join(", ")
                },
                mode = o.mode.name(),
            ));
        }
    }
    if let Some(rule) = config.app_id {
        if app_ids_read == 0 {
            out.push(format!(
                "--app-id {}:{}{} changed nothing: no message holds bytes {}..{} (no KCP segment \
                 or QUIC stream start is that long)",
                rule.offset,
                rule.width,
                if rule.little_endian { ":le" } else { "" },
                rule.offset,
                rule.offset.saturating_add(rule.width)
            ));
        }
    }
    out
}
