//! Counting subjects in memory that does not grow with the log.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
};

/// Subjects arrive as 64 bits of an HMAC output, already uniform: hashing
/// them again would only cost time.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Uniform(u64);

impl Hasher for Uniform {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in, in case.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type UniformState = BuildHasherDefault<Uniform>;

/// Distinct subjects: exact up to `exact_limit`, then a HyperLogLog estimate
/// (2¹⁴ registers, about 0.8% standard error).
///
/// Subjects arrive as 64 bits of their HMAC-derived key, already uniform, so
/// they serve as their own hash.
#[derive(Debug)]
pub(crate) struct Distinct {
    exact: Option<HashSet<u64, UniformState>>,
    exact_limit: usize,
    registers: Box<[u8; REGISTERS]>,
}

const PRECISION: u32 = 14;
const REGISTERS: usize = 1 << PRECISION;

impl Distinct {
    pub(crate) fn new(exact_limit: usize) -> Self {
        Self {
            exact: Some(HashSet::default()),
            exact_limit,
            registers: Box::new([0; REGISTERS]),
        }
    }

    pub(crate) fn insert(&mut self, subject: u64) {
        #[allow(clippy::cast_possible_truncation)]
        let index = (subject >> (64 - PRECISION)) as usize;
        #[allow(clippy::cast_possible_truncation)]
        let rank = ((subject << PRECISION) | (1 << (PRECISION - 1))).leading_zeros() as u8 + 1;
        let register = &mut self.registers[index];
        *register = (*register).max(rank);
        if let Some(exact) = &mut self.exact {
            exact.insert(subject);
            if exact.len() > self.exact_limit {
                self.exact = None;
            }
        }
    }

    /// The count, and whether it is exact.
    pub(crate) fn count(&self) -> (u64, bool) {
        match &self.exact {
            Some(exact) => (exact.len() as u64, true),
            None => (self.estimate(), false),
        }
    }

    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    fn estimate(&self) -> u64 {
        let m = REGISTERS as f64;
        let sum: f64 = self
            .registers
            .iter()
            .map(|&rank| (-f64::from(rank)).exp2())
            .sum();
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        let zeros = self.registers.iter().filter(|&&rank| rank == 0).count();
        let estimate = if raw <= 2.5 * m && zeros > 0 {
            // Linear counting is the better estimate for small sets.
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        estimate.round() as u64
    }
}

/// The most denied subjects, in bounded memory (a Misra–Gries summary):
/// exact while at most `2 × keep` subjects were ever denied; past that the
/// least denied are dropped whenever the table doubles, a subject seen again
/// starts from the largest count dropped, and so a kept count may exceed the
/// true one by at most [`error`](Self::error), never fall below it.
#[derive(Debug)]
pub(crate) struct TopDenied {
    counts: HashMap<u64, Denied, UniformState>,
    keep: usize,
    error: u64,
}

#[derive(Debug)]
pub(crate) struct Denied {
    pub(crate) count: u64,
    /// How the report names the subject.
    pub(crate) label: String,
}

impl TopDenied {
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            counts: HashMap::default(),
            keep: keep.max(1),
            error: 0,
        }
    }

    pub(crate) fn add(&mut self, subject: u64, label: impl FnOnce() -> String) {
        let error = self.error;
        self.counts
            .entry(subject)
            .or_insert_with(|| Denied {
                // A subject dropped before may have had up to `error` denials.
                count: error,
                label: label(),
            })
            .count += 1;
        if self.counts.len() > 2 * self.keep {
            let mut counts: Vec<u64> = self.counts.values().map(|denied| denied.count).collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            let floor = counts[self.keep];
            self.counts.retain(|_, denied| denied.count > floor);
            self.error = self.error.max(floor);
        }
    }

    /// The `n` most denied, most first (ties by subject, for stable reports).
    pub(crate) fn top(&self, n: usize) -> Vec<(u64, &Denied)> {
        let mut all: Vec<(u64, &Denied)> = self.counts.iter().map(|(&k, v)| (k, v)).collect();
        all.sort_unstable_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// How much a reported count may exceed the true one; zero while exact.
    pub(crate) fn error(&self) -> u64 {
        self.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(i: u64) -> u64 {
        // SplitMix64's finalizer: distinct inputs, uniform outputs.
        let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn distinct_is_exact_then_estimates_within_a_few_percent() {
        let mut small = Distinct::new(1_000);
        for i in 0..500 {
            small.insert(spread(i));
            small.insert(spread(i));
        }
        assert_eq!(small.count(), (500, true));

        let mut large = Distinct::new(1_000);
        for i in 0..200_000 {
            large.insert(spread(i));
        }
        let (count, exact) = large.count();
        assert!(!exact);
        assert!((196_000..=204_000).contains(&count), "estimated {count}");
    }

    #[test]
    fn top_denied_keeps_heavy_hitters_among_many_light_ones() {
        let mut top = TopDenied::new(4);
        for round in 0..1_000u64 {
            top.add(1, String::new);
            top.add(2, String::new);
            top.add(1_000 + round, String::new);
        }
        let leaders: Vec<u64> = top.top(2).iter().map(|(subject, _)| *subject).collect();
        assert_eq!(leaders, vec![1, 2]);
        let counts: Vec<u64> = top.top(2).iter().map(|(_, d)| d.count).collect();
        assert!(
            counts
                .iter()
                .all(|&c| (1_000..=1_000 + top.error()).contains(&c))
        );
    }
}
