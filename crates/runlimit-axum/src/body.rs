//! Keys read from a capped request body.
//!
//! Most checks key on the request head (a peer address, an authenticated
//! extension), which costs nothing to read. A per-recipient limit on a login
//! or password-reset form needs the field the form names, in the body. A layer
//! built with [`RateLimitLayer::key_reads_body`](crate::RateLimitLayer::key_reads_body)
//! buffers the body, up to a cap and within a time limit, before any key is
//! extracted, and hands it to extractors as the [`RequestBody`] extension.
//!
//! Buffering is opt-in because it is work an unauthenticated caller makes the
//! service do: every request on the route is read into memory (at most the
//! cap) before it can be refused. A body over the cap is answered 413 and a
//! body that fails or stalls 400 or 408, without consuming quota or calling
//! the inner service: a caller cannot pad a body past the cap to escape the
//! limit. The inner service receives exactly the bytes that were read.

use std::{borrow::Cow, fmt, future::Future, time::Duration};

use bytes::Bytes;
use http::{header::CONTENT_LENGTH, request::Parts};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use serde::de::{self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};

use crate::rejection::Rejection;

/// The buffered request body, as the [`RequestBody`] extension extractors and
/// `only_when` predicates read.
///
/// ```
/// use bytes::Bytes;
/// use runlimit_axum::RequestBody;
///
/// let body = RequestBody::new(Bytes::from_static(b"email=Alice%40Example.test&next=%2F"));
/// assert_eq!(body.form_field("email").as_deref(), Some("Alice@Example.test"));
/// let body = RequestBody::new(Bytes::from_static(br#"{"email": "bob@example.test"}"#));
/// assert_eq!(body.json_str("email").as_deref(), Some("bob@example.test"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RequestBody(Bytes);

impl RequestBody {
    /// A buffered body of `bytes`.
    #[must_use]
    pub fn new(bytes: Bytes) -> Self {
        Self(bytes)
    }

    /// The bytes, exactly as received.
    #[must_use]
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The first value of field `name` in an `application/x-www-form-urlencoded`
    /// body, percent-decoded. Normalize it (case, whitespace) before hashing.
    #[must_use]
    pub fn form_field(&self, name: &str) -> Option<Cow<'_, str>> {
        form_urlencoded::parse(&self.0)
            .find(|(field, _)| field == name)
            .map(|(_, value)| value)
    }

    /// The string value of top-level field `name` in a JSON object body.
    #[must_use]
    pub fn json_str(&self, name: &str) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.0).ok()?;
        value.get(name)?.as_str().map(str::to_owned)
    }

    /// The value of form field `name` when the body names it exactly once:
    /// a caller who sends it twice must not choose which one counts.
    pub(crate) fn sole_form_field(&self, name: &str) -> Option<Cow<'_, str>> {
        let mut values = form_urlencoded::parse(&self.0)
            .filter(|(field, _)| field == name)
            .map(|(_, value)| value);
        let value = values.next()?;
        values.next().is_none().then_some(value)
    }

    /// The string value of top-level field `name` when the body is one JSON
    /// object that names it exactly once, read without building the rest of
    /// the document.
    pub(crate) fn sole_json_str(&self, name: &str) -> Option<String> {
        let mut reader = serde_json::Deserializer::from_slice(&self.0);
        let value = reader.deserialize_map(SoleJsonField(name)).ok()?;
        // Nothing but whitespace may follow the object.
        reader.end().ok()?;
        value
    }
}

/// Finds the string value of one top-level field of a JSON object, refusing
/// a document that names the field twice.
struct SoleJsonField<'n>(&'n str);

impl<'de> Visitor<'de> for SoleJsonField<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_field) = map.next_key_seed(IsField(self.0))? {
            if !is_field {
                map.next_value::<IgnoredAny>()?;
            } else if found.is_none() {
                found = Some(map.next_value::<String>()?);
            } else {
                return Err(A::Error::custom("a field named twice"));
            }
        }
        Ok(found)
    }
}

/// Whether a JSON object's key is the field sought, compared without
/// copying it.
struct IsField<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for IsField<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for IsField<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A body can hold credentials and identities: only its length shows.
        f.debug_struct("RequestBody")
            .field("len", &self.0.len())
            .finish_non_exhaustive()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::HeadKeyed {}
    impl Sealed for super::BodyKeyed {}
}

/// Whether a layer reads the request body before extracting keys: either
/// [`HeadKeyed`] (the default) or [`BodyKeyed`]. Sealed.
pub trait BodyMode<B>: sealed::Sealed + Copy + fmt::Debug + Send + Sync + 'static {
    /// Makes the body available to extractors if this mode reads it, and
    /// returns the body the inner service gets, or why the request is
    /// answered instead.
    #[doc(hidden)]
    fn prepare(
        self,
        parts: &mut Parts,
        body: B,
    ) -> impl Future<Output = Result<B, Rejection<'static>>> + Send;

    /// Whether [`prepare`](Self::prepare) reads the body; when it does not,
    /// it returns the body unchanged and need not be called.
    #[doc(hidden)]
    fn reads_body(self) -> bool;
}

/// Keys come from the request head only; the body is passed through unread.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadKeyed;

impl<B: Send + 'static> BodyMode<B> for HeadKeyed {
    async fn prepare(self, _parts: &mut Parts, body: B) -> Result<B, Rejection<'static>> {
        Ok(body)
    }

    fn reads_body(self) -> bool {
        false
    }
}

/// Keys may read the body, buffered up to `limit` bytes within `timeout`;
/// see [`RateLimitLayer::key_reads_body`](crate::RateLimitLayer::key_reads_body).
#[derive(Debug, Clone, Copy)]
pub struct BodyKeyed {
    pub(crate) limit: usize,
    pub(crate) timeout: Duration,
}

impl<B> BodyMode<B> for BodyKeyed
where
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    async fn prepare(self, parts: &mut Parts, body: B) -> Result<B, Rejection<'static>> {
        let too_large = Rejection::PayloadTooLarge { limit: self.limit };
        // A declared length over the cap is refused before reading a byte.
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.limit as u64) {
            return Err(too_large);
        }
        let read = Limited::new(body, self.limit).collect();
        let bytes = match tokio::time::timeout(self.timeout, read).await {
            Err(_) => {
                return Err(Rejection::BodyTimedOut {
                    after: self.timeout,
                });
            }
            // `Limited` fails both for a body that errs and for one over the
            // cap; the cap is told apart by its own error type.
            Ok(Err(error)) => {
                return Err(if error.is::<http_body_util::LengthLimitError>() {
                    too_large
                } else {
                    Rejection::BodyUnreadable
                });
            }
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        parts.extensions.insert(RequestBody(bytes.clone()));
        Ok(B::from(bytes))
    }

    fn reads_body(self) -> bool {
        true
    }
}
