//! The limiter's connections, and whether it keeps them between operations.
//!
//! SQLx pings every connection given back to its pool (a `Sync` and a wait
//! for the server's answer), so a limiter sharing a pool with the
//! application, which gives its connection back after each check, sends a
//! second exchange on the wire for every check (after the reply, so not on
//! the check's latency, but on the connection and the server). A limiter
//! with a pool of its own ([`PostgresLimiter::with_dedicated_pool`]) instead
//! keeps the connections it has used in a stack of its own and takes the
//! most recently used one for the next operation, so in steady state a check
//! is exactly its one statement. A kept connection goes back to the pool
//! after [`RETURN_AFTER`], at its next use, which lets the pool apply its
//! lifetime and idle rules. Either way, a connection whose last operation
//! did not end cleanly is closed, never reused.
//!
//! Kept connections are counted by a fair semaphore, so an operation waiting
//! for a connection gets the next one kept (in arrival order) or a new one
//! from the pool, whichever comes first.
//!
//! [`PostgresLimiter::with_dedicated_pool`]: crate::PostgresLimiter::with_dedicated_pool

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use sqlx::{PgConnection, PgPool, pool::PoolConnection, postgres::Postgres};
use tokio::sync::Semaphore;

/// How long a connection stays with the limiter before it is handed back to
/// the pool (costing that one release its ping).
const RETURN_AFTER: Duration = Duration::from_secs(60);

/// Why no connection could be taken. Nothing was sent either way.
pub(crate) enum TakeError {
    /// The pool had none to give within the timeout.
    Timeout,
    /// The pool failed to open one.
    Acquire(sqlx::Error),
}

/// The pool and the connections the limiter keeps out of it.
pub(crate) struct Connections {
    pool: PgPool,
    /// Whether the limiter is the pool's only user and keeps its connections.
    dedicated: bool,
    kept: Mutex<Vec<Kept>>,
    /// One permit per connection in `kept`.
    available: Semaphore,
}

struct Kept {
    connection: PoolConnection<Postgres>,
    since: Instant,
}

impl Connections {
    pub(crate) fn new(pool: PgPool, dedicated: bool) -> Self {
        Self {
            pool,
            dedicated,
            kept: Mutex::new(Vec::new()),
            available: Semaphore::new(0),
        }
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A kept connection, or a new one from the pool, within `timeout`.
    pub(crate) async fn take(&self, timeout: Duration) -> Result<Held<'_>, TakeError> {
        let kept = match self.available.try_acquire() {
            Ok(permit) => {
                permit.forget();
                self.pop()
            }
            Err(_) => match tokio::time::timeout(timeout, self.wait()).await {
                Err(_) => return Err(TakeError::Timeout),
                Ok(result) => result?,
            },
        };
        Ok(Held {
            connections: self,
            kept: Some(kept),
        })
    }

    /// The next connection kept or a new one from the pool, whichever is
    /// first.
    async fn wait(&self) -> Result<Kept, TakeError> {
        tokio::select! {
            permit = self.available.acquire() => {
                // The semaphore is never closed.
                if let Ok(permit) = permit {
                    permit.forget();
                }
                Ok(self.pop())
            }
            acquired = self.pool.acquire() => match acquired {
                Ok(connection) => Ok(Kept { connection, since: Instant::now() }),
                Err(sqlx::Error::PoolTimedOut) => Err(TakeError::Timeout),
                Err(error) => Err(TakeError::Acquire(error)),
            },
        }
    }

    /// A kept connection, for a holder of one of `available`'s permits.
    fn pop(&self) -> Kept {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        // Every permit was added after pushing its connection.
        kept.unwrap_or_else(|| unreachable!("a permit without a kept connection"))
    }
}

/// A connection in use. [`keep`](Self::keep) it after an operation that
/// ended cleanly; dropping it otherwise (a timeout, a cancellation, a broken
/// connection) closes it, so no connection in an unknown state is reused.
pub(crate) struct Held<'a> {
    connections: &'a Connections,
    kept: Option<Kept>,
}

impl Held<'_> {
    pub(crate) fn connection(&mut self) -> &mut PgConnection {
        // Present until `keep` or `drop` consumes it.
        match &mut self.kept {
            Some(kept) => &mut kept.connection,
            None => unreachable!("a held connection is present until released"),
        }
    }

    /// Keeps the connection for the next operation (with a dedicated pool),
    /// or hands it back to the pool (a shared pool, or a connection kept long
    /// enough).
    pub(crate) fn keep(mut self) {
        let Some(kept) = self.kept.take() else {
            return;
        };
        if !self.connections.dedicated || kept.since.elapsed() >= RETURN_AFTER {
            drop(kept.connection);
            return;
        }
        self.connections
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(kept);
        self.connections.available.add_permits(1);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            drop(kept.connection.detach());
        }
    }
}
