//! Servers started in process on loopback, clients, and requests.
#![allow(dead_code, unreachable_pub)]

#[cfg(unix)]
pub mod binary;
#[cfg(unix)]
pub mod services;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use runlimit_core::{AnyPolicy, KeyHasher, Lifecycle, Limiter};
use runlimit_memory::{AnyStore, ManualClock, MemoryStoreConfig};
use runlimit_server::{
    config::Config,
    metrics::Metrics,
    proto::{
        RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
        rate_limit_descriptor::Entry,
        rate_limit_response::{Code, DescriptorStatus},
    },
    reload::SharedConfig,
    server::{ServeError, Server},
    service::Decider,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::oneshot,
    task::JoinHandle,
};
use tonic::transport::Channel;

/// A secret for tests.
pub const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";

/// A configuration of the one file `yaml`.
pub fn config(yaml: &str) -> Config {
    Config::from_sources([("test.yaml", yaml)]).expect("a valid configuration")
}

/// A memory store on `clock`.
pub fn store(clock: &ManualClock) -> AnyStore {
    AnyStore::new(MemoryStoreConfig::new(10_000).expect("valid")).with_clock(clock.clone())
}

/// A decider of `yaml`'s rules on `limiter`.
pub fn decider<L>(limiter: L, yaml: &str) -> Decider<L>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    Decider::new(
        limiter,
        Arc::new(SharedConfig::new(config(yaml))),
        KeyHasher::new(SECRET).expect("a long secret"),
        Metrics::new(),
    )
}

/// A server running in this process on loopback.
pub struct Running {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub client: RateLimitServiceClient<Channel>,
    pub metrics: Metrics,
    pub config: Arc<SharedConfig>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

/// Starts a server of `yaml`'s rules on a memory store on `clock`.
pub async fn start(yaml: &str, clock: &ManualClock) -> Running {
    serve(decider(store(clock), yaml)).await
}

/// Serves `decider` on loopback ports.
pub async fn serve<L>(decider: Decider<L>) -> Running
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (grpc_addr, http_addr) = (
        grpc.local_addr().expect("address"),
        http.local_addr().expect("address"),
    );
    let metrics = decider.metrics().clone();
    let config = Arc::clone(decider.config());
    let (shutdown, stopped) = oneshot::channel::<()>();
    let server = Server::new(decider);
    let task = tokio::spawn(server.serve(grpc, http, async move {
        let _ = stopped.await;
    }));
    let client = RateLimitServiceClient::connect(format!("http://{grpc_addr}"))
        .await
        .expect("connect");
    Running {
        grpc: grpc_addr,
        http: http_addr,
        client,
        metrics,
        config,
        shutdown: Some(shutdown),
        task: Some(task),
    }
}

impl Running {
    /// Calls `ShouldRateLimit`.
    pub async fn ask(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Calls `ShouldRateLimit`, which must answer.
    pub async fn decide(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.ask(request).await.expect("a decision")
    }

    /// Starts shutting down.
    pub fn signal_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Shuts down and waits for the server to stop.
    pub async fn stop(mut self) {
        self.signal_shutdown();
        if let Some(task) = self.task.take() {
            task.await.expect("not panicked").expect("served");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A request of `domain` with `descriptors`.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// A descriptor of `entries`.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor::new(entries.iter().map(|(key, value)| Entry::new(*key, *value)))
}

/// A descriptor of `entries` costing `hits`.
pub fn costing(hits: u64, entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(hits),
        ..descriptor(entries)
    }
}

/// A status's code, remaining units and seconds to reset.
pub fn summary(status: &DescriptorStatus) -> (Code, u32, Option<i64>) {
    (
        status.code(),
        status.limit_remaining,
        status.duration_until_reset.map(|reset| reset.seconds),
    )
}

/// An HTTP response: status, headers (lowercase names) and body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Sends one HTTP/1.1 request and reads the whole response.
pub async fn http(address: SocketAddr, method: &str, path: &str, body: &str) -> HttpResponse {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("receive");
    let response = String::from_utf8(response).expect("text");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(key, value)| (key.to_ascii_lowercase(), value.to_owned()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A fresh directory under the system's temporary directory, removed on
/// drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "runlimit-server-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary directory");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` in the directory, replacing it in one step
    /// (write aside, then rename), as configuration tools do.
    pub fn write(&self, name: &str, text: &str) {
        let aside = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&aside, text).expect("write");
        std::fs::rename(&aside, self.0.join(name)).expect("rename");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
