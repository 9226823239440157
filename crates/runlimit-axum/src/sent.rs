//! Ready-made key extractors for values the caller sends: a request header
//! ([`FromHeader`]) and a field of a form or JSON body ([`BodyField`]).
//!
//! Each hashes the value after the application's normalizing step (trimming,
//! lower-casing an account), so that every spelling of one subject shares one
//! quota. A request without the value, with it more than once (a caller must
//! not choose which of two counts while the handler reads the other), with one
//! that is not UTF-8, or with one that is empty after normalizing, is the
//! caller's omission: `400 Bad Request` by default, or what
//! [`FromHeader::provided_by`] and [`BodyField::provided_by`] say. A
//! normalizing step returns an empty string to refuse a value the same way.

use std::{fmt, sync::Arc};

use http::{HeaderName, header::InvalidHeaderName, request::Parts};
use runlimit_core::{KeyHasher, Policy, SubjectKey};

use crate::{
    body::RequestBody,
    extract::{KeyExtractor, MissingMetadata, Provider},
    extractors::Hashing,
};

/// The application's normalizing step.
type Normalize = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// How a ready-made extractor turns the value it found into a key, and what
/// it answers when there is none.
#[derive(Clone)]
struct Keying {
    hashing: Hashing,
    normalize: Option<Normalize>,
    missing: MissingMetadata,
}

impl Keying {
    fn new(hasher: &KeyHasher, reason: &'static str) -> Self {
        Self {
            hashing: Hashing::new(hasher),
            normalize: None,
            missing: MissingMetadata::from_caller(reason),
        }
    }

    /// The key of `value` under `policy`, normalized; the omission when
    /// there is none or it normalizes to nothing.
    fn key<P: Policy>(
        &self,
        policy: &P,
        value: Option<&str>,
    ) -> Result<SubjectKey, MissingMetadata> {
        let value = value.ok_or(self.missing)?;
        let normalized;
        let subject = match &self.normalize {
            Some(normalize) => {
                normalized = normalize(value);
                normalized.as_str()
            }
            None => value,
        };
        if subject.is_empty() {
            return Err(self.missing);
        }
        Ok(self.hashing.hash(policy, subject.as_bytes()))
    }

    fn fmt_fields(&self, f: &mut fmt::DebugStruct<'_, '_>) {
        f.field("provider", &self.missing.provider())
            .field("normalized", &self.normalize.is_some());
    }
}

/// Keys a check on the value of a request header the caller sends (an API
/// key, a tenant), after the application's normalizing step.
///
/// A request without the header, with it more than once, or whose value is
/// not UTF-8 or normalizes to an empty string, is refused as the caller's
/// omission (`400 Bad Request` by default), never admitted unkeyed; say with
/// [`provided_by`](Self::provided_by) when it should be answered otherwise.
/// Only the caller's own quota should be keyed on what the caller sends: a
/// value a caller can vary freely gives them as many quotas as values, so
/// key such a check together with one on the caller's address.
///
/// ```
/// use runlimit_axum::{Challenge, FromHeader, Provider};
/// use runlimit_core::KeyHasher;
///
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// // A tenant header, case-insensitive; without it, 400.
/// let per_tenant = FromHeader::new(&hasher, "x-tenant")?.normalize(|v| v.to_ascii_lowercase());
/// // An API key; without it, 401 with a challenge.
/// let per_key = FromHeader::new(&hasher, "x-api-key")?
///     .provided_by(Provider::CallerCredentials(Challenge::from_static("ApiKey")));
/// # let _ = (per_tenant, per_key);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct FromHeader {
    name: HeaderName,
    keying: Keying,
}

impl FromHeader {
    /// Keys on the value of header `name`, which the caller must send once.
    ///
    /// # Errors
    ///
    /// [`InvalidHeaderName`] when `name` is not a valid header name.
    pub fn new(hasher: &KeyHasher, name: &'static str) -> Result<Self, InvalidHeaderName> {
        Ok(Self {
            name: HeaderName::from_bytes(name.as_bytes())?,
            keying: Keying::new(hasher, name),
        })
    }

    /// Normalizes each value with `normalize` before it is hashed (trim it,
    /// lower-case it), so that its spellings share one quota. An empty result
    /// refuses the request as if the header were missing.
    #[must_use]
    pub fn normalize(mut self, normalize: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.keying.normalize = Some(Arc::new(normalize));
        self
    }

