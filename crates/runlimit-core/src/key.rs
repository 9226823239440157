//! HMAC-derived subject keys and the counter keys backends store them under.
//!
//! # Derivation
//!
//! [`KeyHasher::hash_for`] computes
//!
//! ```text
//! HMAC-SHA-256(secret, lp("runlimit subject key v1") ‖ lp(policy id) ‖ lp(scope id) ‖ lp(subject))
//! ```
//!
//! where `lp(x)` is the byte length of `x` as an 8-byte big-endian integer followed
//! by the bytes of `x`, and identifiers are their ASCII bytes. The length prefixes
//! make the framing unambiguous: no two distinct `(policy, scope, subject)` triples
//! produce the same message. The quota parameters are not part of the subject key;
//! they enter the [`CounterKey`] through the policy fingerprint instead, so a
//! service in another language only needs the secret, the two identifiers and the
//! normalized subject to derive identical keys. The crate's tests pin this
//! derivation with golden vectors.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::policy::{Policy, PolicyFingerprint};

/// The shortest secret [`KeyHasher::new`] accepts, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

const SUBJECT_KEY_DOMAIN: &[u8] = b"runlimit subject key v1";

/// Why a [`KeyHasher`] could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyHasherError {
    /// The secret was shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the key-hashing secret is {length} bytes long; at least {minimum} are required")]
    SecretTooShort {
        /// The refused secret's length (never its contents).
        length: usize,
        /// [`MIN_SECRET_LEN`].
        minimum: usize,
    },
}

/// Derives opaque [`SubjectKey`]s from normalized subjects with domain-separated
/// HMAC-SHA-256.
///
/// The hasher keeps only the precomputed inner and outer HMAC states, never the raw
/// secret, so hashing a subject does not rerun the key schedule. Treat a live
/// hasher and its clones as secret material: `Debug` prints nothing of them, and
/// the SHA-256 states and buffered input are wiped when each is dropped.
///
/// Use one stable secret across every replica that shares a backend. Rotating the
/// secret changes every derived key, which starts fresh counters.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
///
/// let policy = FixedWindowPolicy::new(
///     PolicyId::new("auth.login")?,
///     ScopeId::new("identity")?,
///     8,
///     Duration::from_secs(60),
/// )?;
/// let hasher = KeyHasher::new(b"an example secret of at least 32 bytes")?;
/// let key = hasher.hash_for(&policy, b"user@example.test");
/// assert_eq!(key, hasher.hash_for(&policy, b"user@example.test"));
/// assert_eq!(format!("{key:?}"), "SubjectKey(<redacted>)");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct KeyHasher {
    // With the `zeroize` features of `hmac` and `sha2`, dropping this wipes both
    // SHA-256 chaining states and the block buffer.
    mac: Hmac<Sha256>,
}

impl KeyHasher {
    /// Creates a hasher from a secret of at least [`MIN_SECRET_LEN`] bytes.
    ///
    /// Load one stable random secret from secret storage; the hasher does not keep
    /// the caller's copy, so the caller should wipe it when done.
    ///
    /// # Errors
    ///
    /// [`KeyHasherError::SecretTooShort`] if `secret` is shorter than
    /// [`MIN_SECRET_LEN`] bytes.
    pub fn new(secret: &[u8]) -> Result<Self, KeyHasherError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyHasherError::SecretTooShort {
                length: secret.len(),
                minimum: MIN_SECRET_LEN,
            });
        }
        // HMAC accepts keys of any length; the length was checked above.
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).map_err(|_| {
            KeyHasherError::SecretTooShort {
                length: secret.len(),
                minimum: MIN_SECRET_LEN,
            }
        })?;
        Ok(Self { mac })
    }

    /// Derives the subject key for `subject` under `policy`'s id and scope.
    ///
    /// `subject` must already be normalized by the application (for example a
    /// lowercased e-mail address or an IPv6 /64 prefix); see the [module
    /// documentation](crate::key#derivation) for the exact derivation.
    #[must_use]
    pub fn hash_for<P: Policy + ?Sized>(&self, policy: &P, subject: &[u8]) -> SubjectKey {
        let mut mac = self.mac.clone();
        for field in [
            SUBJECT_KEY_DOMAIN,
            policy.id().as_str().as_bytes(),
            policy.scope().as_str().as_bytes(),
            subject,
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        SubjectKey(mac.finalize().into_bytes().into())
    }
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(<redacted>)")
    }
}

/// An opaque 32-byte key for one subject under one policy id and scope.
///
/// Usually derived with [`KeyHasher::hash_for`]; [`SubjectKey::from_digest`] accepts
/// a digest computed elsewhere, which must be just as unpredictable. `Debug` is
/// redacted and the type deliberately has no serde support.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubjectKey([u8; 32]);

impl SubjectKey {
    /// Wraps a 32-byte digest computed by the application.
    ///
    /// Prefer [`KeyHasher`]; if you derive keys yourself, use a keyed hash of the
    /// normalized subject so storage never holds guessable values.
    #[inline]
    #[must_use]
    pub const fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The key bytes, for backends that store them.
    #[inline]
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SubjectKey(<redacted>)")
    }
}

/// The storage identity of one counter: a policy fingerprint and a subject key.
///
/// Two checks share state exactly when their counter keys are equal. `Debug` is
/// redacted and the type deliberately has no serde support.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    fingerprint: PolicyFingerprint,
    subject: SubjectKey,
}

impl CounterKey {
    /// Combines a policy fingerprint and a subject key.
    #[inline]
    #[must_use]
    pub const fn new(fingerprint: PolicyFingerprint, subject: SubjectKey) -> Self {
        Self {
            fingerprint,
            subject,
        }
    }

    /// The policy fingerprint.
    #[inline]
    #[must_use]
    pub const fn fingerprint(&self) -> &PolicyFingerprint {
        &self.fingerprint
    }

    /// The subject key.
    #[inline]
    #[must_use]
    pub const fn subject(&self) -> &SubjectKey {
        &self.subject
    }

    /// The 64 bytes `fingerprint ‖ subject`, for backends that store one binary key.
    #[inline]
    #[must_use]
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut bytes = [0; 64];
        bytes[..32].copy_from_slice(self.fingerprint.as_bytes());
        bytes[32..].copy_from_slice(self.subject.as_bytes());
        bytes
    }
}

impl fmt::Debug for CounterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CounterKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use zeroize::ZeroizeOnDrop;

    /// The hasher's state is only wiped on drop if the `zeroize` features of the
    /// RustCrypto crates are on; this fails to compile if they are not.
    #[test]
    fn the_hmac_state_and_buffer_zeroize_on_drop() {
        fn wipes_on_drop<T: ZeroizeOnDrop>() {}
        wipes_on_drop::<sha2::Sha256>();
        wipes_on_drop::<sha2::block_api::Sha256VarCore>();
        wipes_on_drop::<
            hmac::digest::block_buffer::BlockBuffer<
                hmac::digest::consts::U64,
                hmac::digest::block_buffer::Eager,
            >,
        >();
    }
}
