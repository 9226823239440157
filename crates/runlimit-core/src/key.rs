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
//!
//! An extractor that hashes many subjects under one policy can use
//! [`KeyHasher::prepared_for`]: the [`PreparedKeyHasher`] it returns derives the
//! same keys, starting from an HMAC state that has already absorbed that
//! policy's framing.
//!
//! # Subjects and secrets
//!
//! Normalize a subject before hashing it (trim and lower-case an e-mail
//! address, aggregate an IPv6 address by prefix): the hasher keys exactly the
//! bytes it is given. Raw e-mail addresses, account ids and IP addresses then
//! never enter storage, logs, metrics or errors; a [`KeyHasher`] and its clones
//! are secret material, redacted in `Debug` and wiped when dropped.
//!
//! Use one stable, random secret of at least [`MIN_SECRET_LEN`] bytes across
//! every replica sharing a backend. Rotating it changes every derived key, so
//! on its own it starts fresh counters. A hasher built
//! [`with_previous_secret`](KeyHasher::with_previous_secret) rotates without
//! a reset: each key it derives carries the subject's key under the previous
//! secret too, and a counter with no state under the new key starts from the
//! old key's state (see [`carry`](crate::carry)). Deploy it to all replicas
//! together (replicas still on the old secret alone count on the old keys),
//! and drop the previous secret once the longest window in use has passed.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::{
    hmac_midstate::{Midstate, Pads},
    id::{PolicyId, ScopeId},
    policy::{Policy, PolicyFingerprint},
};

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
    /// [`KeyHasher::with_previous_secret`] was given the current secret.
    #[error("the previous key-hashing secret is the current one")]
    PreviousIsCurrent,
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
/// secret changes every derived key, which starts fresh counters, unless the
/// new hasher keeps the previous secret
/// ([`with_previous_secret`](Self::with_previous_secret)) until the longest
/// window in use has passed.
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
    /// The same two chaining states, for prepared hashers (wiped on drop too).
    pads: Pads,
    /// The previous secret's HMAC state during a rotation (wiped on drop too).
    previous: Option<Box<Hmac<Sha256>>>,
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
        Ok(Self {
            mac,
            pads: Pads::new(secret),
            previous: None,
        })
    }

    /// Returns the hasher keeping `previous`, the secret it replaces, for a
    /// rotation without a reset: each [`SubjectKey`] it derives also carries
    /// the subject's key under `previous`, and a counter that holds no state
    /// under the new key starts from the one under the previous key, on every
    /// backend (see [`carry`](crate::carry)). An attacker at the limit before
    /// the rotation is still denied after it.
    ///
    /// Deploy it to every replica; once the longest window in use (GCRA: its
    /// full replenishment) has passed since the rotation, drop `previous`.
    /// Hashing costs a second HMAC meanwhile. The previous secret, like the
    /// current one, never reaches `Debug`, and is wiped when the hasher is
    /// dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
    ///
    /// let policy = FixedWindowPolicy::new(
    ///     PolicyId::new("auth.reset")?,
    ///     ScopeId::new("recipient")?,
    ///     5,
    ///     Duration::from_secs(900),
    /// )?;
    /// let before = KeyHasher::new(b"the secret in use until today, 32+ bytes")?;
    /// let after = KeyHasher::new(b"the secret in use from today on, 32+ bytes")?
    ///     .with_previous_secret(b"the secret in use until today, 32+ bytes")?;
    /// let key = after.hash_for(&policy, b"user@example.test");
    /// assert_eq!(key.previous(), Some(*before.hash_for(&policy, b"user@example.test").as_bytes()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyHasherError::SecretTooShort`] if `previous` is shorter than
    /// [`MIN_SECRET_LEN`] bytes; [`KeyHasherError::PreviousIsCurrent`] if it
    /// is the current secret.
    pub fn with_previous_secret(mut self, previous: &[u8]) -> Result<Self, KeyHasherError> {
        let previous = Self::new(previous)?;
        // Equal secrets have equal HMAC states: compare a derived tag rather
        // than keep the raw secret.
        let probe = |mac: &Hmac<Sha256>| {
            let mut mac = mac.clone();
            mac.update(b"runlimit previous secret probe");
            mac.finalize().into_bytes()
        };
        if probe(&previous.mac) == probe(&self.mac) {
            return Err(KeyHasherError::PreviousIsCurrent);
        }
        self.previous = Some(Box::new(previous.mac.clone()));
        Ok(self)
    }

    /// Whether the hasher keeps a previous secret.
    #[must_use]
    pub fn is_rotating(&self) -> bool {
        self.previous.is_some()
    }

    /// Derives the subject key for `subject` under `policy`'s id and scope.
    ///
    /// `subject` must already be normalized by the application (for example a
    /// lowercased e-mail address or an IPv6 /64 prefix); see the [module
    /// documentation](crate::key#derivation) for the exact derivation.
    #[must_use]
    pub fn hash_for<P: Policy + ?Sized>(&self, policy: &P, subject: &[u8]) -> SubjectKey {
        let key = derive(&self.mac, policy, subject);
        self.with_previous(key, policy, subject)
    }

    /// `key`, carrying the subject's key under the previous secret if there
    /// is one.
    #[inline]
    fn with_previous<P: Policy + ?Sized>(
        &self,
        key: SubjectKey,
        policy: &P,
        subject: &[u8],
    ) -> SubjectKey {
        match &self.previous {
            None => key,
            Some(previous) => key.with_previous(derive(previous, policy, subject).digest),
        }
    }

    /// Prepares derivation under one policy's id and scope, for an extractor that
    /// hashes many subjects under the same policy.
    ///
    /// The returned hasher produces exactly the keys [`hash_for`](Self::hash_for)
    /// produces, for every policy. For the policy it was prepared for it starts
    /// from the SHA-256 state that has already absorbed the framing, so it
    /// skips the compressions the framing fills on its own (one of the usual
    /// three once the id and scope together reach 17 characters, and from 10
    /// characters for subjects shorter than 256 bytes), and it finishes the
    /// HMAC with the SHA-256 compression function directly, for subjects that
    /// fit the last two blocks: at least 55 bytes, and up to 118 depending on
    /// the id and scope. Longer subjects take [`hash_for`](Self::hash_for)'s
    /// path.
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
    /// let prepared = hasher.prepared_for(&policy);
    /// assert_eq!(
    ///     prepared.hash_for(&policy, b"user@example.test"),
    ///     hasher.hash_for(&policy, b"user@example.test"),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn prepared_for<P: Policy + ?Sized>(&self, policy: &P) -> PreparedKeyHasher {
        let framing = framing(policy);
        let framed = self.pads.absorb(&framing);
        // The subject's length prefix starts with zero bytes for any subject of
        // realistic size. When the framing ends a few bytes short of a SHA-256
        // block, absorbing those zeros now completes the block ahead of time.
        let short_of_block = (BLOCK_LEN - framing.len() % BLOCK_LEN) % BLOCK_LEN;
        let block_aligned = (1..LENGTH_PREFIX_LEN).contains(&short_of_block).then(|| {
            (
                framed.absorb(&[0; LENGTH_PREFIX_LEN][..short_of_block]),
                short_of_block,
            )
        });
        PreparedKeyHasher {
            hasher: self.clone(),
            id: policy.id().clone(),
            scope: policy.scope().clone(),
            framed,
            block_aligned,
        }
    }
}

