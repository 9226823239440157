//! Whether the server is serving, for `GET /healthcheck` and
//! `grpc.health.v1`.
//!
//! The server is serving while it is not shutting down and its
//! configuration has at least one domain (one loaded from an empty
//! directory limits nothing, which is more likely a mounting mistake than
//! an intent). `grpc.health.v1` reports it for the services `""` (the
//! server), `ratelimit` (the name the reference service registers) and
//! `envoy.service.ratelimit.v3.RateLimitService`.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use tonic_health::{
    ServingStatus,
    pb::health_server::HealthServer,
    server::{HealthReporter, HealthService},
};

use crate::{proto::SERVICE_NAME, reload::SharedConfig};

/// The names `grpc.health.v1` reports the server's status under.
pub const HEALTH_SERVICES: [&str; 3] = ["", "ratelimit", SERVICE_NAME];

/// The server's serving status. Cloning shares it.
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    shutting_down: AtomicBool,
    config: Arc<SharedConfig>,
    reporter: HealthReporter,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("serving", &self.is_serving())
            .finish_non_exhaustive()
    }
}

impl Health {
    /// The status of a server using `config`, and the `grpc.health.v1`
    /// service that reports it (after [`update`](Self::update)).
    #[must_use]
    pub fn new(config: Arc<SharedConfig>) -> (Self, HealthServer<HealthService>) {
        let reporter = HealthReporter::new();
        let service = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
        let health = Self {
            inner: Arc::new(Inner {
                shutting_down: AtomicBool::new(false),
                config,
                reporter,
            }),
        };
        (health, service)
    }

    /// Whether the server is serving: not shutting down, with a domain.
    #[must_use]
    pub fn is_serving(&self) -> bool {
        !self.inner.shutting_down.load(Ordering::Acquire)
            && self.inner.config.load().domains().next().is_some()
    }

    /// Reports the current status on `grpc.health.v1`.
    pub async fn update(&self) {
        let status = if self.is_serving() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in HEALTH_SERVICES {
            self.inner
                .reporter
                .set_service_status(service, status)
                .await;
        }
    }

    /// Marks the server as shutting down, and reports it.
    pub async fn shut_down(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.update().await;
    }

    /// Ends the `Watch` streams of `grpc.health.v1` (after the status they
    /// have not seen yet), which would otherwise keep a graceful shutdown
    /// waiting forever; later checks find no service.
    pub async fn end_watches(&self) {
        let mut reporter = self.inner.reporter.clone();
        for service in HEALTH_SERVICES {
            reporter.clear_service_status(service).await;
        }
    }
}
