//! Instruction counts of checks of subjects already carried across a change,
//! for `valgrind --tool=callgrind`:
//! `callgrind_carry <fixed|sliding|gcra> <plain|changed|rotated> <hot|random> <checks>`.
//!
//! `changed` checks a policy continuing from one with half its capacity,
//! `rotated` keys whose hasher keeps a previous secret, `plain` the policy
//! alone. 100,000 keys are stored (and carried) first; run it with two
//! check counts and divide the difference of the totals by the difference
//! of the counts, so the setup cancels out.

use std::{error::Error, hint::black_box, time::Duration};

use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, Policy, PolicyId, ScopeId,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_memory::{
    Algorithm, GcraStore, MemoryStore, MemoryStoreConfig, SlidingWindowStore, Store,
};

const KEYS: u64 = 100_000;
const YEAR: Duration = Duration::from_secs(366 * 24 * 3_600);
const DAY: Duration = Duration::from_secs(24 * 3_600);

fn subject(n: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 30;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        state ^= state >> 27;
        state = state.wrapping_mul(0x94D0_49BB_1331_11EB);
        state ^= state >> 31;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// Stores every key, then makes `checks` checks of one key or of keys at
/// random.
fn run<A: Algorithm>(
    store: &Store<A>,
    policy: &A::Policy,
    keys: &[SubjectKey],
    hot: bool,
    checks: u64,
) -> Result<(), Box<dyn Error>>
where
    A::Policy: Policy,
{
    for key in keys {
        store.check(&Check::new(policy, *key))?;
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..checks {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let index = if hot {
            0
        } else {
            usize::try_from(state % KEYS)?
        };
        black_box(store.check(black_box(&Check::new(policy, keys[index])))?);
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |index: usize, default: &'static str| args.get(index).map_or(default, String::as_str);
    let (algorithm, mode, hot) = (arg(1, "fixed"), arg(2, "plain"), arg(3, "hot") == "hot");
    let checks: u64 = arg(4, "100000").parse()?;
    let config = MemoryStoreConfig::new(4 * usize::try_from(KEYS)?)?;
    let keys: Vec<SubjectKey> = (0..KEYS)
        .map(|n| match mode {
            "rotated" => subject(n).with_previous(*subject(u64::MAX - n).as_bytes()),
            _ => subject(n),
        })
        .collect();
    let (id, scope) = (PolicyId::new("bench")?, ScopeId::new("p")?);
    let changed = mode == "changed";
    match algorithm {
        "fixed" => {
            let mut policy = FixedWindowPolicy::new(id.clone(), scope.clone(), MAX_LIMIT, YEAR)?;
            if changed {
                policy =
                    policy.continuing(&FixedWindowPolicy::new(id, scope, MAX_LIMIT / 2, YEAR)?)?;
            }
            run(&MemoryStore::new(config), &policy, &keys, hot, checks)
        }
        "sliding" => {
            let mut policy = SlidingWindowPolicy::new(id.clone(), scope.clone(), MAX_LIMIT, YEAR)?;
            if changed {
                policy = policy.continuing(&SlidingWindowPolicy::new(
                    id,
                    scope,
                    MAX_LIMIT / 2,
                    YEAR,
                )?)?;
            }
            run(
                &SlidingWindowStore::new(config),
                &policy,
                &keys,
                hot,
                checks,
            )
        }
        _ => {
            let mut policy = GcraPolicy::new(id.clone(), scope.clone(), MAX_LIMIT, DAY, MAX_LIMIT)?;
            if changed {
                policy = policy.continuing(&GcraPolicy::new(
                    id,
                    scope,
                    MAX_LIMIT,
                    DAY,
                    MAX_LIMIT / 2,
                )?)?;
            }
            run(&GcraStore::new(config), &policy, &keys, hot, checks)
        }
    }
}
