//! HMAC-SHA-256 finished from precomputed SHA-256 midstates.
//!
//! HMAC hashes two pad blocks derived from the secret, then the message
//! inside and the inner digest outside. RFC 2104 (section 4) notes that the
//! chaining states after the two pad blocks can be computed once per secret;
//! a [`PreparedKeyHasher`](crate::PreparedKeyHasher) goes further and also
//! absorbs its policy's framing once. What is left per subject is one or two
//! blocks of the inner hash and one of the outer, which this module writes
//! straight into [`compress256`]: the same digest the `hmac` crate computes
//! (the key-hashing tests compare the two for every framing length and
//! subject length, and pin golden vectors), through much less code per key.
//!
//! Chaining states derived from the secret are wiped when dropped, as the
//! `hmac` crate's are.

use sha2::{Digest, Sha256, block_api::compress256};
use zeroize::Zeroizing;

/// SHA-256's block length in bytes.
const BLOCK_LEN: usize = 64;

/// SHA-256's initial hash value (FIPS 180-4, section 5.3.3).
const INITIAL_STATE: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256 padding takes at least this many bytes: `0x80` and the 64-bit
/// message length.
const MIN_PADDING_LEN: usize = 1 + 8;

type State = Zeroizing<[u32; 8]>;

/// The chaining states after one secret's inner and outer pad blocks.
#[derive(Clone)]
pub(crate) struct Pads {
    inner: State,
    outer: State,
}

