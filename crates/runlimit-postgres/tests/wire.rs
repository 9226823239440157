//! Every check and batch is one round trip on the wire: the PostgreSQL
//! frontend messages the client sends, read by a proxy between the pool and
//! the server, which also sees what SQLx sends on its own (its pings when a
//! connection is taken from or given back to the pool).

mod common;

use common::{key, policy};

use std::{
    net::SocketAddr,
    str::FromStr,
    sync::{Arc, Mutex},
    time::Duration,
};

use runlimit_core::{
    AnyPolicy, BatchDecision, Check, FixedWindowPolicy, GcraPolicy, Grant, Lifecycle, Limiter,
    PolicyId, ScopeId, Settle, SlidingWindowPolicy,
};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use sqlx::{
    Executor, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions, PgSslMode},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// A TCP proxy in front of PostgreSQL that records the type byte of every
/// frontend message clients send after their startup message.
struct WireProxy {
    address: SocketAddr,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl WireProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&sent);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.expect("upstream");
                tokio::spawn(relay(client, server, Arc::clone(&record)));
            }
        });
        Self { address, sent }
    }

    /// The message types sent since the last call.
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.sent.lock().expect("not poisoned"))
    }
}

async fn relay(client: TcpStream, server: TcpStream, sent: Arc<Mutex<Vec<u8>>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    // The startup message has no type byte: a length (which counts itself)
    // and the parameters. Every later message is a type byte and a length.
    let mut buffered: Vec<u8> = Vec::new();
    let mut started = false;
    let mut chunk = [0u8; 16 * 1024];
    while let Ok(read) = client_read.read(&mut chunk).await {
        if read == 0 || server_write.write_all(&chunk[..read]).await.is_err() {
            return;
        }
        buffered.extend_from_slice(&chunk[..read]);
        loop {
            let header = if started { 5 } else { 4 };
            if buffered.len() < header {
                break;
            }
            let length_at = usize::from(started);
            let length = u32::from_be_bytes(
                buffered[length_at..length_at + 4]
                    .try_into()
                    .expect("four bytes"),
            ) as usize;
            let total = length + length_at;
            if buffered.len() < total {
                break;
            }
            if started {
                sent.lock().expect("not poisoned").push(buffered[0]);
            }
            started = true;
            buffered.drain(..total);
        }
    }
}

fn database_url() -> String {
    std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A one-connection pool built from `options`, reaching the server through
/// `proxy`, using only `schema`.
async fn pool_through(options: PgPoolOptions, proxy: &WireProxy, schema: &str) -> PgPool {
    let connect = PgConnectOptions::from_str(&database_url())
        .expect("url")
        .host(&proxy.address.ip().to_string())
        .port(proxy.address.port())
        .ssl_mode(PgSslMode::Disable);
    let path = schema.to_owned();
    options
        .max_connections(1)
        .after_connect(move |connection, _| {
            let path = path.clone();
            Box::pin(async move {
                connection
                    .execute(format!("SET search_path TO {path}").as_str())
                    .await
                    .map(|_| ())
            })
        })
        .connect_with(connect)
        .await
        .expect("connect through the proxy")
}

fn gcra_policy() -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("gcra").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(1),
        5,
    )
    .expect("valid")
}

/// What one round trip of a prepared statement looks like on the wire: bind,
/// execute, close the portal, and the one `Sync` that asks the server to
/// answer.
const ONE_ROUND_TRIP: &[u8] = b"BECS";

