//! Why a field value could not be built.

use std::time::Duration;

/// Why a field value was refused. Nothing is encoded from refused input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// A policy name was empty or held a character outside printable ASCII, so it
    /// is not an RFC 9651 String.
    #[error("policy name is not a valid Structured Field string")]
    InvalidName,
    /// An integer exceeded RFC 9651's 15-digit Integer range.
    #[error("{value} exceeds the Structured Field integer maximum 999999999999999")]
    IntegerOutOfRange {
        /// The refused value.
        value: u64,
    },
    /// An advertised policy window was zero or not a whole number of seconds.
    #[error("policy window {window:?} is not a positive whole number of seconds")]
    WindowNotWholeSeconds {
        /// The refused window.
        window: Duration,
    },
    /// A field needs at least one item.
    #[error("a field needs at least one item")]
    Empty,
}
