//! Throughput and latency of PostgresLimiter against two floors on the same
//! pool: `SELECT 1` and a single-statement upsert.
//!
//! Run with `cargo bench -p runlimit-postgres --bench postgres` (reads
//! `RUNLIMIT_POSTGRES_TEST_DATABASE_URL`, default the local test database; set
//! `BENCH_SECONDS` to change the 3-second measurement per cell). Results are
//! recorded in BENCHMARKS.md. `-- sliding` instead alternates fixed-window and
//! sliding-window checks at 32 tasks over rounds and reports the median ratio;
//! `-- topology` runs the credential-stuffing burst with and without the
//! denial cache, and the tiered admission against the shared check alone;
//! `-- fast-path` compares single checks through the limiter (one `UPDATE`)
//! with the functions single checks were sent as before; `-- batch` compares
//! batches of two through the limiter (one `UPDATE`) with the general
//! function batches were sent as before; `-- carry` alternates single checks
//! and batches of two of subjects whose counters carried their predecessor's
//! state with the same of a policy without a predecessor, over rounds, and
//! reports the median ratios, also from runs interleaving the two
//! (`BENCH_ROUNDS` sets how many rounds). With `BENCH_CPU=1`
//! (Linux, the database on this machine) every cell also prints the CPU
//! time per operation of the PostgreSQL processes and of this process. It
//! repeats better than throughput on a shared VM, but counts PostgreSQL's
//! background work (WAL writer, autovacuum) in whichever cell it runs, so
//! compare cells whose order rotates, as `-- fast-path`'s do.
#![allow(missing_docs, clippy::cast_precision_loss)]

