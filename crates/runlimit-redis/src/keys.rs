//! Key naming and Redis Cluster hash slots.

use runlimit_core::CounterKey;

use crate::config::{KeyRouting, RedisConfig};

/// `prefix`, then the 64 hex digits of the policy fingerprint and the 64 of
/// the HMAC subject key: the subject's in braces, the key's hash tag, with
/// [`KeyRouting::PerSubject`]; after `{tag}:` and without braces with
/// [`KeyRouting::SingleSlot`]. Keys reveal neither subjects nor policies.
pub(crate) fn redis_key(config: &RedisConfig, counter: &CounterKey) -> String {
    let mut key = String::with_capacity(config.prefix().len() + 140);
    key.push_str(config.prefix());
    let tagged = match config.routing() {
        KeyRouting::SingleSlot(tag) => {
            key.push('{');
            key.push_str(tag);
            key.push_str("}:");
            false
        }
        KeyRouting::PerSubject => true,
    };
    push_hex(&mut key, counter.fingerprint().as_bytes());
    if tagged {
        key.push('{');
    }
    push_hex(&mut key, counter.subject().as_bytes());
    if tagged {
        key.push('}');
    }
    key
}

fn push_hex(key: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &byte in bytes {
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of the hash tag, or of
/// the whole key, modulo 16384).
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(length) if length > 0 => &bytes[open + 1..open + 1 + length],
            _ => bytes,
        },
        None => bytes,
    };
    crc16(hashed) % 16_384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(hash_slot("foo"), 12_182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("foo{}{bar}"), hash_slot("foo{}{bar}"));
        assert_eq!(hash_slot("{bar"), crc16(b"{bar") % 16_384);
    }
}

#[cfg(test)]
mod naming {
    use runlimit_core::{Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};

    use super::*;

    #[test]
    fn keys_carry_the_prefix_and_no_subject() {
        let policy = FixedWindowPolicy::new(
            PolicyId::new("auth.login").expect("valid"),
            ScopeId::new("identity").expect("valid"),
            8,
            std::time::Duration::from_secs(60),
        )
        .expect("valid");
        let hasher = KeyHasher::new(b"a test secret of at least 32 bytes!").expect("valid");
        let counter =
            Check::new(&policy, hasher.hash_for(&policy, b"alice@example.test")).counter_key();
        let key = redis_key(&RedisConfig::default(), &counter);
        assert!(key.starts_with("runlimit:") && key.len() == "runlimit:".len() + 130);
        assert!(!key.contains("alice"));
        // The subject key is the hash tag: a policy's versions (one id and
        // scope, so one subject key) share a slot, and subjects spread.
        let raised = FixedWindowPolicy::new(
            PolicyId::new("auth.login").expect("valid"),
            ScopeId::new("identity").expect("valid"),
            16,
            std::time::Duration::from_secs(60),
        )
        .expect("valid");
        let successor =
            Check::new(&raised, hasher.hash_for(&raised, b"alice@example.test")).counter_key();
        assert_ne!(successor, counter);
        let successor = redis_key(&RedisConfig::default(), &successor);
        assert_ne!(successor, key);
        assert_eq!(hash_slot(&successor), hash_slot(&key));
        let slots: std::collections::HashSet<u16> = (0..64u8)
            .map(|n| {
                let subject = hasher.hash_for(&policy, &[n]);
                hash_slot(&redis_key(
                    &RedisConfig::default(),
                    &Check::new(&policy, subject).counter_key(),
                ))
            })
            .collect();
        assert!(slots.len() > 60, "{} slots for 64 subjects", slots.len());
        let tagged = RedisConfig::default()
            .with_routing(KeyRouting::SingleSlot("login".to_owned()))
            .expect("valid");
        let key = redis_key(&tagged, &counter);
        assert!(key.starts_with("runlimit:{login}:"));
        assert_eq!(hash_slot(&key), hash_slot("{login}"));
        // The configuration answers the same slots for callers.
        assert_eq!(tagged.hash_slot(&counter), hash_slot("{login}"));
        assert_eq!(
            RedisConfig::default().hash_slot(&counter),
            hash_slot(&redis_key(&RedisConfig::default(), &counter))
        );
    }
}