const BLOCK_LEN: usize = 64;
const LENGTH_PREFIX_LEN: usize = 8;

/// `lp(x)`'s length prefix: the byte length of `x`, 8 bytes big-endian.
fn length_prefix(bytes: &[u8]) -> [u8; LENGTH_PREFIX_LEN] {
    (bytes.len() as u64).to_be_bytes()
}

/// The fields that frame every subject under `policy`'s id and scope.
fn framing_fields<P: Policy + ?Sized>(policy: &P) -> [&[u8]; 3] {
    [
        SUBJECT_KEY_DOMAIN,
        policy.id().as_str().as_bytes(),
        policy.scope().as_str().as_bytes(),
    ]
}

/// Absorbs `lp(domain) ‖ lp(policy id) ‖ lp(scope id)`.
fn absorb_framing<P: Policy + ?Sized>(mac: &mut Hmac<Sha256>, policy: &P) {
    for field in framing_fields(policy) {
        mac.update(&length_prefix(field));
        mac.update(field);
    }
}

/// `lp(domain) ‖ lp(policy id) ‖ lp(scope id)`.
fn framing<P: Policy + ?Sized>(policy: &P) -> Vec<u8> {
    let mut framing = Vec::new();
    for field in framing_fields(policy) {
        framing.extend_from_slice(&length_prefix(field));
        framing.extend_from_slice(field);
    }
    framing
}

/// Absorbs what remains of the subject's length prefix and the subject itself.
fn derive<P: Policy + ?Sized>(mac: &Hmac<Sha256>, policy: &P, subject: &[u8]) -> SubjectKey {
    let mut mac = mac.clone();
    absorb_framing(&mut mac, policy);
    finish(mac, &length_prefix(subject), subject)
}