#[tokio::test]
async fn every_check_and_batch_is_one_round_trip_on_the_wire() {
    let Some(schema) = common::schema("wire").await else {
        return;
    };
    drop(schema.migrated_pool(1).await);
    let upstream = {
        let options = PgConnectOptions::from_str(&database_url()).expect("url");
        tokio::net::lookup_host((options.get_host(), options.get_port()))
            .await
            .expect("resolve")
            .next()
            .expect("an address")
    };
    let proxy = WireProxy::start(upstream).await;
    let window = policy("wire", 1_000, Duration::from_secs(60));
    let other = policy("wire.other", 1_000, Duration::from_secs(60));
    let gcra_policy = gcra_policy();
    let sliding_policy = SlidingWindowPolicy::new(
        PolicyId::new("wire.sliding").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1_000,
        Duration::from_secs(60),
    )
    .expect("valid");
    // A limiter with a pool of its own keeps its connections, so neither of
    // SQLx's pings (on taking a connection from the pool, on giving it back)
    // reaches the wire.
    let pool = pool_through(runlimit_postgres::pool_options(), &proxy, &schema.name).await;
    {
        let fixed = PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(
            pool.clone(),
            PostgresConfig::default(),
        );
        let gcra: PostgresLimiter<GcraPolicy> = fixed.for_policy();
        let sliding: PostgresLimiter<SlidingWindowPolicy> = fixed.for_policy();
        let name = "dedicated pool";
        // The first use of each statement on a connection also prepares it.
        fixed
            .check(&Check::new(&window, key(1, 0)))
            .await
            .expect("warm");
        fixed
            .check_all(&[
                Check::new(&window, key(2, 0)),
                Check::new(&other, key(2, 0)),
            ])
            .await
            .expect("warm");
        gcra.check(&Check::new(&gcra_policy, key(1, 0)))
            .await
            .expect("warm");
        // Prepare the lifecycle statements too.
        let warm = [
            Check::new(&window, key(6, 0)),
            Check::new(&other, key(6, 0)),
        ];
        let receipt = fixed.admit_all(&warm).await.expect("warm").into_parts().1;
        fixed
            .refund(&warm, receipt.expect("allowed"))
            .await
            .expect("warm");
        gcra.peek(&Check::new(&gcra_policy, key(1, 0)))
            .await
            .expect("warm");
        gcra.reset(&gcra_policy, &key(1, 0)).await.expect("warm");
        let warm = Check::new(&sliding_policy, key(7, 0));
        let receipt = sliding.admit(&warm).await.expect("warm").into_parts().1;
        sliding
            .refund(&[warm], receipt.expect("allowed"))
            .await
            .expect("warm");
        sliding.peek(&warm).await.expect("warm");
        sliding
            .reset(&sliding_policy, &key(7, 0))
            .await
            .expect("warm");
        for granted in [
            fixed.grant(&Check::new(&window, key(9, 0)), 4).await,
            sliding
                .grant(&Check::new(&sliding_policy, key(9, 0)), 4)
                .await,
        ] {
            assert_eq!(granted.expect("warm").units(), 4);
        }
        gcra.grant(&Check::new(&gcra_policy, key(9, 0)), 2)
            .await
            .expect("warm");
        let four = Check::weighted(&window, key(10, 0), 4).expect("valid");
        let receipt = fixed.admit(&four).await.expect("warm").into_parts().1;
        fixed
            .settle(&[four], receipt.expect("allowed"), &[1])
            .await
            .expect("warm");
        proxy.take();
        // A message sent after an operation returned (such as a ping on
        // release) shows up at the start of the next operation's record, so
        // every operation, the last included, is followed by another.
        for round in 1..=4 {
            fixed
                .check(&Check::new(&window, key(1, round)))
                .await
                .expect("check");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: fixed-window check");
            fixed
                .check_all(&[
                    Check::new(&window, key(2, round)),
                    Check::new(&other, key(2, round)),
                ])
                .await
                .expect("batch");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: fixed-window batch");
            gcra.check(&Check::new(&gcra_policy, key(3, round)))
                .await
                .expect("gcra");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: GCRA check");
            // Refunds, peeks and resets: one round trip each too.
            let batch = [
                Check::new(&window, key(5, round)),
                Check::new(&other, key(5, round)),
            ];
            let receipt = fixed.admit_all(&batch).await.expect("admit").into_parts().1;
            proxy.take();
            fixed
                .refund(&batch, receipt.expect("allowed"))
                .await
                .expect("refund");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: refund");
            gcra.peek(&Check::new(&gcra_policy, key(3, round)))
                .await
                .expect("peek");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: peek");
            gcra.reset(&gcra_policy, &key(3, round))
                .await
                .expect("reset");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: reset");
            // Sliding windows alike.
            let check = Check::new(&sliding_policy, key(8, round));
            let receipt = sliding.admit(&check).await.expect("admit").into_parts().1;
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: sliding check");
            sliding
                .refund(&[check], receipt.expect("allowed"))
                .await
                .expect("refund");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: sliding refund");
            sliding.peek(&check).await.expect("peek");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: sliding peek");
            sliding
                .reset(&sliding_policy, &key(8, round))
                .await
                .expect("reset");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: sliding reset");
            // Grants and settlements: one round trip each.
            fixed
                .grant(&Check::new(&window, key(11, round)), 5)
                .await
                .expect("grant");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: fixed-window grant");
            gcra.grant(&Check::new(&gcra_policy, key(11, round)), 2)
                .await
                .expect("grant");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: GCRA grant");
            sliding
                .grant(&Check::new(&sliding_policy, key(11, round)), 5)
                .await
                .expect("grant");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: sliding grant");
            let four = Check::weighted(&window, key(12, round), 4).expect("valid");
            let receipt = fixed.admit(&four).await.expect("admit").into_parts().1;
            proxy.take();
            fixed
                .settle(&[four], receipt.expect("allowed"), &[1])
                .await
                .expect("settle");
            assert_eq!(proxy.take(), ONE_ROUND_TRIP, "{name}: settle");
        }
    }

    // On a pool shared with the application, with SQLx's default options,
    // SQLx pings the connection when the limiter takes it and again when the
    // limiter gives it back: the count above would have seen both.
    let shared = pool_through(PgPoolOptions::new(), &proxy, &schema.name).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(shared, PostgresConfig::default());
    limiter
        .check(&Check::new(&window, key(4, 0)))
        .await
        .expect("warm");
    limiter
        .check(&Check::new(&window, key(4, 1)))
        .await
        .expect("check");
    limiter
        .check(&Check::new(&window, key(4, 2)))
        .await
        .expect("check");
    let sent = proxy.take();
    let syncs = sent.iter().filter(|&&kind| kind == b'S').count();
    assert!(syncs > 3, "three checks on a shared pool sent {sent:?}");
}

