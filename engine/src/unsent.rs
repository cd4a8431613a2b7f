//! Why a message of a flow sent on several paths had no copy on one of them, from what the
//! capture shows: the path was in an outage, the sender was not using it at the time (no copy
//! of the flow on it for a while around the message: re-validating it after a handover, not yet
//! using it), or the sender used it and did not send this message on it (not redundant).

use std::collections::VecDeque;

use crate::outage::OutageBook;
use crate::paths::PathIdx;

/// A path with no copy of the flow for at least this long around a message (ns) ...
pub const UNUSED_MIN_NS: u64 = 1_000_000_000;
/// ... while at least this many of the flow's messages came up was unused by the sender (a
/// sender that alternates paths leaves gaps of one or two messages: those are not "unused").
pub const UNUSED_MIN_MESSAGES: u64 = 3;
/// Gaps that ended this long before the newest copy are forgotten: a message closes within the
/// timeout and the longest hold (at most 65 s), so none asks about them any more.
const GAP_HORIZON_NS: u64 = 120_000_000_000;
/// Spans remembered per path and cause to count each outage or unused stretch once (messages
/// close nearly in order; an older span beyond these is counted again).
const RECENT_SPANS: usize = 4;

/// One stretch of time that explains missing copies, counted once however many messages fell
/// in it; what [`Spans::add`] adds up.
#[derive(Clone, Debug, Default)]
pub struct Spans {
    recent: VecDeque<(u64, u64)>,
}

impl Spans {
    /// A stretch `from_ns..to_ns` (the same `from_ns` names the same stretch, whose end may
    /// have grown): how much longer than before the stretches now are (ns).
    pub fn add(&mut self, from_ns: u64, to_ns: u64) -> u64 {
        let to_ns = to_ns.max(from_ns);
        if let Some(s) = self.recent.iter_mut().find(|s| s.0 == from_ns) {
            let grown = to_ns.saturating_sub(s.1);
            s.1 = s.1.max(to_ns);
            return grown;
        }
        if self.recent.len() >= RECENT_SPANS {
            self.recent.pop_front();
        }
        self.recent.push_back((from_ns, to_ns));
        to_ns - from_ns
    }
}

/// Why a path of the flow had no copy of a message sent on another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The path was in an outage (tboxscope's outage tracker) when the message came up.
    Outage {
        /// Outage start (ns).
        from_ns: u64,
        /// Its end, or the message's time while it is still open (ns).
        to_ns: u64,
    },
    /// The sender put no copy of the flow on the path for a while around the message.
    Unused {
        /// Last copy on the path before (or the outage's end, or the flow's start) (ns).
        from_ns: u64,
        /// First copy on it after, or the message's time while none came yet (ns).
        to_ns: u64,
    },
    /// The sender was using the path, and did not send this message on it.
    InUse,
}

#[derive(Clone, Copy, Debug)]
struct Gap {
    from_ns: u64,
    to_ns: u64,
}

/// The sender's copies of one flow on one path: its first and last, and its long silences.
#[derive(Clone, Debug, Default)]
pub struct PathSends {
    /// Path.
    pub path: PathIdx,
    /// First copy: time, and the flow's messages before it.
    first: Option<(u64, u64)>,
    /// Last copy: time, and the flow's messages then.
    last: Option<(u64, u64)>,
    gaps: VecDeque<Gap>,
    /// Outage spans counted for this path.
    pub out_spans: Spans,
    /// Unused spans counted for this path.
    pub unused_spans: Spans,
}

impl PathSends {
    /// No copy on `path` yet.
    pub fn new(path: PathIdx) -> Self {
        Self {
            path,
            ..Self::default()
        }
    }

    /// A copy sent on this path at `t_ns`, the flow having seen `messages` messages so far.
    pub fn sent(&mut self, t_ns: u64, messages: u64) {
        if self.first.is_none() {
            self.first = Some((t_ns, messages));
        }
        match self.last {
            Some((last, _)) if t_ns <= last => return,
            Some((last, m))
                if t_ns - last >= UNUSED_MIN_NS
                    && messages.saturating_sub(m) >= UNUSED_MIN_MESSAGES =>
            {
                self.gaps.push_back(Gap {
                    from_ns: last,
                    to_ns: t_ns,
                });
            }
            _ => {}
        }
        self.last = Some((t_ns, messages));
        while self
            .gaps
            .front()
            .is_some_and(|g| g.to_ns.saturating_add(GAP_HORIZON_NS) < t_ns)
        {
            self.gaps.pop_front();
        }
    }

    /// The stretch around `t_ns` in which the sender put no copy on this path, where long
    /// enough to call the path unused (by `now_ns`, the flow having seen `messages` messages;
    /// `flow_start_ns`: its first activity).
    pub fn unused_around(
        &self,
        t_ns: u64,
        now_ns: u64,
        messages: u64,
        flow_start_ns: u64,
    ) -> Option<(u64, u64)> {
        if let Some(g) = self
            .gaps
            .iter()
            .rev()
            .find(|g| g.from_ns < t_ns && t_ns < g.to_ns)
        {
            return Some((g.from_ns, g.to_ns));
        }
        match (self.first, self.last) {
            // Not used yet: the flow's messages so far went elsewhere.
            (Some((first, before)), _) if t_ns < first => (first.saturating_sub(flow_start_ns)
                >= UNUSED_MIN_NS
                && before >= UNUSED_MIN_MESSAGES)
                .then_some((flow_start_ns, first)),
            // Not used since its last copy (so far up to this message).
            (_, Some((last, m))) if last < t_ns => (now_ns.saturating_sub(last) >= UNUSED_MIN_NS
                && messages.saturating_sub(m) >= UNUSED_MIN_MESSAGES)
                .then_some((last, t_ns)),
            _ => None,
        }
    }
}

