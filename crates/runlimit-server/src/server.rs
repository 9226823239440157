//! Serving gRPC and HTTP on bound listeners until a shutdown future
//! completes.
//!
//! [`Server::serve`] takes listeners the caller bound (port 0 in tests) and
//! any future that completes on shutdown. On shutdown the server first
//! reports `NOT_SERVING` (on `grpc.health.v1` and `/healthcheck`), then
//! stops accepting connections, ends `grpc.health.v1` `Watch` streams,
//! finishes the requests in flight, and returns.

use std::{future::Future, io, sync::Arc};

use runlimit_core::{AnyPolicy, Lifecycle, Limiter};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tonic::transport::server::TcpIncoming;

use crate::{health::Health, http, proto::RateLimitServiceServer, service::Decider};

/// Why the server stopped on its own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The gRPC server failed.
    #[error("the gRPC server failed")]
    Grpc(#[source] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("the HTTP server failed")]
    Http(#[source] io::Error),
    /// A server's task panicked or was cancelled.
    #[error("a server task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
}

/// The gRPC service, `grpc.health.v1` and the HTTP surface of one
/// [`Decider`].
#[derive(Debug)]
pub struct Server<L> {
    decider: Arc<Decider<L>>,
}

impl<L> Server<L>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    /// A server of `decider`.
    #[must_use]
    pub fn new(decider: Decider<L>) -> Self {
        Self {
            decider: Arc::new(decider),
        }
    }

    /// The decider.
    #[must_use]
    pub fn decider(&self) -> &Arc<Decider<L>> {
        &self.decider
    }

    /// Serves gRPC on `grpc` and HTTP on `http` until `shutdown`
    /// completes, then shuts down gracefully (see the [module
    /// documentation](self)).
    ///
    /// # Errors
    ///
    /// [`ServeError`] when a server failed; the other is then shut down.
    pub async fn serve(
        self,
        grpc: TcpListener,
        http: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let (health, health_service) = Health::new(Arc::clone(self.decider.config()));
        health.update().await;
        let (stop, stopped) = watch::channel(false);
        let until_stopped = move || {
            let mut stopped = stopped.clone();
            async move {
                // An error means the sender is gone: stop as well.
                let _ = stopped.wait_for(|stopped| *stopped).await;
            }
        };

        // Configuration changes can make the server serve or stop serving.
        let follower = {
            let health = health.clone();
            let mut changes = self.decider.config().changes();
            let stopped = until_stopped();
            tokio::spawn(async move {
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        () = &mut stopped => return,
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            health.update().await;
                        }
                    }
                }
            })
        };

        let grpc_server = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(RateLimitServiceServer::from_arc(Arc::clone(&self.decider)))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(grpc).with_nodelay(Some(true)),
                until_stopped(),
            );
        let mut grpc_task: JoinHandle<Result<(), ServeError>> =
            tokio::spawn(async move { grpc_server.await.map_err(ServeError::Grpc) });
        let router = http::router(Arc::clone(&self.decider), health.clone());
        let http_server = axum::serve(http, router).with_graceful_shutdown(until_stopped());
        let mut http_task: JoinHandle<Result<(), ServeError>> =
            tokio::spawn(async move { http_server.await.map_err(ServeError::Http) });

        let ended = tokio::select! {
            () = shutdown => {
                tracing::info!("shutting down");
                Ended::Shutdown
            }
            ended = &mut grpc_task => Ended::Grpc(flatten(ended)),
            ended = &mut http_task => Ended::Http(flatten(ended)),
        };
        health.shut_down().await;
        let _ = stop.send(true);
        health.end_watches().await;
        let (grpc_served, http_served) = match ended {
            Ended::Shutdown => (flatten(grpc_task.await), flatten(http_task.await)),
            Ended::Grpc(served) => (served, flatten(http_task.await)),
            Ended::Http(served) => (flatten(grpc_task.await), served),
        };
        follower.abort();
        grpc_served.and(http_served)
    }
}

/// What ended serving.
enum Ended {
    Shutdown,
    Grpc(Result<(), ServeError>),
    Http(Result<(), ServeError>),
}

fn flatten(
    ended: Result<Result<(), ServeError>, tokio::task::JoinError>,
) -> Result<(), ServeError> {
    ended.map_err(ServeError::Task).and_then(|served| served)
}
