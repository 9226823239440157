//! The demo's scenarios, shared by its binary, its tests and its benches.
//!
//! [`flood`] floods the README's login layer with distinct keys, with and
//! without the protection, and reports what legitimate users and the
//! attacker got.

pub mod flood;
