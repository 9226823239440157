//! [`AnyPolicy`] on Redis: each check decided by its algorithm's script code,
//! a batch that mixes algorithms decided atomically by one script
//! (`any.lua`), and receipts, refunds, grants, peeks and carries for all
//! three.

use std::time::Duration;

use runlimit_core::{
    Admitted, AnyPolicy, Check, Decision, FixedWindowPolicy, GcraPolicy, Policy,
    SlidingWindowPolicy, Stamp,
};

use super::{
    ANY, ANY_CARRYING, ANY_CARRYING_GRANT, ANY_COALESCED, ANY_GRANT, ANY_REFUND, Lua, Marking,
    RedisPolicy,
};
use crate::carry::kind_code;

/// The arguments `any.lua` takes per key: the algorithm and its five.
const PER_KEY: usize = 6;

/// The arguments `any_refund.lua` takes per key: the algorithm and its six.
const PER_CREDIT: usize = 7;

/// What `any.lua` answers for a check that fits in a batch another check
/// denies.
const FITS: i64 = -2;

/// `check`, an [`AnyPolicy`] check whose policy holds `policy`, as a check of
/// `policy`'s type: the same counter, subject and cost.
fn typed<'a, Q: Policy>(check: &Check<'a, AnyPolicy>, policy: &'a Q) -> Check<'a, Q> {
    Check::weighted(policy, *check.subject(), check.cost())
        .unwrap_or_else(|_| unreachable!("an AnyPolicy's capacity is the policy's it holds"))
}

/// Runs `$body` with `$typed`, `$check` as a check of its policy's type, and
/// `$policy` naming that type.
macro_rules! with_typed {
    ($check:expr, |$typed:ident: $policy:ident| $body:expr) => {
        match $check.policy() {
            AnyPolicy::FixedWindow(policy) => {
                type $policy = FixedWindowPolicy;
                let $typed = typed($check, policy);
                $body
            }
            AnyPolicy::SlidingWindow(policy) => {
                type $policy = SlidingWindowPolicy;
                let $typed = typed($check, policy);
                $body
            }
            AnyPolicy::Gcra(policy) => {
                type $policy = GcraPolicy;
                let $typed = typed($check, policy);
                $body
            }
        }
    };
}

/// Each check is decided, refunded and peeked with its algorithm's code, as
/// a check of its policy's own type is; a batch measures each check first
/// (as a grant measures its room), then admits each only if all fit.
impl RedisPolicy for AnyPolicy {
    const ISSUER: &'static str = "runlimit-redis/any";
    const COALESCER: usize = 3;

    fn script() -> &'static Lua {
        &ANY
    }

    fn coalesced_script() -> &'static Lua {
        &ANY_COALESCED
    }

    fn carrying_script() -> &'static Lua {
        &ANY_CARRYING
    }

    /// The state a lone fixed- or sliding-window check was decided on, read
    /// as that algorithm reads it (the run's arguments begin with the
    /// algorithm).
    fn lone_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
        let (&kind, rest) = arguments.split_first()?;
        let own = rest.get(..3)?;
        match kind {
            1 => FixedWindowPolicy::lone_reply(state, now, own),
            2 => SlidingWindowPolicy::lone_reply(state, now, own),
            _ => None,
        }
    }

    fn lone_is_cheaper_coalesced(arguments: &[i64]) -> bool {
        arguments.first() == Some(&2)
    }

    /// Per check its algorithm, then its algorithm's arguments, padded.
    fn arguments(checks: &[Check<'_, Self>], marking: Marking) -> Vec<i64> {
        let mut arguments = Vec::with_capacity(checks.len() * PER_KEY);
        for check in checks {
            let start = arguments.len();
            arguments.push(kind_code(check.policy().kind()));
            with_typed!(check, |typed: Q| arguments.extend(
                <Q as RedisPolicy>::arguments(std::slice::from_ref(&typed), marking)
            ));
            arguments.resize(start + PER_KEY, 0);
        }
        arguments
    }

    /// Per check its algorithm's reply without `now`, or [`FITS`], then
    /// `now`: each decided as its algorithm decides it.
    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<(Decision, Stamp)>> {
        let (&now, mut rest) = reply.split_last()?;
        let decided = checks
            .iter()
            .map(|check| {
                if rest.first() == Some(&FITS) {
                    rest = &rest[1..];
                    // Another check denied the batch, so nothing was
                    // consumed and only the denial is reported
                    // (`BatchDecision::from_decisions`).
                    let decision =
                        Decision::allowed(check.policy().capacity(), 0, Duration::ZERO).ok()?;
                    return Some((decision, Stamp::new([0; 3])));
                }
                let length = match check.policy() {
                    AnyPolicy::FixedWindow(_) => 3,
                    AnyPolicy::Gcra(_) => 4,
                    // Outcome, eighth, version, then as many counts as the
                    // fourth value says.
                    AnyPolicy::SlidingWindow(_) => 4 + usize::try_from(*rest.get(3)?).ok()?,
                };
                let (values, tail) = rest.split_at_checked(length)?;
                rest = tail;
                let mut alone = Vec::with_capacity(length + 1);
                alone.extend_from_slice(values);
                alone.push(now);
                with_typed!(check, |typed: Q| <Q as RedisPolicy>::decisions(
                    std::slice::from_ref(&typed),
                    &alone
                )?
                .pop())
            })
            .collect::<Option<Vec<_>>>()?;
        rest.is_empty().then_some(decided)
    }

    fn grant_script() -> &'static Lua {
        &ANY_GRANT
    }

    fn carrying_grant_script() -> &'static Lua {
        &ANY_CARRYING_GRANT
    }

    fn grant_arguments(check: &Check<'_, Self>, up_to: u64, marking: Marking) -> Vec<i64> {
        let mut arguments = vec![kind_code(check.policy().kind())];
        with_typed!(check, |typed: Q| arguments
            .extend(<Q as RedisPolicy>::grant_arguments(&typed, up_to, marking)));
        arguments
    }

    fn refund_script() -> &'static Lua {
        &ANY_REFUND
    }

    fn refund_arguments(
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
    ) -> Vec<i64> {
        let mut arguments = Vec::with_capacity(checks.len() * PER_CREDIT);
        for ((check, admitted), &units) in checks.iter().zip(admitted).zip(units) {
            let start = arguments.len();
            arguments.push(kind_code(check.policy().kind()));
            with_typed!(check, |typed: Q| arguments.extend(
                <Q as RedisPolicy>::refund_arguments(
                    std::slice::from_ref(&typed),
                    std::slice::from_ref(admitted),
                    &[units]
                )
            ));
            arguments.resize(start + PER_CREDIT, 0);
        }
        arguments
    }

    fn peek_decision(check: &Check<'_, Self>, now_us: i64, state: Option<&str>) -> Decision {
        with_typed!(check, |typed: Q| <Q as RedisPolicy>::peek_decision(
            &typed, now_us, state
        ))
    }
}