#[tokio::test]
async fn a_carrying_check_is_one_round_trip_when_it_carries_and_after() {
    let Some(schema) = common::schema("wire_carry").await else {
        return;
    };
    drop(schema.migrated_pool(1).await);
    let upstream = {
        let options = PgConnectOptions::from_str(&database_url()).expect("url");
        tokio::net::lookup_host((options.get_host(), options.get_port()))
            .await
            .expect("resolve")
            .next()
            .expect("an address")
    };
    let proxy = WireProxy::start(upstream).await;
    let pool = pool_through(runlimit_postgres::pool_options(), &proxy, &schema.name).await;
    let fixed =
        PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool, PostgresConfig::default());
    let gcra: PostgresLimiter<GcraPolicy> = fixed.for_policy();
    let sliding: PostgresLimiter<SlidingWindowPolicy> = fixed.for_policy();
    let any: PostgresLimiter<AnyPolicy> = fixed.for_policy();
    // Each new policy continues from an old one with a lower limit.
    let old_windows =
        [0, 1].map(|n| policy(&format!("wire.carry{n}"), 1_000, Duration::from_secs(60)));
    let windows = old_windows.each_ref().map(|old| {
        policy(old.id().as_str(), 1_001, Duration::from_secs(60))
            .continuing(old)
            .expect("lineage")
    });
    let old_gcra = gcra_policy();
    let rates = [1, 2].map(|quota| {
        GcraPolicy::new(
            PolicyId::new("gcra").expect("valid"),
            ScopeId::new("client").expect("valid"),
            quota,
            Duration::from_secs(quota),
            6,
        )
        .expect("valid")
        .continuing(&old_gcra)
        .expect("lineage")
    });
    let old_sliding = sliding_window("wire.carry.sliding", 1_000);
    let sliding_policy = sliding_window("wire.carry.sliding", 1_001)
        .continuing(&old_sliding)
        .expect("lineage");
    let mixed: [AnyPolicy; 2] = [windows[0].clone().into(), rates[0].clone().into()];
    // Each round: a subject's first check under the new policy, which
    // carries the unit its old counter spent, and its next check are one
    // round trip each. Round 0 prepares the statements.
    for round in 0..=3 {
        let expect_sent = |name: &str, expected: &[u8]| {
            let sent = proxy.take();
            if round > 0 {
                assert_eq!(sent, expected, "{name}, round {round}");
            }
        };
        for (n, old) in (1..).zip(&old_windows) {
            fixed
                .check(&Check::new(old, key(n, round)))
                .await
                .expect("spend");
        }
        gcra.check(&Check::new(&old_gcra, key(3, round)))
            .await
            .expect("spend");
        gcra.check(&Check::new(&old_gcra, key(5, round)))
            .await
            .expect("spend");
        sliding
            .check(&Check::new(&old_sliding, key(4, round)))
            .await
            .expect("spend");
        fixed
            .check(&Check::new(&old_windows[0], key(6, round)))
            .await
            .expect("spend");
        proxy.take();

        let check = Check::new(&windows[0], key(1, round));
        let carried = fixed.check(&check).await.expect("check");
        expect_sent("first fixed-window check", ONE_ROUND_TRIP);
        assert_eq!(carried.remaining(), Some(999), "one unit carried");
        fixed.check(&check).await.expect("check");
        expect_sent("next fixed-window check", ONE_ROUND_TRIP);
        let batch = [
            Check::new(&windows[0], key(2, round)),
            Check::new(&windows[1], key(2, round)),
        ];
        fixed.check_all(&batch).await.expect("batch");
        expect_sent("first fixed-window batch", ONE_ROUND_TRIP);
        let batch = [
            Check::new(&windows[1], key(2, round)),
            Check::new(&windows[0], key(1, round)),
        ];
        match fixed.check_all(&batch).await.expect("batch") {
            BatchDecision::Allowed(decisions) => {
                let remaining: Vec<_> = decisions.iter().map(|d| d.remaining()).collect();
                assert_eq!(remaining, [Some(998), Some(997)], "carried and counted");
            }
            denied => panic!("expected the batch allowed, got {denied:?}"),
        }
        expect_sent("next fixed-window batch", ONE_ROUND_TRIP);
        let check = Check::new(&rates[0], key(3, round));
        let carried = gcra.check(&check).await.expect("check");
        expect_sent("first GCRA check", ONE_ROUND_TRIP);
        assert_eq!(carried.remaining(), Some(4), "one unit carried");
        gcra.check(&check).await.expect("check");
        expect_sent("next GCRA check", ONE_ROUND_TRIP);
        let check = Check::new(&sliding_policy, key(4, round));
        let carried = sliding.check(&check).await.expect("check");
        expect_sent("first sliding-window check", ONE_ROUND_TRIP);
        assert_eq!(carried.remaining(), Some(999), "one unit carried");
        sliding.check(&check).await.expect("check");
        expect_sent("next sliding-window check", ONE_ROUND_TRIP);
        // Batches of the general functions, and mixed batches.
        let batch = rates
            .each_ref()
            .map(|policy| Check::new(policy, key(5, round)));
        gcra.check_all(&batch).await.expect("batch");
        expect_sent("first GCRA batch", ONE_ROUND_TRIP);
        let batch = mixed
            .each_ref()
            .map(|policy| Check::new(policy, key(6, round)));
        any.check_all(&batch).await.expect("batch");
        expect_sent("first mixed batch", ONE_ROUND_TRIP);
    }
}

fn sliding_window(name: &str, limit: u64) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new(name).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}