#[path = "../../runlimit-memory/benches/shared/topology.rs"]
mod topology;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use runlimit_core::{
    Check, FixedWindowPolicy, Lifecycle, Limiter, MAX_LIMIT, MAX_WINDOW, PolicyId, ScopeId,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use sqlx::{Executor, PgPool, postgres::PgPoolOptions};

const KEYS: u64 = 10_000;

#[derive(Clone, Copy, Debug)]
enum Workload {
    SelectOne,
    Upsert,
    Check,
    /// A single check sent as the general (batch) function of one element,
    /// as single checks were once sent: a baseline of
    /// `-- fast-path`.
    GeneralCheck,
    /// A single check sent as the row-lock function `runlimit_check_fixed_window`, as
    /// single checks were before they were admitted by one `UPDATE`: the
    /// other baseline of `-- fast-path`.
    RowLockCheck,
    BatchOfTwo,
    /// A batch of two sent as the general function, as every batch was
    /// before small batches were admitted by one `UPDATE`: the baseline of
    /// `-- batch`.
    GeneralBatch,
    /// A batch of two whose second window is full: a denial.
    DeniedBatch,
    /// The same denial sent as the general function, as before.
    GeneralDeniedBatch,
    /// The two counter rows a batch of two writes, updated by one bare
    /// statement (`used = used + 1`, no decision, guard or clock): not a
    /// Runlimit operation, but the write a batch cannot do without, for the
    /// table's reference.
    TwoRowUpdate,
    /// A single check of a window already full: a denial.
    DeniedCheck,
    /// The counter row a single check writes, updated by one bare statement
    /// (`used = used + 1`): the write a check cannot do without, for
    /// `-- fast-path`'s reference.
    RowUpdate,
    /// An admission with a receipt, then its refund: what a request that does
    /// not count costs (counting only failed logins, say).
    CheckAndRefund,
    /// A sliding-window check of the same limit and window.
    SlidingCheck,
    /// A check of a policy continuing from the first policy, whose counter
    /// carried the subject's state: what a carried subject's check costs.
    CarriedCheck,
    /// A batch of two such checks.
    CarriedBatchOfTwo,
    /// A check of a policy without a predecessor whose rows were stored
    /// beside the carried ones (so both lie in the table alike): the
    /// baseline of `-- carry`.
    UnlinkedCheck,
    /// A batch of two such checks.
    UnlinkedBatchOfTwo,
}

/// The limiters and policies the workloads run.
struct Subjects {
    fixed: PostgresLimiter<FixedWindowPolicy>,
    sliding: PostgresLimiter<SlidingWindowPolicy>,
    policies: [FixedWindowPolicy; 2],
    /// A policy of one unit a day, spent on every key before measuring.
    exhausted: FixedWindowPolicy,
    sliding_policy: SlidingWindowPolicy,
    /// Policies continuing from `policies`, each a unit short of them.
    carried: [FixedWindowPolicy; 2],
    /// Policies of `policies`' scopes two units short of them, without a
    /// predecessor.
    unlinked: [FixedWindowPolicy; 2],
}

fn subject(n: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 31;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// The limiter's advisory-lock id for a check's counter key.
fn lock_id(check: &Check<'_, FixedWindowPolicy>) -> i64 {
    let counter = check.counter_key().to_bytes();
    let mut word = [0u8; 8];
    for (index, byte) in word.iter_mut().enumerate() {
        *byte = counter[index] ^ counter[32 + index];
    }
    i64::from_be_bytes(word)
}

async fn run(
    workload: Workload,
    tasks: usize,
    seconds: f64,
    pool: &PgPool,
    subjects: &Arc<Subjects>,
) -> (f64, Duration, Duration) {
    let cpu = CpuTime::read();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (pool, subjects) = (pool.clone(), Arc::clone(subjects));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (task as u64 + 1);
                while Instant::now() < deadline {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = state % KEYS;
                    let started = Instant::now();
                    operate(workload, key, &pool, &subjects).await;
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.await.expect("task"));
    }
    if let Some(cpu) = cpu {
        cpu.report(workload, tasks, latencies.len());
    }
    latencies.sort_unstable();
    let percentile = |per_mille: usize| latencies[(latencies.len() - 1) * per_mille / 1_000];
    (
        latencies.len() as f64 / seconds,
        percentile(500),
        percentile(990),
    )
}

/// One operation of `workload` on the counters of key number `key`.
async fn operate(workload: Workload, key: u64, pool: &PgPool, subjects: &Subjects) {
    let (limiter, policies) = (&subjects.fixed, &subjects.policies);
    match workload {
        Workload::SelectOne => {
            sqlx::query("SELECT 1").execute(pool).await.expect("select");
        }
        Workload::Upsert => {
            sqlx::query(
                "INSERT INTO bench_upsert (k, n) VALUES ($1, 1) \
                 ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1 RETURNING n",
            )
            .bind(i64::try_from(key).expect("small"))
            .fetch_one(pool)
            .await
            .expect("upsert");
        }
        Workload::Check => {
            let decision = limiter
                .check(&Check::new(&policies[0], subject(key)))
                .await
                .expect("check");
            assert!(decision.is_allowed());
        }
        Workload::GeneralCheck => {
            let check = Check::new(&policies[0], subject(key));
            assert_eq!(general_batch(pool, &[check]).await, [0], "allowed");
        }
        Workload::RowLockCheck => {
            let check = Check::new(&policies[0], subject(key));
            let policy = check.policy();
            let row: (i16,) = sqlx::query_as(
                "SELECT r_outcome FROM runlimit_check_fixed_window(\
                 $1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(&check))
            .bind(i64::try_from(policy.limit()).expect("bounded"))
            .bind(i64::try_from(policy.window_millis() * 1_000).expect("bounded"))
            .bind(1i64)
            .bind(65_536i32)
            .bind(9_750i32)
            .bind(false)
            .fetch_one(pool)
            .await
            .expect("row-lock check");
            assert_eq!(row.0, 0, "allowed");
        }
        Workload::CheckAndRefund => {
            let check = Check::new(&policies[0], subject(key));
            let (decision, receipt) = limiter.admit(&check).await.expect("admit").into_parts();
            assert!(decision.is_allowed());
            let refunded = limiter
                .refund(&[check], receipt.expect("allowed"))
                .await
                .expect("refund");
            assert_eq!(refunded.credited(), 1);
        }
        Workload::SlidingCheck => {
            let decision = subjects
                .sliding
                .check(&Check::new(&subjects.sliding_policy, subject(key)))
                .await
                .expect("check");
            assert!(decision.is_allowed());
        }
        Workload::DeniedCheck => {
            let decision = limiter
                .check(&Check::new(&subjects.exhausted, subject(key)))
                .await
                .expect("check");
            assert!(decision.is_denied());
        }
        Workload::RowUpdate => {
            let updated: i64 = sqlx::query_scalar(
                "UPDATE runlimit_fixed_windows SET used = used + 1 \
                 WHERE counter_key = $1 RETURNING used",
            )
            .bind(
                Check::new(&policies[0], subject(key))
                    .counter_key()
                    .to_bytes()
                    .to_vec(),
            )
            .fetch_one(pool)
            .await
            .expect("row update");
            assert!(updated > 0);
        }
        Workload::TwoRowUpdate => {
            let keys: Vec<Vec<u8>> = policies
                .iter()
                .map(|policy| {
                    Check::new(policy, subject(key))
                        .counter_key()
                        .to_bytes()
                        .to_vec()
                })
                .collect();
            let updated = sqlx::query(
                "UPDATE runlimit_fixed_windows SET used = used + 1 \
                 WHERE counter_key IN ($1, $2) RETURNING used",
            )
            .bind(&keys[0])
            .bind(&keys[1])
            .fetch_all(pool)
            .await
            .expect("two-row update");
            assert_eq!(updated.len(), 2);
        }
        Workload::GeneralBatch => {
            let checks = [
                Check::new(&policies[0], subject(key)),
                Check::new(&policies[1], subject(key)),
            ];
            let outcomes = general_batch(pool, &checks).await;
            assert_eq!(outcomes, [0, 0], "allowed");
        }
        Workload::GeneralDeniedBatch => {
            let checks = [
                Check::new(&policies[0], subject(key)),
                Check::new(&subjects.exhausted, subject(key)),
            ];
            let outcomes = general_batch(pool, &checks).await;
            assert_eq!(outcomes, [0, 1], "denied");
        }
        Workload::DeniedBatch => {
            let checks = [
                Check::new(&policies[0], subject(key)),
                Check::new(&subjects.exhausted, subject(key)),
            ];
            let batch = limiter.check_all(&checks).await.expect("batch");
            assert!(!batch.permits_request());
        }
        Workload::BatchOfTwo => {
            let checks = [
                Check::new(&policies[0], subject(key)),
                Check::new(&policies[1], subject(key)),
            ];
            let batch = limiter.check_all(&checks).await.expect("batch");
            assert!(batch.is_allowed());
        }
        Workload::CarriedCheck | Workload::UnlinkedCheck => {
            let policy = if matches!(workload, Workload::CarriedCheck) {
                &subjects.carried[0]
            } else {
                &subjects.unlinked[0]
            };
            let decision = limiter
                .check(&Check::new(policy, subject(key)))
                .await
                .expect("check");
            assert!(decision.is_allowed());
        }
        Workload::CarriedBatchOfTwo | Workload::UnlinkedBatchOfTwo => {
            let policies = if matches!(workload, Workload::CarriedBatchOfTwo) {
                &subjects.carried
            } else {
                &subjects.unlinked
            };
            let checks = policies
                .each_ref()
                .map(|policy| Check::new(policy, subject(key)));
            let batch = limiter.check_all(&checks).await.expect("batch");
            assert!(batch.is_allowed());
        }
    }
}

/// `workloads` at `tasks` tasks, each task alternating between them: the
/// mean latency of each, measured under the same load.
async fn run_interleaved(
    workloads: [Workload; 2],
    tasks: usize,
    seconds: f64,
    pool: &PgPool,
    subjects: &Arc<Subjects>,
) -> [Duration; 2] {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (pool, subjects) = (pool.clone(), Arc::clone(subjects));
            tokio::spawn(async move {
                let mut spent = [(Duration::ZERO, 0u32); 2];
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (task as u64 + 1);
                let mut turn = task % 2;
                while Instant::now() < deadline {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let started = Instant::now();
                    operate(workloads[turn], state % KEYS, &pool, &subjects).await;
                    spent[turn].0 += started.elapsed();
                    spent[turn].1 += 1;
                    turn = 1 - turn;
                }
                spent
            })
        })
        .collect();
    let mut spent = [(Duration::ZERO, 0u32); 2];
    for handle in handles {
        for (total, task) in spent.iter_mut().zip(handle.await.expect("task")) {
            total.0 += task.0;
            total.1 += task.1;
        }
    }
    spent.map(|(time, operations)| time / operations.max(1))
}

