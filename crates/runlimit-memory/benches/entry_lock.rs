//! A design experiment for ROADMAP.md, not a benchmark of the shipped store:
//! does taking a lock per entry instead of per shard make two threads scale?
//!
//! Both variants share one toy table (64 shards of open-addressed 32-byte
//! entries, 100k pre-inserted keys, a GCRA update per check, a clock read per
//! check) and differ only in exclusion:
//!
//! - `shard mutex`: a check locks its shard's mutex and advances the shard's
//!   clock, as `GcraStore` does;
//! - `entry lock`: a check finds its entry without any shard lock and takes a
//!   lock bit in the entry's own cache line.
//!
//! Run with `cargo bench -p runlimit-memory --bench entry_lock`; it prints
//! nanoseconds per check for one and two pinned threads and the scaling.
#![allow(missing_docs)]

use std::{
    hint::black_box,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::Instant,
};

const KEYS: u64 = 100_000;
const SHARDS: usize = 64;
const CHECKS_PER_THREAD: u64 = 5_000_000;
const LOCKED: u64 = 1 << 63;

/// One key's slot: the key, a tag (key bits plus the lock bit) and the GCRA
/// theoretical arrival time.
#[repr(align(32))]
#[derive(Default)]
struct Entry {
    key: AtomicU64,
    tag: AtomicU64,
    tat: AtomicU64,
}

#[repr(align(128))]
struct Shard {
    /// The shard's lock and clock, for the `shard mutex` variant.
    clock: Mutex<u64>,
    entries: Box<[Entry]>,
    mask: usize,
}

fn mix(word: u64) -> u64 {
    let product = word.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    product ^ (product >> 29)
}

fn slot(word: u64, mask: usize) -> usize {
    usize::try_from(mix(word)).unwrap_or(usize::MAX) & mask
}

impl Shard {
    fn new(capacity: usize) -> Self {
        let buckets = (capacity * 8 / 7).next_power_of_two();
        Self {
            clock: Mutex::new(0),
            entries: (0..buckets).map(|_| Entry::default()).collect(),
            mask: buckets - 1,
        }
    }

    fn insert(&self, key: u64) {
        let mut index = slot(key, self.mask);
        while self.entries[index].key.load(Ordering::Relaxed) != 0 {
            index = (index + 1) & self.mask;
        }
        let entry = &self.entries[index];
        entry.key.store(key, Ordering::Relaxed);
        entry
            .tag
            .store(key.rotate_left(17) & !LOCKED, Ordering::Release);
    }

    fn find(&self, key: u64) -> &Entry {
        let mut index = slot(key, self.mask);
        loop {
            let entry = &self.entries[index];
            if entry.key.load(Ordering::Acquire) == key {
                return entry;
            }
            index = (index + 1) & self.mask;
        }
    }
}

/// A unit-cost GCRA admission; the caller holds the entry exclusively.
fn admit(entry: &Entry, now: u64) -> bool {
    const INTERVAL: u64 = 1_000;
    const TOLERANCE: u64 = 1_000_000_000;
    let tat = entry.tat.load(Ordering::Relaxed).max(now);
    let allowed = tat - now <= TOLERANCE;
    if allowed {
        entry.tat.store(tat + INTERVAL, Ordering::Relaxed);
    }
    allowed
}

#[derive(Clone, Copy)]
enum Exclusion {
    ShardMutex,
    EntryLock,
}

struct Table {
    shards: Vec<Shard>,
    keys: Vec<u64>,
    origin: Instant,
}

impl Table {
    fn new() -> Self {
        let keys: Vec<u64> = (1..=KEYS).map(|n| mix(n) | 1).collect();
        let shards: Vec<Shard> = (0..SHARDS)
            .map(|_| Shard::new(2 * usize::try_from(KEYS).unwrap_or(0) / SHARDS))
            .collect();
        let table = Self {
            shards,
            keys,
            origin: Instant::now(),
        };
        for &key in &table.keys {
            table.shard(key).insert(key);
        }
        table
    }

    fn shard(&self, key: u64) -> &Shard {
        let index = (u128::from(mix(key ^ 0xABCD_EF01)) * SHARDS as u128) >> 64;
        &self.shards[usize::try_from(index).unwrap_or(0)]
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn check(&self, key: u64, exclusion: Exclusion) -> bool {
        let shard = self.shard(key);
        match exclusion {
            Exclusion::ShardMutex => {
                let mut clock = shard.clock.lock().expect("never poisoned");
                let entry = shard.find(key);
                *clock = (*clock).max(self.now());
                admit(entry, *clock)
            }
            Exclusion::EntryLock => {
                let entry = shard.find(key);
                let tag = entry.tag.load(Ordering::Relaxed) & !LOCKED;
                while entry
                    .tag
                    .compare_exchange_weak(tag, tag | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    std::hint::spin_loop();
                }
                let allowed = admit(entry, self.now());
                entry.tag.store(tag, Ordering::Release);
                allowed
            }
        }
    }

    /// Seconds for `threads` pinned threads to run their checks.
    fn run(&self, threads: usize, exclusion: Exclusion) -> f64 {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let started = Instant::now();
        thread::scope(|scope| {
            for thread in 0..threads {
                let core = cores.get(thread % cores.len().max(1)).copied();
                scope.spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                    let mut state = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(thread as u64 + 1);
                    for _ in 0..CHECKS_PER_THREAD {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let key = self.keys[usize::try_from(state % KEYS).unwrap_or(0)];
                        black_box(self.check(key, exclusion));
                    }
                });
            }
        });
        started.elapsed().as_secs_f64()
    }
}

fn main() {
    let table = Table::new();
    let per_check = |seconds: f64| seconds * 1e9 / CHECKS_PER_THREAD as f64;
    for round in 1..=3 {
        for (name, exclusion) in [
            ("shard mutex", Exclusion::ShardMutex),
            ("entry lock", Exclusion::EntryLock),
        ] {
            let one = table.run(1, exclusion);
            let two = table.run(2, exclusion);
            println!(
                "round {round}, {name}: 1 thread {:.1} ns/check, 2 threads {:.1} ns/check per thread, scaling {:.2}x",
                per_check(one),
                per_check(two),
                2.0 * one / two
            );
        }
    }
}
