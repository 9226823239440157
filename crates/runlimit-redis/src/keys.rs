//! Key naming and Redis Cluster hash slots.

use runlimit_core::CounterKey;

use crate::config::{KeyRouting, RedisConfig};

/// `prefix` + (`{tag}:` when routed to one slot) + the 128 hex digits of the
/// counter key. The counter key is a fingerprint and an HMAC output, so keys
/// reveal neither subjects nor policies.
pub(crate) fn redis_key(config: &RedisConfig, counter: &CounterKey) -> String {
    let mut key = String::with_capacity(config.prefix().len() + 140);
    key.push_str(config.prefix());
    if let KeyRouting::SingleSlot(tag) = config.routing() {
        key.push('{');
        key.push_str(tag);
        key.push_str("}:");
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for byte in counter.to_bytes() {
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    key
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
        assert!(key.starts_with("runlimit:") && key.len() == "runlimit:".len() + 128);
        assert!(!key.contains("alice"));
        let tagged = RedisConfig::default()
            .with_routing(KeyRouting::SingleSlot("login".to_owned()))
            .expect("valid");
        let key = redis_key(&tagged, &counter);
        assert!(key.starts_with("runlimit:{login}:"));
        assert_eq!(hash_slot(&key), hash_slot("{login}"));
    }
}
