//! gRPC rejections for tonic services.

use std::time::Duration;

use http::Response;
use tonic::{Status, metadata::MetadataValue};

use crate::{
    extract::Provider,
    rejection::{Rejection, RejectionMapper},
};

/// Answers rejections the way gRPC clients expect: a trailers-only response
/// whose `grpc-status` is `RESOURCE_EXHAUSTED` for quota denials and
/// `UNAVAILABLE` for capacity denials and backend failures; a value the
/// caller must send that is missing is `INVALID_ARGUMENT` (`UNAUTHENTICATED`
/// for credentials), trusted metadata the service failed to provide
/// `INTERNAL`. Retry times travel as `grpc-retry-pushback-ms` (the gRPC
/// retry-throttling convention) and `retry-after` (whole seconds), both
/// rounded up so a client waiting them is never early.
///
/// ```
/// use runlimit_axum::grpc::GrpcRejection;
/// # use runlimit_axum::RateLimitLayer;
/// # use runlimit_memory::{MemoryStore, MemoryStoreConfig};
/// # fn layer(store: MemoryStore) -> impl Sized {
/// RateLimitLayer::new(store).rejection_mapper(GrpcRejection)
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcRejection;

impl GrpcRejection {
    fn status(rejection: &Rejection<'_>) -> (Status, Option<Duration>) {
        match rejection {
            Rejection::QuotaExceeded {
                policy,
                denial,
                disclosed,
            } => (
                Status::resource_exhausted(if *disclosed {
                    format!("rate limit exceeded: {}", policy.as_str())
                } else {
                    "rate limit exceeded".to_owned()
                }),
                denial.retry_after(),
            ),
            Rejection::PayloadTooLarge { .. } => (
                Status::resource_exhausted("request message too large to rate limit"),
                None,
            ),
            Rejection::BodyUnreadable => (Status::invalid_argument("request unreadable"), None),
            Rejection::BodyTimedOut { .. } => (
                Status::deadline_exceeded("request message not received in time"),
                None,
            ),
            Rejection::StorageCapacity { retry_after, .. } => (
                Status::unavailable("rate limiter at capacity"),
                *retry_after,
            ),
            Rejection::BackendFailure { .. } => {
                (Status::unavailable("rate limiter unavailable"), None)
            }
            Rejection::MissingMetadata { missing, .. } => (
                match missing.provider() {
                    Provider::Caller => Status::invalid_argument(format!(
                        "missing or unusable: {}",
                        missing.reason()
                    )),
                    Provider::CallerCredentials(_) => Status::unauthenticated(format!(
                        "missing or unusable: {}",
                        missing.reason()
                    )),
                    // The reason describes the service's own configuration.
                    Provider::Service => {
                        Status::internal("request cannot be attributed for rate limiting")
                    }
                },
                None,
            ),
        }
    }
}

impl<B: Default + Send + 'static> RejectionMapper<B> for GrpcRejection {
    fn respond(&self, rejection: &Rejection<'_>) -> Response<B> {
        let (mut status, retry_after) = Self::status(rejection);
        if let Some(retry_after) = retry_after {
            // Rounded up, like `Retry-After`: a client that waits the pushback
            // is never early, even by the fraction of a millisecond dropped.
            let millis =
                u64::try_from(retry_after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            let seconds = runlimit_core::ceil_seconds(retry_after);
            let metadata = status.metadata_mut();
            metadata.insert("grpc-retry-pushback-ms", MetadataValue::from(millis));
            metadata.insert("retry-after", MetadataValue::from(seconds));
        }
        status.into_http()
    }
}
