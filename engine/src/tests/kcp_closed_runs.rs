//! The runs of closed message sns a KCP conversation remembers ([`ClosedRuns`]): exact within
//! their bound, the oldest forgotten past it.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::matcher::kcp::ClosedRuns;

#[test]
fn closed_runs_forget_the_oldest_past_their_bound() {
    let mut runs = ClosedRuns::default();
    // Isolated sns: one run each.
    for sn in (0..2000u32).step_by(2) {
        runs.insert(sn);
    }
    assert!(!runs.contains(0), "the oldest runs are forgotten");
    assert!(runs.contains(1998));
    assert!(!runs.contains(1997));
}

proptest! {
    /// Within the bound, the runs hold exactly the sns inserted, in any order.
    #[test]
    fn closed_runs_hold_exactly_what_closed(sns in proptest::collection::vec(0u32..300, 0..400)) {
        let mut runs = ClosedRuns::default();
        let mut truth = BTreeSet::new();
        for &sn in &sns {
            runs.insert(sn);
            truth.insert(sn);
        }
        for sn in 0..302u32 {
            prop_assert_eq!(runs.contains(sn), truth.contains(&sn), "sn {}", sn);
        }
    }
}
