//! Nothing to build; present so the pinned `aya-build` build-dependency is part of the graph.
fn main() {}
