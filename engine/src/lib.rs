//! The sans-IO correlation engine: fed observations with their own timestamps, it never reads the
//! clock. `handle(event)` in, `snapshot()` out.