#[tokio::main]
async fn main() {
    let url = std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let schema = format!("rl_bench_{}", std::process::id());
    let admin = PgPool::connect(&url).await.expect("connect");
    admin
        .execute(format!("CREATE SCHEMA {schema}").as_str())
        .await
        .expect("schema");
    let path = schema.clone();
    let pool = PgPoolOptions::new()
        .max_connections(32)
        .after_connect(move |connection, _| {
            let path = path.clone();
            Box::pin(async move {
                connection
                    .execute(format!("SET search_path TO {path}").as_str())
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .expect("pool");
    pool.execute("CREATE TABLE bench_upsert (k bigint PRIMARY KEY, n bigint NOT NULL) WITH (fillfactor = 80)")
        .await
        .expect("floor table");
    let config = PostgresConfig::default()
        .with_max_rows_per_shard(65_536)
        .and_then(|c| c.with_operation_timeout(Duration::from_secs(10)))
        .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
        .expect("valid");
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), config);
    limiter.migrate().await.expect("migrate");
    let policy = |scope: &str, limit: u64| {
        FixedWindowPolicy::new(
            PolicyId::new("bench").expect("valid"),
            ScopeId::new(scope).expect("valid"),
            limit,
            MAX_WINDOW,
        )
        .expect("valid")
    };
    let carried = |scope: &str| {
        policy(scope, MAX_LIMIT - 1)
            .continuing(&policy(scope, MAX_LIMIT))
            .expect("a lineage")
    };
    let subjects = Arc::new(Subjects {
        sliding: limiter.for_policy(),
        fixed: limiter,
        policies: [policy("client", MAX_LIMIT), policy("identity", MAX_LIMIT)],
        carried: [carried("client"), carried("identity")],
        unlinked: [
            policy("client", MAX_LIMIT - 2),
            policy("identity", MAX_LIMIT - 2),
        ],
        exhausted: FixedWindowPolicy::new(
            PolicyId::new("bench").expect("valid"),
            ScopeId::new("exhausted").expect("valid"),
            1,
            Duration::from_secs(86_400),
        )
        .expect("valid"),
        sliding_policy: SlidingWindowPolicy::new(
            PolicyId::new("bench").expect("valid"),
            ScopeId::new("client").expect("valid"),
            MAX_LIMIT,
            MAX_WINDOW,
        )
        .expect("valid"),
    });
    // Store both counters of every key, so every workload updates rows that
    // exist, then warm every statement so the measurement sees steady-state
    // updates.
    let stored: Vec<_> = (0..32u64)
        .map(|task| {
            let subjects = Arc::clone(&subjects);
            tokio::spawn(async move {
                for key in (task..KEYS).step_by(32) {
                    let checks = subjects
                        .policies
                        .iter()
                        .map(|policy| Check::new(policy, subject(key)))
                        .collect::<Vec<_>>();
                    subjects.fixed.check_all(&checks).await.expect("store");
                    subjects
                        .fixed
                        .check(&Check::new(&subjects.exhausted, subject(key)))
                        .await
                        .expect("spend");
                }
            })
        })
        .collect();
    for task in stored {
        task.await.expect("task");
    }
    for workload in [
        Workload::Upsert,
        Workload::BatchOfTwo,
        Workload::GeneralBatch,
        Workload::DeniedBatch,
        Workload::GeneralDeniedBatch,
        Workload::SlidingCheck,
    ] {
        run(workload, 32, seconds, &pool, &subjects).await;
    }
    let carry = std::env::args().any(|arg| arg == "carry");
    if carry {
        // Carry every subject's counters before measuring, so every carried
        // check is of a subject carried already, storing the baseline's
        // counters beside them.
        let carried: Vec<_> = (0..32u64)
            .map(|task| {
                let subjects = Arc::clone(&subjects);
                tokio::spawn(async move {
                    for key in (task..KEYS).step_by(32) {
                        for policies in [&subjects.unlinked, &subjects.carried] {
                            let checks = policies
                                .each_ref()
                                .map(|policy| Check::new(policy, subject(key)));
                            subjects.fixed.check_all(&checks).await.expect("store");
                        }
                    }
                })
            })
            .collect();
        for task in carried {
            task.await.expect("task");
        }
        for workload in [
            Workload::UnlinkedCheck,
            Workload::CarriedCheck,
            Workload::UnlinkedBatchOfTwo,
            Workload::CarriedBatchOfTwo,
        ] {
            run(workload, 32, seconds, &pool, &subjects).await;
        }
    }
    if carry {
        carried_against_plain(seconds, &pool, &subjects).await;
    } else if std::env::args().any(|arg| arg == "sliding") {
        sliding_against_fixed(seconds, &pool, &subjects).await;
    } else if std::env::args().any(|arg| arg == "batch") {
        rotate_against_floor(
            seconds,
            &pool,
            &subjects,
            &[
                ("general function", Workload::GeneralBatch),
                ("limiter (one UPDATE)", Workload::BatchOfTwo),
                ("bare two-row UPDATE", Workload::TwoRowUpdate),
                ("denial, general function", Workload::GeneralDeniedBatch),
                ("denial, limiter", Workload::DeniedBatch),
            ],
        )
        .await;
    } else if std::env::args().any(|arg| arg == "fast-path") {
        fast_path_against_general(seconds, &pool, &subjects).await;
    } else if std::env::args().any(|arg| arg == "topology") {
        let trips = topology::RoundTrips::default();
        let observed = subjects.fixed.clone().with_observer(trips.clone());
        topology::burst("PostgreSQL", observed, trips, seconds).await;
        topology::tiered_overhead("PostgreSQL", subjects.fixed.clone(), seconds).await;
    } else {
        table(seconds, &pool, &subjects).await;
    }
    pool.close().await;
    admin
        .execute(format!("DROP SCHEMA {schema} CASCADE").as_str())
        .await
        .expect("drop");
}

/// The outcomes of `checks` sent as the general function, with the
/// limiter's arguments (sorted advisory-lock ids, the lock timeout of its
/// 10 s operation timeout).
async fn general_batch(pool: &PgPool, checks: &[Check<'_, FixedWindowPolicy>]) -> Vec<i16> {
    let mut locks: Vec<i64> = checks.iter().map(lock_id).collect();
    locks.sort_unstable();
    let each = |value: &dyn Fn(&Check<'_, FixedWindowPolicy>) -> u64| -> Vec<i64> {
        checks
            .iter()
            .map(|check| i64::try_from(value(check)).expect("bounded"))
            .collect()
    };
    let rows: Vec<(i16,)> = sqlx::query_as(
        "SELECT r_outcome FROM runlimit_check_fixed_windows(\
         $1, $2, $3, $4, $5, $6, $7, $8) ORDER BY r_index",
    )
    .bind(
        checks
            .iter()
            .map(|check| check.counter_key().to_bytes().to_vec())
            .collect::<Vec<_>>(),
    )
    .bind(locks)
    .bind(each(&|check| check.policy().limit()))
    .bind(each(&|check| check.policy().window_millis() * 1_000))
    .bind(each(&|check| check.cost()))
    .bind(65_536i32)
    // The lock timeout the limiter derives from its 10 s operation timeout.
    .bind(9_750i32)
    .bind(false)
    .fetch_all(pool)
    .await
    .expect("general batch");
    rows.into_iter().map(|row| row.0).collect()
}

/// Fixed-window and sliding-window checks at 32 tasks, alternating, with
/// the median ratio over the rounds.
async fn sliding_against_fixed(seconds: f64, pool: &PgPool, subjects: &Arc<Subjects>) {
    let mut ratios = Vec::new();
    for round in 1..=5 {
        let (fixed, ..) = run(Workload::Check, 32, seconds, pool, subjects).await;
        let (sliding, ..) = run(Workload::SlidingCheck, 32, seconds, pool, subjects).await;
        ratios.push(sliding / fixed);
        println!(
            "round {round}: fixed window {fixed:.0} checks/s, sliding window {sliding:.0} checks/s, \
             {:.0}%",
            100.0 * sliding / fixed
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median over 5 rounds at 32 tasks: sliding / fixed window {:.0}%",
        100.0 * ratios[2]
    );
}

/// Checks and batches of two of carried subjects at 32 tasks against the
/// same of policies without a predecessor whose rows were stored beside
/// them, over rounds (`BENCH_ROUNDS`, 6 unless set; on a busy machine, more
/// and shorter ones), each measured twice: as runs alternating which goes
/// first (the ratio of their rates), and interleaved, every task
/// alternating between the two (the ratio of their mean latencies, under the
/// same load). Medians of both ratios over the rounds.
async fn carried_against_plain(seconds: f64, pool: &PgPool, subjects: &Arc<Subjects>) {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .filter(|&rounds| rounds >= 2)
        .unwrap_or(6);
    let pairs = [
        ("check", Workload::UnlinkedCheck, Workload::CarriedCheck),
        (
            "batch of two",
            Workload::UnlinkedBatchOfTwo,
            Workload::CarriedBatchOfTwo,
        ),
    ];
    let mut ratios = vec![(Vec::new(), Vec::new()); pairs.len()];
    for round in 1..=rounds {
        for ((name, plain, carried), ratios) in pairs.iter().zip(&mut ratios) {
            let (plain_rate, carried_rate) = if round % 2 == 0 {
                let (carried, ..) = run(*carried, 32, seconds, pool, subjects).await;
                (run(*plain, 32, seconds, pool, subjects).await.0, carried)
            } else {
                let (plain, ..) = run(*plain, 32, seconds, pool, subjects).await;
                (plain, run(*carried, 32, seconds, pool, subjects).await.0)
            };
            let [plain_latency, carried_latency] =
                run_interleaved([*plain, *carried], 32, seconds, pool, subjects).await;
            let interleaved = plain_latency.as_secs_f64() / carried_latency.as_secs_f64();
            ratios.0.push(carried_rate / plain_rate);
            ratios.1.push(interleaved);
            println!(
                "round {round}: {name}: no lineage {plain_rate:.0}/s, carried {carried_rate:.0}/s, \
                 {:.1}%; interleaved mean latency {:.0} us against {:.0} us, {:.1}%",
                100.0 * carried_rate / plain_rate,
                carried_latency.as_secs_f64() * 1e6,
                plain_latency.as_secs_f64() * 1e6,
                100.0 * interleaved,
            );
        }
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        (values[(rounds - 1) / 2] + values[rounds / 2]) / 2.0
    };
    for ((name, ..), (alternating, interleaved)) in pairs.iter().zip(&mut ratios) {
        println!(
            "median over {rounds} rounds at 32 tasks, {name}: carried / no lineage {:.1}% \
             (alternating runs), {:.1}% (interleaved)",
            100.0 * median(alternating),
            100.0 * median(interleaved),
        );
    }
}

/// Single checks of existing rows at 32 tasks: through the limiter (one
/// `UPDATE` admitting in place), sent as the row-lock function
/// `runlimit_check_fixed_window` and as the general batch function of one
/// element (the two ways the limiter once sent them), with a bare `UPDATE` of the
/// same row for reference.
async fn fast_path_against_general(seconds: f64, pool: &PgPool, subjects: &Arc<Subjects>) {
    rotate_against_floor(
        seconds,
        pool,
        subjects,
        &[
            ("general path", Workload::GeneralCheck),
            ("row-lock function", Workload::RowLockCheck),
            ("limiter (one UPDATE)", Workload::Check),
            ("bare UPDATE of the row", Workload::RowUpdate),
        ],
    )
    .await;
}

/// `workloads` at 32 tasks, in an order that rotates each round, against
/// the upsert floor of the same round, with each one's median share of the
/// floor over the rounds.
async fn rotate_against_floor(
    seconds: f64,
    pool: &PgPool,
    subjects: &Arc<Subjects>,
    workloads: &[(&str, Workload)],
) {
    const ROUNDS: usize = 6;
    let mut ratios = vec![Vec::new(); workloads.len()];
    for round in 0..ROUNDS {
        let (floor, ..) = run(Workload::Upsert, 32, seconds, pool, subjects).await;
        let mut rates = vec![0.0; workloads.len()];
        for step in 0..workloads.len() {
            let which = (round + step) % workloads.len();
            rates[which] = run(workloads[which].1, 32, seconds, pool, subjects).await.0;
        }
        let shares: Vec<String> = workloads
            .iter()
            .zip(rates)
            .zip(&mut ratios)
            .map(|(((name, _), rate), ratios)| {
                ratios.push(rate / floor);
                format!("{name} {rate:.0}/s ({:.0}%)", 100.0 * rate / floor)
            })
            .collect();
        println!(
            "round {}: upsert floor {floor:.0}/s; {}",
            round + 1,
            shares.join(", ")
        );
    }
    let medians: Vec<String> = workloads
        .iter()
        .zip(&mut ratios)
        .map(|((name, _), values)| {
            values.sort_by(f64::total_cmp);
            let median = (values[ROUNDS / 2 - 1] + values[ROUNDS / 2]) / 2.0;
            format!("{name} {:.0}%", 100.0 * median)
        })
        .collect();
    println!(
        "median over {ROUNDS} rounds at 32 tasks, share of the upsert floor: {}",
        medians.join(", ")
    );
}

async fn table(seconds: f64, pool: &PgPool, subjects: &Arc<Subjects>) {
    println!("| tasks | workload | checks/s | p50 | p99 | vs upsert floor |");
    println!("|---|---|---|---|---|---|");
    for tasks in [1usize, 8, 32] {
        let mut upsert_rate = 0.0;
        for workload in [
            Workload::SelectOne,
            Workload::Upsert,
            Workload::Check,
            Workload::DeniedCheck,
            Workload::CheckAndRefund,
            Workload::BatchOfTwo,
            Workload::DeniedBatch,
            Workload::TwoRowUpdate,
            Workload::SlidingCheck,
        ] {
            let (rate, p50, p99) = run(workload, tasks, seconds, pool, subjects).await;
            if matches!(workload, Workload::Upsert) {
                upsert_rate = rate;
            }
            let relative = if matches!(
                workload,
                Workload::Check
                    | Workload::DeniedCheck
                    | Workload::BatchOfTwo
                    | Workload::DeniedBatch
                    | Workload::TwoRowUpdate
                    | Workload::CheckAndRefund
                    | Workload::SlidingCheck
            ) {
                format!("{:.0}%", 100.0 * rate / upsert_rate)
            } else {
                String::new()
            };
            println!(
                "| {tasks} | {workload:?} | {rate:.0} | {:.2} ms | {:.2} ms | {relative} |",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
    }
}

/// CPU time used so far by the PostgreSQL server's processes and by this
/// process, in clock ticks, when `BENCH_CPU` is set.
struct CpuTime {
    server: u64,
    client: u64,
}

impl CpuTime {
    fn read() -> Option<Self> {
        std::env::var_os("BENCH_CPU")?;
        let mut server = 0;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
                && stat.contains("(postgres)")
            {
                server += Self::ticks(&stat);
            }
        }
        let client = Self::ticks(&std::fs::read_to_string("/proc/self/stat").ok()?);
        Some(Self { server, client })
    }

    /// User and system time from a `/proc/<pid>/stat` line (fields 14 and
    /// 15, counted after the parenthesised command name).
    fn ticks(stat: &str) -> u64 {
        let after_name = stat.rsplit(')').next().unwrap_or_default();
        after_name
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|field| field.parse::<u64>().ok())
            .sum()
    }

    /// Prints the CPU time per operation since `self` was read.
    fn report(self, workload: Workload, tasks: usize, operations: usize) {
        let Some(now) = Self::read() else { return };
        // Linux reports these times in ticks of 10 ms (USER_HZ = 100).
        let per_op = |ticks: u64| ticks as f64 * 10_000.0 / operations.max(1) as f64;
        eprintln!(
            "cpu {workload:?} at {tasks} tasks: server {:.0} us/op, client {:.0} us/op",
            per_op(now.server - self.server),
            per_op(now.client - self.client),
        );
    }
}