impl Pads {
    /// The pad blocks' states for `secret` (hashed first when longer than a
    /// block, as HMAC specifies).
    pub(crate) fn new(secret: &[u8]) -> Self {
        let mut key = Zeroizing::new([0u8; BLOCK_LEN]);
        if secret.len() > BLOCK_LEN {
            key[..32].copy_from_slice(&Sha256::digest(secret));
        } else {
            key[..secret.len()].copy_from_slice(secret);
        }
        let pad = |byte: u8| {
            let mut block = Zeroizing::new([0u8; BLOCK_LEN]);
            for (padded, key) in block.iter_mut().zip(key.iter()) {
                *padded = key ^ byte;
            }
            let mut state = Zeroizing::new(INITIAL_STATE);
            // Borrowed, not copied: a copy of the padded key would outlive
            // the wiped block on the stack.
            compress256(&mut state, std::slice::from_ref(&*block));
            state
        };
        Self {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// The inner hash after `message`.
    pub(crate) fn absorb(&self, message: &[u8]) -> Midstate {
        Midstate {
            state: self.inner.clone(),
            tail: [0; BLOCK_LEN],
            tail_len: 0,
            absorbed: BLOCK_LEN as u64,
            outer: self.outer.clone(),
        }
        .absorb(message)
    }
}

/// The inner hash after a message prefix: its chaining state, the bytes past
/// the prefix's last whole block, and the outer pad's state to finish with.
#[derive(Clone)]
pub(crate) struct Midstate {
    state: State,
    /// Message bytes not yet compressed (the first `tail_len`).
    tail: [u8; BLOCK_LEN],
    tail_len: usize,
    /// Bytes hashed so far, the pad block and the tail included.
    absorbed: u64,
    outer: State,
}

impl Midstate {
    /// This state extended with `bytes`.
    pub(crate) fn absorb(&self, bytes: &[u8]) -> Self {
        let mut pending = self.tail[..self.tail_len].to_vec();
        pending.extend_from_slice(bytes);
        let (blocks, rest) = pending.as_chunks::<BLOCK_LEN>();
        let mut state = self.state.clone();
        compress256(&mut state, blocks);
        let mut tail = [0; BLOCK_LEN];
        tail[..rest.len()].copy_from_slice(rest);
        Self {
            state,
            tail,
            tail_len: rest.len(),
            absorbed: self.absorbed + bytes.len() as u64,
            outer: self.outer.clone(),
        }
    }

    /// The HMAC of the prefix followed by `first` and `second`, when what is
    /// left fits two blocks with its padding; `None` otherwise.
    #[inline]
    pub(crate) fn finish(&self, first: &[u8], second: &[u8]) -> Option<[u8; 32]> {
        let end = self.tail_len + first.len() + second.len();
        if end + MIN_PADDING_LEN > 2 * BLOCK_LEN {
            return None;
        }
        let mut blocks = [[0u8; BLOCK_LEN]; 2];
        let message = blocks.as_flattened_mut();
        message[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        let mut at = self.tail_len;
        for part in [first, second] {
            message[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        message[end] = 0x80;
        let count = if end + MIN_PADDING_LEN <= BLOCK_LEN {
            1
        } else {
            2
        };
        let bits = (self.absorbed + (end - self.tail_len) as u64) * 8;
        message[count * BLOCK_LEN - 8..count * BLOCK_LEN].copy_from_slice(&bits.to_be_bytes());
        // Plain copies of the chaining states, not wiped ones: each is
        // compressed in place at once, after which it holds the inner digest
        // and the final digest (the key returned), neither of them the
        // secret's midstate; the block between them holds the inner digest.
        let mut inner: [u32; 8] = *self.state;
        compress256(&mut inner, &blocks[..count]);

        // The outer hash: the pad block (in `outer`), then the inner digest.
        let mut block = [0u8; BLOCK_LEN];
        block[..32].copy_from_slice(&digest_bytes(&inner));
        block[32] = 0x80;
        block[BLOCK_LEN - 8..].copy_from_slice(&((BLOCK_LEN as u64 + 32) * 8).to_be_bytes());
        let mut outer: [u32; 8] = *self.outer;
        compress256(&mut outer, std::slice::from_ref(&block));
        Some(digest_bytes(&outer))
    }
}

/// A SHA-256 state as its big-endian digest bytes.
#[inline]
fn digest_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut digest = [0u8; 32];
    for (bytes, word) in digest.as_chunks_mut::<4>().0.iter_mut().zip(state) {
        *bytes = word.to_be_bytes();
    }
    digest
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, KeyInit, Mac};
    use proptest::prelude::*;

    use super::*;

    fn reference(secret: &[u8], message: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("any length");
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    #[test]
    fn the_initial_state_hashes_the_empty_message() {
        // SHA-256("") through the padding this module writes.
        let mut block = [0u8; BLOCK_LEN];
        block[0] = 0x80;
        let mut state = INITIAL_STATE;
        compress256(&mut state, &[block]);
        assert_eq!(digest_bytes(&state), <[u8; 32]>::from(Sha256::digest(b"")));
    }

    proptest! {
        /// Every split of a message into an absorbed prefix and two finishing
        /// parts gives the `hmac` crate's digest, for secrets shorter and
        /// longer than a block, or `None` exactly when the rest does not fit
        /// two blocks.
        #[test]
        fn finishing_from_a_midstate_is_hmac(
            secret in proptest::collection::vec(any::<u8>(), 0..200),
            message in proptest::collection::vec(any::<u8>(), 0..300),
            prefix_len in 0usize..300,
            first_len in 0usize..300,
            split_absorb in any::<bool>(),
        ) {
            let prefix_len = prefix_len.min(message.len());
            let first_len = first_len.min(message.len() - prefix_len);
            let (prefix, rest) = message.split_at(prefix_len);
            let (first, second) = rest.split_at(first_len);
            let pads = Pads::new(&secret);
            let midstate = if split_absorb {
                let (a, b) = prefix.split_at(prefix.len() / 2);
                pads.absorb(a).absorb(b)
            } else {
                pads.absorb(prefix)
            };
            let fits = prefix.len() % BLOCK_LEN + rest.len() + MIN_PADDING_LEN <= 2 * BLOCK_LEN;
            match midstate.finish(first, second) {
                Some(digest) => {
                    prop_assert!(fits);
                    prop_assert_eq!(digest, reference(&secret, &message));
                }
                None => prop_assert!(!fits),
            }
        }
    }
}
