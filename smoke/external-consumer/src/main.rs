//! README examples, compiled as an independent consumer would write them.

mod generic_backend;

fn main() {}
