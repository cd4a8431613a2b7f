#![allow(clippy::unwrap_used)]
//! A short S2 run with every transport. Needs root.
use std::time::Duration;

use tboxscope_lab::run::{run, NoObserver, RunOptions};
use tboxscope_lab::{LabNames, Scenario};

#[test]
fn s2_short_run_every_transport() {
    let names = LabNames::for_test("s2").unwrap();
    let mut opts = RunOptions::new(names.clone());
    opts.duration = Duration::from_secs(8);
    opts.drain = Duration::from_secs(3);
    let r = run(&Scenario::preset("S2").unwrap(), &opts, &mut NoObserver).unwrap();
    eprintln!("{r}");
    assert!(tboxscope_lab::names::existing_namespaces(names.prefix())
        .unwrap()
        .is_empty());
}
