//! Subject-key derivation: golden vectors, domain separation and redaction.
//!
//! The golden vectors were computed independently with Python's `hmac` and
//! `hashlib` modules from the derivation documented in `runlimit_core::key`:
//! a change to the derivation must fail here, because it would silently reset
//! every deployed counter and break services that derive keys in other languages.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    FixedWindowPolicy, GcraPolicy, KeyHasher, KeyHasherError, MIN_SECRET_LEN, PolicyId, ScopeId,
    SubjectKey,
};

const SECRET: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

fn fixed(id: &str, scope: &str, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid id"),
        ScopeId::new(scope).expect("valid scope"),
        limit,
        window,
    )
    .expect("valid policy")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn golden_vectors_pin_the_derivation() {
    let hasher = KeyHasher::new(SECRET).expect("32-byte secret");
    let identity = fixed("auth.login", "identity", 8, Duration::from_secs(60));
    let client = fixed("auth.login", "client", 40, Duration::from_secs(60));
    assert_eq!(
        hex(hasher.hash_for(&identity, b"user@example.test").as_bytes()),
        "8525baa21308c5f257804142f0cd7b80242b78963a63d2e143bfb88b93fd265c"
    );
    assert_eq!(
        hex(hasher
            .hash_for(&client, b"client-network:192.0.2.4")
            .as_bytes()),
        "788983244b5dead58303b4ed52d2702ee4000dd0956cfd33862c75d801866517"
    );

    let long_secret: Vec<u8> = (0..64).collect();
    let hasher = KeyHasher::new(&long_secret).expect("64-byte secret");
    let gcra = GcraPolicy::new(
        PolicyId::new("api.read").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(1),
        20,
    )
    .expect("valid policy");
    assert_eq!(
        hex(hasher.hash_for(&gcra, b"").as_bytes()),
        "f9e16db1f01cecae4f3a8b015a23591ae886cd973702d89b9dd7d01aeca9469c"
    );
    let subject: Vec<u8> = (0..=255u8).cycle().take(512).collect();
    assert_eq!(
        hex(hasher
            .hash_for(&fixed("a", "b", 1, Duration::from_millis(1)), &subject)
            .as_bytes()),
        "139b4c48dee7b054df9af34e6718a714e121902eb3caf3b654e048b49665ac3c"
    );
}

#[test]
fn quota_parameters_and_mode_do_not_change_the_subject_key() {
    let hasher = KeyHasher::new(SECRET).expect("valid secret");
    let a = fixed("auth.login", "identity", 8, Duration::from_secs(60));
    let b = fixed("auth.login", "identity", 9, Duration::from_secs(30));
    assert_eq!(hasher.hash_for(&a, b"x"), hasher.hash_for(&b, b"x"));
}

#[test]
fn policy_scope_subject_and_secret_separate_keys() {
    let hasher = KeyHasher::new(SECRET).expect("valid secret");
    let window = Duration::from_secs(60);
    let base = hasher.hash_for(&fixed("p", "s", 1, window), b"subject");
    let others = [
        hasher.hash_for(&fixed("q", "s", 1, window), b"subject"),
        hasher.hash_for(&fixed("p", "t", 1, window), b"subject"),
        hasher.hash_for(&fixed("p", "s", 1, window), b"subjecT"),
        KeyHasher::new(b"0123456789abcdef0123456789abcdeF")
            .expect("valid secret")
            .hash_for(&fixed("p", "s", 1, window), b"subject"),
    ];
    for other in others {
        assert_ne!(base, other);
    }
}

#[test]
fn length_prefixes_make_the_framing_unambiguous() {
    let hasher = KeyHasher::new(SECRET).expect("valid secret");
    let window = Duration::from_secs(1);
    // The same concatenated bytes split differently across id, scope and subject.
    let split_one = hasher.hash_for(&fixed("ab", "c", 1, window), b"d");
    let split_two = hasher.hash_for(&fixed("a", "bc", 1, window), b"d");
    let split_three = hasher.hash_for(&fixed("a", "b", 1, window), b"cd");
    assert_ne!(split_one, split_two);
    assert_ne!(split_two, split_three);
    assert_ne!(split_one, split_three);
}

#[test]
fn short_secrets_are_refused_without_echoing_them() {
    let secret = [b'k'; MIN_SECRET_LEN - 1];
    let error = KeyHasher::new(&secret).expect_err("too short");
    assert_eq!(
        error,
        KeyHasherError::SecretTooShort {
            length: 31,
            minimum: 32
        }
    );
    assert!(!error.to_string().contains("kkk"));
    assert!(KeyHasher::new(&[0; MIN_SECRET_LEN]).is_ok());
}

