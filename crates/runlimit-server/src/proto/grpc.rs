//! The gRPC service `envoy.service.ratelimit.v3.RateLimitService`: a server
//! for any [`RateLimitService`], and a client.

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    sync::Arc,
    task::{Context, Poll},
};

use http::uri::PathAndQuery;
use tonic::{
    Request, Response, Status,
    body::Body as TonicBody,
    codegen::{Body, BoxFuture, Bytes, GrpcMethod, Service, StdError},
    server::{Grpc, NamedService, UnaryService},
};
use tonic_prost::ProstCodec;

use super::messages::{RateLimitRequest, RateLimitResponse};

/// The service's full name, as gRPC and `grpc.health.v1` name it.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// The HTTP/2 path of `ShouldRateLimit`.
pub const METHOD_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const METHOD_NAME: &str = "ShouldRateLimit";

/// What answers `ShouldRateLimit`.
pub trait RateLimitService: Send + Sync + 'static {
    /// Decides whether the request described by `request` is within its
    /// limits.
    ///
    /// # Errors
    ///
    /// A gRPC status when no decision could be made; Envoy then applies its
    /// `failure_mode_deny` setting.
    fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> impl Future<Output = Result<Response<RateLimitResponse>, Status>> + Send;
}

/// A [`RateLimitService`] as a gRPC service, to add to a
/// [`tonic::transport::Server`]; other methods of the path answer
/// `UNIMPLEMENTED`.
pub struct RateLimitServiceServer<T> {
    inner: Arc<T>,
}

impl<T> RateLimitServiceServer<T> {
    /// Serves `inner`.
    #[must_use]
    pub fn new(inner: T) -> Self {
        Self::from_arc(Arc::new(inner))
    }

    /// Serves `inner`, shared.
    #[must_use]
    pub fn from_arc(inner: Arc<T>) -> Self {
        Self { inner }
    }
}

impl<T> Clone for RateLimitServiceServer<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for RateLimitServiceServer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitServiceServer")
            .finish_non_exhaustive()
    }
}

impl<T> NamedService for RateLimitServiceServer<T> {
    const NAME: &'static str = SERVICE_NAME;
}

/// `ShouldRateLimit` as tonic's unary service.
struct ShouldRateLimit<T>(Arc<T>);

impl<T: RateLimitService> UnaryService<RateLimitRequest> for ShouldRateLimit<T> {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.should_rate_limit(request).await })
    }
}

impl<T, B> Service<http::Request<B>> for RateLimitServiceServer<T>
where
    T: RateLimitService,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<TonicBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != METHOD_PATH {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let method = ShouldRateLimit(Arc::clone(&self.inner));
        Box::pin(async move {
            let mut grpc = Grpc::new(ProstCodec::<RateLimitResponse, RateLimitRequest>::default());
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// A client of `envoy.service.ratelimit.v3.RateLimitService`.
#[derive(Debug, Clone)]
pub struct RateLimitServiceClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl RateLimitServiceClient<tonic::transport::Channel> {
    /// Connects to the server at `destination` (`http://host:port`).
    ///
    /// # Errors
    ///
    /// The transport's error for an invalid address or a failed connection.
    pub async fn connect<D>(destination: D) -> Result<Self, tonic::transport::Error>
    where
        D: TryInto<tonic::transport::Endpoint>,
        D::Error: Into<StdError>,
    {
        let channel = tonic::transport::Endpoint::new(destination)?
            .connect()
            .await?;
        Ok(Self::new(channel))
    }
}

impl<T> RateLimitServiceClient<T>
where
    T: tonic::client::GrpcService<TonicBody>,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    /// A client on `inner`, a channel or any gRPC service.
    pub fn new(inner: T) -> Self {
        Self {
            inner: tonic::client::Grpc::new(inner),
        }
    }

    /// Calls `ShouldRateLimit`.
    ///
    /// # Errors
    ///
    /// The status the server answered, or `UNKNOWN` when the connection
    /// was not ready.
    pub async fn should_rate_limit(
        &mut self,
        request: impl tonic::IntoRequest<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|error| Status::unknown(format!("service was not ready: {}", error.into())))?;
        let mut request = request.into_request();
        request
            .extensions_mut()
            .insert(GrpcMethod::new(SERVICE_NAME, METHOD_NAME));
        let codec = ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
        self.inner
            .unary(request, PathAndQuery::from_static(METHOD_PATH), codec)
            .await
    }
}
