//! Turning a request into subject keys: application-owned.

use std::{fmt, sync::Arc};

use http::{HeaderValue, request::Parts};
use runlimit_core::SubjectKey;

/// Who provides the value a check keys on, which decides how the default
/// rejection answers a request without it.
///
/// The choice belongs to the extractor, made when it is built: a header the
/// caller must send is the caller's omission, an extension an earlier layer
/// of the service inserts is the service's own failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// The service itself: an extension an earlier, trusted layer inserts,
    /// the connection's peer address. A request without it means the
    /// service's own configuration is incomplete: `500 Internal Server
    /// Error` by default (gRPC `INTERNAL`), the reason never shown.
    Service,
    /// The caller, who must send it (a header, a form or JSON field): `400
    /// Bad Request` by default (gRPC `INVALID_ARGUMENT`), the reason shown to
    /// the caller.
    Caller,
    /// The caller, as the credentials it must send (an API key): `401
    /// Unauthorized` with this `WWW-Authenticate` challenge by default
    /// (gRPC `UNAUTHENTICATED`), the reason shown to the caller.
    CallerCredentials(Challenge),
}

/// A `WWW-Authenticate` challenge (RFC 9110, section 11.6.1), which every
/// `401 Unauthorized` response must carry: an authentication scheme,
/// optionally followed by a space and its parameters.
///
/// ```
/// use runlimit_axum::{Challenge, Provider};
///
/// const API_KEY: Challenge = Challenge::from_static(r#"ApiKey realm="orders""#);
/// let provider = Provider::CallerCredentials(API_KEY);
/// # let _ = provider;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Challenge(&'static str);

impl Challenge {
    /// The challenge `challenge`, checked as it is built: in a constant, a
    /// mistake fails the compilation.
    ///
    /// # Panics
    ///
    /// When `challenge` does not start with a scheme (an RFC 9110 token) or
    /// holds a byte a field value cannot (a control character, non-ASCII).
    #[must_use]
    pub const fn from_static(challenge: &'static str) -> Self {
        let bytes = challenge.as_bytes();
        let mut index = 0;
        // The scheme: one or more token characters, up to a space or the end.
        while index < bytes.len() && bytes[index] != b' ' {
            assert!(
                is_token_byte(bytes[index]),
                "a challenge starts with an authentication scheme, a token"
            );
            index += 1;
        }
        assert!(
            index > 0,
            "a challenge starts with an authentication scheme"
        );
        // Its parameters: visible ASCII, spaces and tabs.
        while index < bytes.len() {
            let byte = bytes[index];
            assert!(
                byte == b'\t' || (byte >= b' ' && byte < 0x7f),
                "a challenge holds only visible ASCII, spaces and tabs"
            );
            index += 1;
        }
        Self(challenge)
    }

    /// The challenge as written.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        self.0
    }

    /// The challenge as a `WWW-Authenticate` field value.
    pub(crate) fn to_header_value(self) -> HeaderValue {
        // Checked when built: visible ASCII, spaces and tabs only, which is
        // all `from_static` asks.
        HeaderValue::from_static(self.0)
    }
}

/// Whether `byte` may appear in an RFC 9110 token.
const fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// The request lacked what a key extractor or policy selector needs: trusted
/// metadata the service should have provided (a peer address extension, an
/// authenticated identity), or a value its caller must send (a header, a form
/// field). [`provider`](Self::provider) says which, and so how the default
/// rejection answers.
///
/// The reason is a static string chosen by the application, so it can be logged
/// without leaking request data. For a value the caller must send, the default
/// rejection shows it to the caller: name what they must send (`"x-api-key"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MissingMetadata {
    reason: &'static str,
    provider: Provider,
}

impl MissingMetadata {
    /// Trusted metadata the service should have provided is missing, with a
    /// static, non-sensitive reason ([`Provider::Service`]).
    #[must_use]
    pub const fn new(reason: &'static str) -> Self {
        Self {
            reason,
            provider: Provider::Service,
        }
    }

    /// A value the caller must send is missing or unusable, named by
    /// `reason` ([`Provider::Caller`]).
    #[must_use]
    pub const fn from_caller(reason: &'static str) -> Self {
        Self {
            reason,
            provider: Provider::Caller,
        }
    }

    /// The same reason, with `provider` as who should have provided it.
    #[must_use]
    pub const fn with_provider(self, provider: Provider) -> Self {
        Self { provider, ..self }
    }

    /// The reason given.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        self.reason
    }

    /// Who should have provided what is missing.
    #[must_use]
    pub const fn provider(&self) -> Provider {
        self.provider
    }
}

impl fmt::Display for MissingMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.provider {
            Provider::Service => write!(f, "missing trusted request metadata: {}", self.reason),
            Provider::Caller => write!(f, "missing or unusable caller value: {}", self.reason),
            Provider::CallerCredentials(_) => {
                write!(f, "missing or unusable caller credentials: {}", self.reason)
            }
        }
    }
}

impl std::error::Error for MissingMetadata {}

/// Derives the [`SubjectKey`] a policy counts a request under.
///
/// Runs synchronously on the request head, before the body reaches the
/// handler (a layer that [keys on the body](crate::RateLimitLayer::key_reads_body)
/// has buffered it into the [`RequestBody`](crate::RequestBody) extension
/// first). The layer never interprets `Forwarded`, `X-Forwarded-For`,
/// `ConnectInfo`, cookies or identities itself: establishing trust and
/// normalizing subjects is the application's job, typically by reading an
/// extension an earlier, trusted-proxy-aware layer inserted, then hashing the
/// normalized subject with a [`KeyHasher`](runlimit_core::KeyHasher). An
/// extractor for one fixed policy can hold
/// [`KeyHasher::prepared_for`](runlimit_core::KeyHasher::prepared_for) that
/// policy instead: the same keys, derived faster.
///
/// Closures `Fn(&Parts, &P) -> Result<SubjectKey, MissingMetadata>` implement
/// it. A closure keying on something its caller sends answers a request
/// without it with [`MissingMetadata::from_caller`] (400 by default), and
/// one keying on what the service itself provides with
/// [`MissingMetadata::new`] (500).
pub trait KeyExtractor<P>: Send + Sync + 'static {
    /// The key for `policy`, or why the request cannot be keyed.
    ///
    /// # Errors
    ///
    /// [`MissingMetadata`] when what the key is derived from is absent (or
    /// unusable); the request is then rejected, never admitted unkeyed.
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata>;

    /// Called once when the extractor is added for one fixed `policy`, before
    /// any request, so it can prepare per-policy work (the ready-made
    /// extractors prepare their [`KeyHasher`](runlimit_core::KeyHasher) for
    /// it). It must still derive correct keys if later handed another policy.
    /// Does nothing by default.
    fn prepare(&mut self, policy: &P) {
        let _ = policy;
    }

    /// Whether the extractor reads the [`RequestBody`](crate::RequestBody)
    /// extension, which only a layer that
    /// [keys on the body](crate::RateLimitLayer::key_reads_body) provides.
    /// A layer without it refuses such an extractor when it is built, rather
    /// than every request. `false` by default.
    fn reads_body(&self) -> bool {
        false
    }
}

impl<P, F> KeyExtractor<P> for F
where
    F: Fn(&Parts, &P) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        self(parts, policy)
    }
}

pub(crate) type SharedExtractor<P> = Arc<dyn KeyExtractor<P>>;