#[test]
fn debug_output_is_redacted() {
    let hasher = KeyHasher::new(b"super-secret-value-that-is-long-enough!!").expect("valid");
    let clone = hasher.clone();
    let policy = fixed("p", "s", 1, Duration::from_secs(1));
    let key = clone.hash_for(&policy, b"user@example.test");
    assert_eq!(format!("{hasher:?}"), "KeyHasher(<redacted>)");
    assert_eq!(format!("{clone:#?}"), "KeyHasher(<redacted>)");
    assert_eq!(format!("{key:?}"), "SubjectKey(<redacted>)");
    let check = runlimit_core::Check::new(&policy, key);
    let counter = check.counter_key();
    assert_eq!(format!("{counter:?}"), "CounterKey(<redacted>)");
    let shown = format!("{check:?}");
    assert!(shown.contains("SubjectKey(<redacted>)"), "{shown}");
    assert!(!shown.contains(&hex(&key.as_bytes()[..4])), "{shown}");
    assert_eq!(counter.subject(), &key);
    assert_eq!(counter.fingerprint(), policy.fingerprint());
    assert_eq!(&counter.to_bytes()[32..], key.as_bytes());
}

#[test]
fn from_digest_round_trips_bytes() {
    let key = SubjectKey::from_digest([7; 32]);
    assert_eq!(key.as_bytes(), &[7; 32]);
}

proptest! {
    /// A prepared hasher derives exactly `hash_for`'s keys: for its own policy
    /// whatever the framing's length modulo the SHA-256 block (identifiers of 1
    /// to 40 characters each) and the subject's length (on both sides of 256
    /// bytes, where a one-byte length prefix stops fitting), and for any other
    /// policy.
    #[test]
    fn prepared_hashers_derive_the_same_keys(
        id in "[a-z0-9._-]{1,40}",
        scope in "[a-z0-9._-]{1,40}",
        other_scope in "[a-z0-9._-]{1,40}",
        subject in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let hasher = KeyHasher::new(SECRET).expect("valid secret");
        let window = Duration::from_secs(60);
        let policy = fixed(&id, &scope, 5, window);
        let prepared = hasher.prepared_for(&policy);
        prop_assert_eq!(prepared.hash_for(&policy, &subject), hasher.hash_for(&policy, &subject));
        // Quota parameters are not part of the subject key, so another policy
        // with the same id and scope shares the prepared state.
        let same_names = fixed(&id, &scope, 7, Duration::from_secs(1));
        prop_assert_eq!(
            prepared.hash_for(&same_names, &subject),
            hasher.hash_for(&same_names, &subject)
        );
        let other = fixed(&id, &other_scope, 5, window);
        prop_assert_eq!(prepared.hash_for(&other, &subject), hasher.hash_for(&other, &subject));
    }
}

#[test]
fn prepared_hashers_handle_subjects_too_long_for_the_aligned_state() {
    let hasher = KeyHasher::new(SECRET).expect("valid secret");
    // The framing is 58 bytes, 6 short of a block, so the prepared state holds
    // six zero bytes of the length prefix: valid for subjects below 64 KiB.
    let policy = fixed("bench", "client", 5, Duration::from_secs(60));
    let prepared = hasher.prepared_for(&policy);
    for length in [0, 1, 65_535, 65_536, 70_000] {
        let subject = vec![0xA5; length];
        assert_eq!(
            prepared.hash_for(&policy, &subject),
            hasher.hash_for(&policy, &subject),
            "{length}-byte subject"
        );
    }
    // The golden vector, through a prepared hasher.
    let identity = fixed("auth.login", "identity", 8, Duration::from_secs(60));
    assert_eq!(
        hex(hasher
            .prepared_for(&identity)
            .hash_for(&identity, b"user@example.test")
            .as_bytes()),
        "8525baa21308c5f257804142f0cd7b80242b78963a63d2e143bfb88b93fd265c"
    );
}

#[test]
fn prepared_hashers_show_only_their_policy_names() {
    let hasher = KeyHasher::new(b"super-secret-value-that-is-long-enough!!").expect("valid");
    let policy = fixed("auth.login", "identity", 8, Duration::from_secs(60));
    let prepared = hasher.prepared_for(&policy);
    assert_eq!(
        format!("{prepared:?}"),
        format!(
            "PreparedKeyHasher {{ id: {:?}, scope: {:?}, .. }}",
            policy.id(),
            policy.scope()
        )
    );
}
