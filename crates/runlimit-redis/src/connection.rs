//! A connection to one Redis server, reconnecting the way admission needs.
//!
//! redis-rs's `ConnectionManager` makes every command wait while it
//! reconnects, and its default backoff grows long: after a short outage the
//! limiter kept failing closed for minutes after the server was back, and a
//! check that had waited out its timeout for a connection was reported as
//! possibly consumed though it was never sent. [`RedisConnection`] instead
//! fails a command at once while it has no connection (nothing sent, so the
//! limiter reports "definitely not consumed") and reconnects in the
//! background with a delay that starts small and stays bounded.

use std::{
    fmt,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use redis::{
    AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisFuture, Value,
    aio::{ConnectionLike, MultiplexedConnection},
};

/// The first delay between reconnection attempts; it doubles up to the
/// configured maximum.
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(25);

/// Why [`RedisConnection::connect`] (and
/// [`RedisLimiter::connect`](crate::RedisLimiter::connect)) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL could not be parsed.
    #[error("invalid Redis URL")]
    InvalidUrl(#[source] RedisError),
    /// The first connection could not be established within the connect
    /// timeout.
    #[error("could not connect to Redis")]
    Unreachable(#[source] RedisError),
}

/// A multiplexed connection to one Redis server that reconnects in the
/// background.
///
/// * While connected, commands are pipelined on one TCP connection, exactly
///   as redis-rs's `MultiplexedConnection` does.
/// * When a command fails in a way that means the connection is gone (an I/O
///   error, a reset, a closed socket), the connection is dropped and a
///   background task reconnects: at once, then after 25 ms, doubling up to
///   the maximum delay, each attempt bounded by the connect timeout.
/// * While there is no connection, commands fail immediately with a
///   connection-refused I/O error, without being sent; the limiter reports
///   them as [`CheckError::Unreachable`](crate::CheckError::Unreachable),
///   definitely not consumed.
///
/// Clones share the connection. Build it with
/// [`RedisLimiter::connect`](crate::RedisLimiter::connect), which takes the
/// timeouts from [`RedisConfig`](crate::RedisConfig).
#[derive(Clone)]
pub struct RedisConnection {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    settings: AsyncConnectionConfig,
    connect_timeout: Duration,
    max_reconnect_delay: Duration,
    db: i64,
    state: Mutex<State>,
}

enum State {
    /// Connected; `generation` tells a failing connection from its
    /// replacement.
    Connected {
        connection: MultiplexedConnection,
        generation: u64,
    },
    /// A background task is reconnecting.
    Reconnecting { generation: u64 },
}

impl RedisConnection {
    /// Connects to the server at `url`, each attempt (the first, and later
    /// reconnections) bounded by `connect_timeout`, reconnection attempts at
    /// most `max_reconnect_delay` apart.
    ///
    /// # Errors
    ///
    /// [`ConnectError::InvalidUrl`], or [`ConnectError::Unreachable`] when the
    /// first connection fails: a misconfigured address is reported at start-up
    /// rather than as failed checks.
    pub async fn connect(
        url: &str,
        connect_timeout: Duration,
        max_reconnect_delay: Duration,
    ) -> Result<Self, ConnectError> {
        let client = Client::open(url).map_err(ConnectError::InvalidUrl)?;
        let settings = AsyncConnectionConfig::new().set_connection_timeout(connect_timeout);
        let connection = open(&client, &settings, connect_timeout)
            .await
            .map_err(ConnectError::Unreachable)?;
        let db = client.get_connection_info().redis.db;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                settings,
                connect_timeout,
                max_reconnect_delay,
                db,
                state: Mutex::new(State::Connected {
                    connection,
                    generation: 0,
                }),
            }),
        })
    }

    /// Whether a connection is established right now (it may still fail on
    /// its next command).
    #[must_use]
    pub fn is_connected(&self) -> bool {
        matches!(*self.shared.lock(), State::Connected { .. })
    }

    /// The current connection and its generation, or `None` while
    /// reconnecting.
    fn current(&self) -> Option<(MultiplexedConnection, u64)> {
        match &*self.shared.lock() {
            State::Connected {
                connection,
                generation,
            } => Some((connection.clone(), *generation)),
            State::Reconnecting { .. } => None,
        }
    }

    /// Runs `send` on the current connection; drops the connection and starts
    /// reconnecting if the command failed because the connection is gone.
    fn send<'a, T: Send + 'a>(
        &'a self,
        send: impl FnOnce(MultiplexedConnection) -> RedisFuture<'a, T> + Send + 'a,
    ) -> RedisFuture<'a, T> {
        let Some((connection, generation)) = self.current() else {
            return Box::pin(async { Err(not_connected()) });
        };
        Box::pin(async move {
            let result = send(connection).await;
            if let Err(error) = &result
                && connection_lost(error)
            {
                Shared::lost(&self.shared, generation);
            }
            result
        })
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole under the lock, so it is consistent even
        // if a holder panicked.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection of `generation` failed: unless it was already
    /// replaced, drop it and reconnect in the background.
    fn lost(shared: &Arc<Self>, generation: u64) {
        {
            let mut state = shared.lock();
            match &*state {
                State::Connected {
                    generation: current,
                    ..
                } if *current == generation => {}
                _ => return,
            }
            *state = State::Reconnecting { generation };
        }
        tokio::spawn(reconnect(Arc::downgrade(shared)));
    }
}

/// Reconnects until it succeeds or every handle to the connection is gone.
async fn reconnect(shared: Weak<Shared>) {
    let mut delay = FIRST_RECONNECT_DELAY;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if let Ok(connection) = open(&strong.client, &strong.settings, strong.connect_timeout).await
        {
            let mut state = strong.lock();
            let generation = match &*state {
                State::Reconnecting { generation } => generation + 1,
                State::Connected { .. } => return,
            };
            *state = State::Connected {
                connection,
                generation,
            };
            return;
        }
        let pause = delay.min(strong.max_reconnect_delay);
        drop(strong);
        tokio::time::sleep(pause).await;
        delay = delay.saturating_mul(2);
    }
}

async fn open(
    client: &Client,
    settings: &AsyncConnectionConfig,
    timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    // redis-rs bounds the TCP connect; this also bounds the handshake.
    match tokio::time::timeout(
        timeout,
        client.get_multiplexed_async_connection_with_config(settings),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connecting to Redis timed out",
        ))),
    }
}

/// The error for a command refused without being sent.
fn not_connected() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "not connected to Redis (reconnecting); the command was not sent",
    ))
}

/// Whether `error` means the connection it came from is unusable.
fn connection_lost(error: &RedisError) -> bool {
    (error.is_io_error() && !error.is_timeout()) || error.is_connection_dropped()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let this: &'a Self = self;
        this.send(move |mut connection| {
            Box::pin(async move { connection.req_packed_command(cmd).await })
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let this: &'a Self = self;
        this.send(move |mut connection| {
            Box::pin(async move { connection.req_packed_commands(cmd, offset, count).await })
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info may hold a password: never print it.
        f.debug_struct("RedisConnection")
            .field("connected", &self.is_connected())
            .field("connect_timeout", &self.shared.connect_timeout)
            .field("max_reconnect_delay", &self.shared.max_reconnect_delay)
            .finish_non_exhaustive()
    }
}