    /// Who provides the header, which decides how a request without it is
    /// answered: [`Provider::Caller`] (400) unless said otherwise;
    /// [`Provider::CallerCredentials`] for a credential (401), or
    /// [`Provider::Service`] for a header a trusted gateway in front of the
    /// service always sets (500).
    #[must_use]
    pub fn provided_by(mut self, provider: Provider) -> Self {
        self.keying.missing = self.keying.missing.with_provider(provider);
        self
    }
}

impl<P: Policy + 'static> KeyExtractor<P> for FromHeader {
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        let mut values = parts.headers.get_all(&self.name).iter();
        let value = match (values.next(), values.next()) {
            (Some(value), None) => std::str::from_utf8(value.as_bytes()).ok(),
            _ => None,
        };
        self.keying.key(policy, value)
    }

    fn prepare(&mut self, policy: &P) {
        self.keying.hashing.prepare(policy);
    }
}

impl fmt::Debug for FromHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("FromHeader");
        debug.field("name", &self.name);
        self.keying.fmt_fields(&mut debug);
        debug.finish_non_exhaustive()
    }
}

/// The body formats a [`BodyField`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Form,
    Json,
}

/// Keys a check on a field of the request body the caller sends (the
/// account a login form names), after the application's normalizing step:
/// an `application/x-www-form-urlencoded` field ([`form`](Self::form)) or a
/// top-level string field of a JSON object ([`json`](Self::json)).
///
/// It reads the body the layer buffered, so the layer must
/// [key on the body](crate::RateLimitLayer::key_reads_body), within its cap:
/// a layer that does not refuses this extractor when it is built. A body
/// without the field, naming it more than once, not of the format, or whose
/// value normalizes to an empty string is refused as the caller's omission
/// (`400 Bad Request` by default), never admitted unkeyed.
///
/// ```
/// use runlimit_axum::BodyField;
/// use runlimit_core::KeyHasher;
///
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let per_account = BodyField::form(&hasher, "account").normalize(|v| v.trim().to_lowercase());
/// let per_recipient = BodyField::json(&hasher, "email").normalize(|v| v.trim().to_lowercase());
/// # let _ = (per_account, per_recipient);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct BodyField {
    name: &'static str,
    format: Format,
    keying: Keying,
}

impl BodyField {
    /// Keys on field `name` of an `application/x-www-form-urlencoded` body,
    /// percent-decoded.
    #[must_use]
    pub fn form(hasher: &KeyHasher, name: &'static str) -> Self {
        Self::new(hasher, name, Format::Form)
    }

    /// Keys on the string value of top-level field `name` of a JSON object
    /// body.
    #[must_use]
    pub fn json(hasher: &KeyHasher, name: &'static str) -> Self {
        Self::new(hasher, name, Format::Json)
    }

    fn new(hasher: &KeyHasher, name: &'static str, format: Format) -> Self {
        Self {
            name,
            format,
            keying: Keying::new(hasher, name),
        }
    }

    /// Normalizes each value with `normalize` before it is hashed (trim it,
    /// lower-case it), so that its spellings share one quota. An empty result
    /// refuses the request as if the field were missing.
    #[must_use]
    pub fn normalize(mut self, normalize: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.keying.normalize = Some(Arc::new(normalize));
        self
    }

    /// Who provides the field, which decides how a request without it is
    /// answered: [`Provider::Caller`] (400) unless said otherwise, or
    /// [`Provider::CallerCredentials`] (401).
    #[must_use]
    pub fn provided_by(mut self, provider: Provider) -> Self {
        self.keying.missing = self.keying.missing.with_provider(provider);
        self
    }
}

impl<P: Policy + 'static> KeyExtractor<P> for BodyField {
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        // The layer is refused when built unless it buffers bodies, so a
        // missing body is the service's own configuration.
        let body = parts
            .extensions
            .get::<RequestBody>()
            .ok_or(MissingMetadata::new(
                "the request body, which only a layer that keys on it buffers",
            ))?;
        match self.format {
            Format::Form => self
                .keying
                .key(policy, body.sole_form_field(self.name).as_deref()),
            Format::Json => self
                .keying
                .key(policy, body.sole_json_str(self.name).as_deref()),
        }
    }

    fn prepare(&mut self, policy: &P) {
        self.keying.hashing.prepare(policy);
    }

    fn reads_body(&self) -> bool {
        true
    }
}

impl fmt::Debug for BodyField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("BodyField");
        debug
            .field("name", &self.name)
            .field("format", &self.format);
        self.keying.fmt_fields(&mut debug);
        debug.finish_non_exhaustive()
    }
}