/// Why path `sends.path` had no copy of a message that came up at `t_ns` and was sent on
/// another path of its flow (by `now_ns`, the flow having opened `messages` messages since its
/// start at `flow_start_ns`): an outage first, then a long stretch without copies on the path
/// (from the end of an outage within it), else the path was in use.
pub fn classify(
    outages: &OutageBook,
    sends: &PathSends,
    t_ns: u64,
    now_ns: u64,
    messages: u64,
    flow_start_ns: u64,
) -> Cause {
    if let Some((from_ns, to_ns)) = outages.span_at(sends.path, t_ns) {
        return Cause::Outage { from_ns, to_ns };
    }
    match sends.unused_around(t_ns, now_ns, messages, flow_start_ns) {
        Some((from_ns, to_ns)) => Cause::Unused {
            from_ns: outages
                .last_end_between(sends.path, from_ns, t_ns)
                .unwrap_or(from_ns),
            to_ns,
        },
        None => Cause::InUse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// A flow sending 50 messages/s from t = 0: path 1 carries all of them until `stop`
    /// and from `resume` (path 0, the other path, carries them all along).
    fn path1(stop: u64, resume: u64, until: u64) -> (PathSends, u64) {
        let mut sends = PathSends {
            path: 1,
            ..PathSends::default()
        };
        let mut messages = 0;
        let mut t = 0;
        while t <= until {
            messages += 1;
            if t < stop || t >= resume {
                sends.sent(t, messages);
            }
            t += 20 * MS;
        }
        (sends, messages)
    }

    /// Path 1 down from 7.5 s to 12.5 s: messages then are lacking for the outage, counted
    /// over its whole span.
    #[test]
    fn a_message_not_sent_on_a_path_in_an_outage() {
        let (sends, n) = path1(7_500 * MS, 15 * S, 20 * S);
        let mut outages = OutageBook::new(8);
        let id = outages.open(1, "eth1", 7_500 * MS, "test".to_owned());
        assert_eq!(
            classify(&outages, &sends, 9 * S, 14 * S, n, 0),
            Cause::Outage {
                from_ns: 7_500 * MS,
                to_ns: 9 * S
            }
        );
        outages.close(id, 12_500 * MS);
        assert_eq!(
            classify(&outages, &sends, 9 * S, 14 * S, n, 0),
            Cause::Outage {
                from_ns: 7_500 * MS,
                to_ns: 12_500 * MS
            }
        );
        // After it, still no copy on path 1 until 15 s: unused from the outage's end.
        assert_eq!(
            classify(&outages, &sends, 13 * S, 20 * S, n, 0),
            Cause::Unused {
                from_ns: 12_500 * MS,
                to_ns: 15 * S
            }
        );
        let mut spans = Spans::default();
        assert_eq!(spans.add(7_500 * MS, 9 * S), 1_500 * MS);
        assert_eq!(spans.add(7_500 * MS, 12_500 * MS), 3_500 * MS);
        assert_eq!(spans.add(7_500 * MS, 10 * S), 0);
    }

    /// No outage, the sender off path 1 for 3 s: unused, also while the stretch goes on.
    #[test]
    fn a_message_not_sent_on_a_path_the_sender_left_unused() {
        let outages = OutageBook::new(8);
        let (sends, n) = path1(5 * S, 8 * S, 10 * S);
        assert_eq!(
            classify(&outages, &sends, 6 * S, 11 * S, n, 0),
            Cause::Unused {
                from_ns: 5 * S - 20 * MS,
                to_ns: 8 * S
            }
        );
        let (sends, n) = path1(5 * S, u64::MAX, 10 * S);
        assert_eq!(
            classify(&outages, &sends, 6 * S, 11 * S, n, 0),
            Cause::Unused {
                from_ns: 5 * S - 20 * MS,
                to_ns: 6 * S
            }
        );
        // Not used yet: the first 2 s of the flow went on path 0 alone.
        let (sends, n) = path1(0, 2 * S, 4 * S);
        assert_eq!(
            classify(&outages, &sends, S, 7 * S, n, 0),
            Cause::Unused {
                from_ns: 0,
                to_ns: 2 * S
            }
        );
    }

    /// The sender used path 1 around the message (a stop shorter than a second, or one that
    /// let fewer than 3 messages go elsewhere): this message was left off it.
    #[test]
    fn a_message_not_sent_on_a_path_in_use() {
        let outages = OutageBook::new(8);
        let (sends, n) = path1(u64::MAX, u64::MAX, 10 * S);
        assert_eq!(
            classify(&outages, &sends, 5 * S, 11 * S, n, 0),
            Cause::InUse
        );
        let (sends, n) = path1(5 * S, 5_500 * MS, 10 * S);
        assert_eq!(
            classify(&outages, &sends, 5_200 * MS, 11 * S, n, 0),
            Cause::InUse
        );
        // One message every 2 s, alternating paths: 4 s gaps with one message between.
        let mut sends = PathSends {
            path: 1,
            ..PathSends::default()
        };
        for i in 0..10u64 {
            if i % 2 == 1 {
                sends.sent(i * 2 * S, i + 1);
            }
        }
        assert_eq!(
            classify(&outages, &sends, 8 * S, 21 * S, 10, 0),
            Cause::InUse
        );
    }
}
