//! What the layer benchmarks share.

pub(crate) mod hello;
