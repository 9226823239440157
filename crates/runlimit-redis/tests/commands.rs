//! Every operation is one command on the server: one script per check,
//! batch, refund and peek, one `DEL` per reset. Counted with the server's
//! `INFO commandstats` on a `redis-server` of the test's own, so no other
//! test's commands interfere; and a peek stores nothing (`DBSIZE`).

mod common;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use runlimit_core::{
    AnyPolicy, Check, FixedWindowPolicy, GcraPolicy, Grant, Lifecycle, Limiter, PolicyId, ScopeId,
    Settle, SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::{RedisConfig, RedisLimiter};

/// The scripts and functions (`EVALSHA`, `EVAL`, `SCRIPT LOAD`, `FCALL`,
/// `FUNCTION LOAD`) and `DEL`s clients sent
/// while `operation` ran. Commands scripts run inside count under their own
/// names (`GET`, `SET`, `TIME`), so only `DEL` can be either: operations that
/// run a script are measured for scripts, resets for `DEL`s.
async fn sent(admin: &mut MultiplexedConnection, operation: impl AsyncFnOnce()) -> (u64, u64) {
    let before = common::calls(admin).await;
    operation().await;
    let after = common::calls(admin).await;
    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    (
        delta("evalsha")
            + delta("eval")
            + delta("script|load")
            + delta("fcall")
            + delta("function|load"),
        delta("del"),
    )
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

#[tokio::test]
async fn every_operation_is_one_command_and_peeks_store_nothing() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let mut admin = common::admin(&url).await;
    let fixed = RedisLimiter::<_, FixedWindowPolicy>::connect(&url, RedisConfig::default())
        .await
        .expect("connect");
    let gcra = RedisLimiter::<_, GcraPolicy>::connect(&url, RedisConfig::default())
        .await
        .expect("connect");
    let sliding = RedisLimiter::<_, SlidingWindowPolicy>::connect(&url, RedisConfig::default())
        .await
        .expect("connect");
    let recent = |scope: &str| {
        SlidingWindowPolicy::new(
            PolicyId::new("commands").expect("valid"),
            ScopeId::new(scope).expect("valid"),
            10,
            Duration::from_secs(60),
        )
        .expect("valid")
    };
    let (recent_client, recent_identity) = (recent("client"), recent("identity"));
    let window = |scope: &str| {
        FixedWindowPolicy::new(
            PolicyId::new("commands").expect("valid"),
            ScopeId::new(scope).expect("valid"),
            10,
            Duration::from_secs(60),
        )
        .expect("valid")
    };
    let (client, identity) = (window("client"), window("identity"));
    let rate = GcraPolicy::new(
        PolicyId::new("commands").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        5,
    )
    .expect("valid");

    // Peeks of keys never seen store nothing.
    for n in 0..10 {
        assert_eq!(
            fixed
                .peek(&Check::new(&client, key(n)))
                .await
                .expect("peek")
                .remaining(),
            Some(10)
        );
        assert_eq!(
            gcra.peek(&Check::new(&rate, key(n)))
                .await
                .expect("peek")
                .remaining(),
            Some(5)
        );
        assert_eq!(
            sliding
                .peek(&Check::new(&recent_client, key(n)))
                .await
                .expect("peek")
                .remaining(),
            Some(10)
        );
    }
    let keys: i64 = redis::cmd("DBSIZE")
        .query_async(&mut admin)
        .await
        .expect("dbsize");
    assert_eq!(keys, 0, "peeks stored nothing");

    // Load every script's library once (the first use of one sends FCALL,
    // is told the function is missing, loads the library and calls again).
    let batch = [Check::new(&client, key(1)), Check::new(&identity, key(1))];
    let receipt = fixed.admit_all(&batch).await.expect("admit").into_parts().1;
    fixed
        .refund(&batch, receipt.expect("allowed"))
        .await
        .expect("refund");
    let receipt = gcra
        .admit(&Check::new(&rate, key(1)))
        .await
        .expect("admit")
        .into_parts()
        .1;
    gcra.refund(&[Check::new(&rate, key(1))], receipt.expect("allowed"))
        .await
        .expect("refund");
    let recent_batch = [
        Check::new(&recent_client, key(1)),
        Check::new(&recent_identity, key(1)),
    ];
    let receipt = sliding
        .admit_all(&recent_batch)
        .await
        .expect("admit")
        .into_parts()
        .1;
    sliding
        .refund(&recent_batch, receipt.expect("allowed"))
        .await
        .expect("refund");
    fixed
        .grant(&Check::new(&client, key(1)), 1)
        .await
        .expect("grant");
    gcra.grant(&Check::new(&rate, key(1)), 1)
        .await
        .expect("grant");
    sliding.grant(&recent_batch[0], 1).await.expect("grant");

    for round in 2..5 {
        let single = Check::new(&client, key(round));
        let batch = [
            Check::new(&client, key(round)),
            Check::new(&identity, key(round)),
        ];
        let one = Check::new(&rate, key(round));
        let one_script = (1, 0);
        assert_eq!(
            sent(&mut admin, async || {
                fixed.check(&single).await.expect("check");
            })
            .await,
            one_script,
            "a check"
        );
        let mut receipt = None;
        assert_eq!(
            sent(&mut admin, async || {
                receipt = fixed.admit_all(&batch).await.expect("admit").into_parts().1;
            })
            .await,
            one_script,
            "a batch"
        );
        let (scripts, _) = sent(&mut admin, async || {
            fixed
                .refund(&batch, receipt.take().expect("allowed"))
                .await
                .expect("refund");
        })
        .await;
        assert_eq!(scripts, 1, "a refund of a batch");
        let mut receipt = None;
        assert_eq!(
            sent(&mut admin, async || {
                receipt = gcra.admit(&one).await.expect("admit").into_parts().1;
            })
            .await,
            one_script,
            "a GCRA check"
        );
        let (scripts, _) = sent(&mut admin, async || {
            gcra.refund(&[one], receipt.take().expect("allowed"))
                .await
                .expect("refund");
        })
        .await;
        assert_eq!(scripts, 1, "a GCRA refund");
        assert_eq!(
            sent(&mut admin, async || {
                gcra.peek(&one).await.expect("peek");
            })
            .await,
            one_script,
            "a peek"
        );
        assert_eq!(
            sent(&mut admin, async || {
                fixed.reset(&client, &key(round)).await.expect("reset");
            })
            .await,
            (0, 1),
            "a reset"
        );
        let recent_batch = [
            Check::new(&recent_client, key(round)),
            Check::new(&recent_identity, key(round)),
        ];
        let mut receipt = None;
        assert_eq!(
            sent(&mut admin, async || {
                receipt = sliding
                    .admit_all(&recent_batch)
                    .await
                    .expect("admit")
                    .into_parts()
                    .1;
            })
            .await,
            one_script,
            "a sliding-window batch"
        );
        let (scripts, _) = sent(&mut admin, async || {
            let refunded = sliding
                .refund(&recent_batch, receipt.take().expect("allowed"))
                .await
                .expect("refund");
            assert_eq!(refunded.credited(), 2, "both checks credited");
        })
        .await;
        assert_eq!(scripts, 1, "a sliding-window refund");
        assert_eq!(
            sent(&mut admin, async || {
                sliding.peek(&recent_batch[0]).await.expect("peek");
            })
            .await,
            one_script,
            "a sliding-window peek"
        );
        assert_eq!(
            sent(&mut admin, async || {
                sliding
                    .reset(&recent_client, &key(round))
                    .await
                    .expect("reset");
            })
            .await,
            (0, 1),
            "a sliding-window reset"
        );
        // Grants and settlements: one script each.
        let (scripts, _) = sent(&mut admin, async || {
            let granted = fixed
                .grant(&Check::new(&client, key(round)), 3)
                .await
                .expect("grant");
            assert!(granted.units() > 0, "granted");
        })
        .await;
        assert_eq!(scripts, 1, "a fixed-window grant");
        let (scripts, _) = sent(&mut admin, async || {
            gcra.grant(&one, 2).await.expect("grant");
        })
        .await;
        assert_eq!(scripts, 1, "a GCRA grant");
        let (scripts, _) = sent(&mut admin, async || {
            sliding.grant(&recent_batch[0], 2).await.expect("grant");
        })
        .await;
        assert_eq!(scripts, 1, "a sliding-window grant");
        let mut granted = fixed
            .grant(&Check::new(&client, key(round.wrapping_add(100))), 2)
            .await
            .expect("grant");
        let receipt = granted.take_receipt().expect("granted");
        let as_admitted =
            Check::weighted(&client, key(round.wrapping_add(100)), granted.units()).expect("valid");
        let (scripts, _) = sent(&mut admin, async || {
            fixed
                .settle(&[as_admitted], receipt, &[1])
                .await
                .expect("settle");
        })
        .await;
        assert_eq!(scripts, 1, "a settlement");
    }
}

/// A check of a subject whose counter already carried is one script, as any
/// check; the first check under a policy continuing from another is one
/// more (it answers that the counter must carry, and the next carries and
/// decides, reading the predecessor's counter itself), and so is the first
/// check of a subject the predecessor never saw. A peek of a counter that
/// may carry is one script; a reset one `DEL`, of the counter and its
/// sources. Counted as the client sends them.
#[tokio::test]
async fn a_carried_subject_costs_one_script_and_its_first_carry_one_more() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let connection = common::Counting::new(common::admin(&url).await);
    for (name, old, new) in [
        (
            "fixed",
            AnyPolicy::from(
                FixedWindowPolicy::new(
                    PolicyId::new("carried").expect("valid"),
                    ScopeId::new("client").expect("valid"),
                    4,
                    Duration::from_secs(60),
                )
                .expect("valid"),
            ),
            AnyPolicy::from(
                FixedWindowPolicy::new(
                    PolicyId::new("carried").expect("valid"),
                    ScopeId::new("client").expect("valid"),
                    6,
                    Duration::from_secs(60),
                )
                .expect("valid"),
            ),
        ),
        (
            "gcra-from-sliding",
            AnyPolicy::from(
                SlidingWindowPolicy::new(
                    PolicyId::new("carried").expect("valid"),
                    ScopeId::new("client").expect("valid"),
                    4,
                    Duration::from_secs(60),
                )
                .expect("valid"),
            ),
            AnyPolicy::from(
                GcraPolicy::new(
                    PolicyId::new("carried").expect("valid"),
                    ScopeId::new("client").expect("valid"),
                    1,
                    Duration::from_secs(60),
                    6,
                )
                .expect("valid"),
            ),
        ),
    ] {
        let new = new.continuing(&old).expect("one id and scope");
        let config = RedisConfig::default()
            .with_prefix(format!("carried:{name}:"))
            .expect("valid");
        let limiter = RedisLimiter::<_, AnyPolicy>::new(connection.clone(), config);
        let check = |n: u8| Check::new(&new, key(n));
        for n in 1..=3 {
            limiter
                .check(&Check::new(&old, key(n)))
                .await
                .expect("check");
        }
        // Load the libraries a first carry and a peek use.
        limiter.check(&check(1)).await.expect("check");
        limiter.peek(&check(9)).await.expect("peek");
        connection.take();

        limiter.check(&check(2)).await.expect("check");
        assert_eq!(
            connection.take(),
            ["FCALL", "FCALL"],
            "{name}: a first carry"
        );
        for _ in 0..3 {
            limiter.check(&check(2)).await.expect("check");
            assert_eq!(connection.take(), ["FCALL"], "{name}: a carried subject");
        }
        limiter.check(&check(8)).await.expect("check");
        assert_eq!(
            connection.take(),
            ["FCALL", "FCALL"],
            "{name}: a new subject"
        );
        limiter.check(&check(8)).await.expect("check");
        assert_eq!(connection.take(), ["FCALL"], "{name}: then one");
        let peeked = limiter.peek(&check(3)).await.expect("peek");
        assert_eq!(connection.take(), ["FCALL"], "{name}: a peek");
        assert_eq!(peeked.remaining(), Some(5), "{name}: the carried state");
        assert!(limiter.reset(&new, &key(2)).await.expect("reset"));
        assert_eq!(connection.take(), ["DEL"], "{name}: a reset");
    }
}