fn finish(mut mac: Hmac<Sha256>, length_rest: &[u8], subject: &[u8]) -> SubjectKey {
    mac.update(length_rest);
    mac.update(subject);
    SubjectKey::from_digest(mac.finalize().into_bytes().into())
}

/// A [`KeyHasher`] prepared for one policy by [`KeyHasher::prepared_for`].
///
/// It derives the same keys as the hasher it came from, for every policy, and
/// derives them faster for the policy it was prepared for (for subjects up to
/// 55 bytes at least; see [`KeyHasher::prepared_for`]). Like [`KeyHasher`],
/// it is secret material: `Debug` shows only the policy's id and scope, and its
/// HMAC states are wiped when it is dropped.
#[derive(Clone)]
pub struct PreparedKeyHasher {
    /// For policies other than the prepared one.
    hasher: KeyHasher,
    id: PolicyId,
    scope: ScopeId,
    /// The inner hash after the prepared policy's framing.
    framed: Midstate,
    /// `framed` plus the first `n` bytes of the subject's length prefix, all zero,
    /// when they complete a block: usable for subjects shorter than 2^(8·(8 − n))
    /// bytes.
    block_aligned: Option<(Midstate, usize)>,
}

impl PreparedKeyHasher {
    /// Derives the subject key for `subject` under `policy`'s id and scope: the
    /// same key [`KeyHasher::hash_for`] derives.
    #[must_use]
    pub fn hash_for<P: Policy + ?Sized>(&self, policy: &P, subject: &[u8]) -> SubjectKey {
        if policy.id() != &self.id || policy.scope() != &self.scope {
            return self.hasher.hash_for(policy, subject);
        }
        let length = length_prefix(subject);
        let finished = match &self.block_aligned {
            Some((aligned, zeros)) if length[..*zeros].iter().all(|&byte| byte == 0) => {
                aligned.finish(&length[*zeros..], subject)
            }
            _ => self.framed.finish(&length, subject),
        };
        // Subjects too long to finish in two blocks (at least 55 bytes fit,
        // depending on the framing) take the general derivation.
        match finished {
            Some(digest) => {
                self.hasher
                    .with_previous(SubjectKey::from_digest(digest), policy, subject)
            }
            None => self.hasher.hash_for(policy, subject),
        }
    }
}

impl fmt::Debug for PreparedKeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedKeyHasher")
            .field("id", &self.id)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.previous.is_some() {
            f.write_str("KeyHasher(<redacted>, previous: <redacted>)")
        } else {
            f.write_str("KeyHasher(<redacted>)")
        }
    }
}

/// An opaque 32-byte key for one subject under one policy id and scope.
///
/// Usually derived with [`KeyHasher::hash_for`]; [`SubjectKey::from_digest`] accepts
/// a digest computed elsewhere, which must be just as unpredictable. `Debug` is
/// redacted and the type deliberately has no serde support.
///
/// During a secret rotation the key also carries the subject's key under the
/// previous secret ([`previous`](Self::previous)), from which a backend
/// carries the subject's state. A key is its digest: equality, ordering and
/// hashing ignore the previous key.
#[derive(Clone, Copy)]
pub struct SubjectKey {
    digest: [u8; 32],
    previous: Option<[u8; 32]>,
}

impl SubjectKey {
    /// Wraps a 32-byte digest computed by the application.
    ///
    /// Prefer [`KeyHasher`]; if you derive keys yourself, use a keyed hash of the
    /// normalized subject so storage never holds guessable values.
    #[inline]
    #[must_use]
    pub const fn from_digest(digest: [u8; 32]) -> Self {
        Self {
            digest,
            previous: None,
        }
    }

    /// Returns the key carrying `previous`, the same subject's key under the
    /// previous secret (what [`KeyHasher::with_previous_secret`] derives), for
    /// keys derived outside this crate during a rotation.
    #[inline]
    #[must_use]
    pub const fn with_previous(mut self, previous: [u8; 32]) -> Self {
        self.previous = Some(previous);
        self
    }

    /// The key bytes, for backends that store them.
    #[inline]
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The subject's key under the previous secret, during a rotation.
    #[inline]
    #[must_use]
    pub const fn previous(&self) -> Option<[u8; 32]> {
        self.previous
    }
}

impl PartialEq for SubjectKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for SubjectKey {}

impl std::hash::Hash for SubjectKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
    }
}

impl PartialOrd for SubjectKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SubjectKey {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.digest.cmp(&other.digest)
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
            // A counter is keyed by the digest alone.
            subject: SubjectKey::from_digest(subject.digest),
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
