//! The command line: `serve` and `check`.
//!
//! ```text
//! runlimit-server serve --config-dir DIR [--grpc-addr 0.0.0.0:8081] [--http-addr 0.0.0.0:8080]
//!     [--backend memory|redis|redis-cluster|postgres] [--secret-file FILE] [--previous-secret-file FILE]
//!     [--budget 10ms] [--response-headers none|draft11|legacy|both] [--dynamic-metadata]
//!     [--max-descriptors 16] [--reload-interval 1s] [--memory-max-keys N] [--memory-shards N]
//!     [--redis-url URL] [--redis-cluster-nodes URL,URL…] [--redis-prefix runlimit:]
//!     [--postgres-url URL] [--postgres-max-connections 16] [--postgres-relaxed-durability]
//!     [--denial-cache-keys 100000] [--lease-keys 10000] [--lease-max-grant 64]
//! runlimit-server check [--addr http://127.0.0.1:8081] --domain DOMAIN KEY=VALUE... [--hits N]
//! ```
//!
//! Every `serve` flag has an environment variable (`RUNLIMIT_SERVER_` and
//! the flag's name in capitals: `RUNLIMIT_SERVER_CONFIG_DIR`, …); the
//! secret itself can also be given as `RUNLIMIT_SERVER_SECRET` (and the
//! previous one as `RUNLIMIT_SERVER_PREVIOUS_SECRET`), never as a flag,
//! which other users could read from the process list.
//!
//! `check` prints the overall code, then one line per status, and exits
//! with 0 for `OK`, 1 for `OVER_LIMIT` and 2 when it got no answer.

use std::{
    fmt, fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use rand::RngCore;
use runlimit_core::{AnyPolicy, Backend, KeyHasher, Lifecycle, Limiter, MIN_SECRET_LEN};
use tokio::net::TcpListener;
use zeroize::Zeroizing;

use crate::{
    backend::{self, BackendArgs, BackendNeeds, WithLimiter},
    config,
    metrics::Metrics,
    proto::{
        RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
        rate_limit_descriptor::Entry,
        rate_limit_response::{Code, rate_limit::Unit},
    },
    reload::Reloader,
    server::Server,
    service::{Decider, ResponseHeaders},
};

/// The environment variable holding the secret.
pub const SECRET_ENV: &str = "RUNLIMIT_SERVER_SECRET";

/// The environment variable holding the previous secret.
pub const PREVIOUS_SECRET_ENV: &str = "RUNLIMIT_SERVER_PREVIOUS_SECRET";

/// `runlimit-server`: a rate-limit service for Envoy.
#[derive(Debug, clap::Parser)]
#[command(name = "runlimit-server", version, about, long_about = None)]
#[non_exhaustive]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// How logs are written (to standard error).
    #[arg(
        long,
        global = true,
        env = "RUNLIMIT_SERVER_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
    /// The least severe level logged: error, warn, info, debug or trace.
    #[arg(
        long,
        global = true,
        env = "RUNLIMIT_SERVER_LOG_LEVEL",
        default_value = "info"
    )]
    pub log_level: tracing::Level,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum LogFormat {
    /// One line of text per event, with its fields as `key=value`.
    Text,
    /// One JSON object per event.
    Json,
}

/// A command.
#[derive(Debug, clap::Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Serve the rate-limit protocol.
    Serve(ServeArgs),
    /// Ask a server about one descriptor, and print its answer.
    Check(CheckArgs),
}

/// `serve`'s settings.
#[derive(Debug, clap::Args)]
#[non_exhaustive]
pub struct ServeArgs {
    /// The directory of rule files (`*.yaml`, `*.yml`), watched for changes.
    #[arg(long, env = "RUNLIMIT_SERVER_CONFIG_DIR")]
    pub config_dir: PathBuf,
    /// The address of the gRPC service.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_GRPC_ADDR",
        default_value = "0.0.0.0:8081"
    )]
    pub grpc_addr: SocketAddr,
    /// The address of the HTTP service (`/json`, `/healthcheck`, `/metrics`).
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_HTTP_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub http_addr: SocketAddr,
    /// The backend.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// A file holding the secret that keys counters (at least 32 bytes; a
    /// final line break is not part of it). Or set RUNLIMIT_SERVER_SECRET.
    /// Required unless the backend is in memory, which then draws a random
    /// one.
    #[arg(long, env = "RUNLIMIT_SERVER_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// A file holding the secret in use before the current one, so that
    /// counters carry over a rotation. Or set
    /// RUNLIMIT_SERVER_PREVIOUS_SECRET.
    #[arg(long, env = "RUNLIMIT_SERVER_PREVIOUS_SECRET_FILE")]
    pub previous_secret_file: Option<PathBuf>,
    /// The time a request's backend calls may take before it is answered
    /// UNAVAILABLE (`10ms`, `1s`).
    #[arg(long, env = "RUNLIMIT_SERVER_BUDGET", default_value = "10ms", value_parser = duration)]
    pub budget: Duration,
    /// The rate-limit headers responses ask the proxy to add.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_RESPONSE_HEADERS",
        value_enum,
        default_value_t = ResponseHeaders::None
    )]
    pub response_headers: ResponseHeaders,
    /// Return dynamic metadata (the descriptors, quota-mode violations, and
    /// the configured metadata of descriptors within their limits).
    #[arg(long, env = "RUNLIMIT_SERVER_DYNAMIC_METADATA")]
    pub dynamic_metadata: bool,
    /// The most descriptors a request may have.
    #[arg(long, env = "RUNLIMIT_SERVER_MAX_DESCRIPTORS", default_value_t = runlimit_core::DEFAULT_MAX_BATCH_SIZE)]
    pub max_descriptors: usize,
    /// How often the configuration directory is read for changes.
    #[arg(long, env = "RUNLIMIT_SERVER_RELOAD_INTERVAL", default_value = "1s", value_parser = positive_duration)]
    pub reload_interval: Duration,
}

/// `check`'s settings.
#[derive(Debug, clap::Args)]
#[non_exhaustive]
pub struct CheckArgs {
    /// The server's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub addr: String,
    /// The domain.
    #[arg(long)]
    pub domain: String,
    /// The descriptor's entries, in order.
    #[arg(required = true, value_name = "KEY=VALUE", value_parser = entry)]
    pub entries: Vec<(String, String)>,
    /// The descriptor's cost; 0 checks without counting.
    #[arg(long)]
    pub hits: Option<u64>,
    /// How long to wait for the answer.
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    pub timeout: Duration,
}

fn duration(text: &str) -> Result<Duration, String> {
    config::parse_duration(text)
        .ok_or_else(|| format!("`{text}` is not a duration such as 10ms, 2s or 1m"))
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    duration(text).and_then(|duration| {
        if duration.is_zero() {
            Err("the duration must not be zero".to_owned())
        } else {
            Ok(duration)
        }
    })
}

fn entry(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err("an entry is KEY=VALUE, with a key".to_owned()),
    }
}

/// Why `serve` could not start.
#[derive(Debug, thiserror::Error)]
enum ServeFailure {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    Secret(String),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Backend(#[from] backend::BackendError),
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
}

/// Runs `cli`'s command until it is done (`serve`: until SIGTERM or
/// Ctrl-C).
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => match serve(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = %Chain(&error), "cannot serve");
                ExitCode::FAILURE
            }
        },
        Command::Check(args) => check(args).await,
    }
}

async fn serve(args: ServeArgs) -> Result<(), ServeFailure> {
    let hasher = hasher(&args)?;
    let metrics = Metrics::new();
    let reloader = Arc::new(Reloader::start(&args.config_dir, metrics.clone())?);
    let grpc = bind(args.grpc_addr).await?;
    let http = bind(args.http_addr).await?;
    let serving = Serving {
        args: &args,
        hasher,
        metrics,
        reloader: Arc::clone(&reloader),
        grpc,
        http,
    };
    let needs = BackendNeeds::new(
        args.max_descriptors,
        args.budget,
        Arc::clone(reloader.config()),
    );
    backend::with_backend(&args.backend, &needs, serving).await??;
    Ok(())
}

async fn bind(address: SocketAddr) -> Result<TcpListener, ServeFailure> {
    TcpListener::bind(address)
        .await
        .map_err(|source| ServeFailure::Bind { address, source })
}

/// Everything `serve` needs but the limiter.
struct Serving<'a> {
    args: &'a ServeArgs,
    hasher: KeyHasher,
    metrics: Metrics,
    reloader: Arc<Reloader>,
    grpc: TcpListener,
    http: TcpListener,
}

impl WithLimiter for Serving<'_> {
    type Output = Result<(), ServeFailure>;

    async fn with<L>(self, limiter: L) -> Self::Output
    where
        L: Limiter<Policy = AnyPolicy> + Lifecycle + Backend + 'static,
    {
        let args = self.args;
        let decider = Decider::new(
            limiter,
            Arc::clone(self.reloader.config()),
            self.hasher,
            self.metrics,
        )
        .with_budget(args.budget)
        .with_max_descriptors(args.max_descriptors)
        .with_response_headers(args.response_headers)
        .with_dynamic_metadata(args.dynamic_metadata);
        let local = |listener: &TcpListener| listener.local_addr().ok();
        tracing::info!(
            grpc = %Shown(local(&self.grpc)),
            http = %Shown(local(&self.http)),
            backend = args.backend.backend.as_str(),
            budget = ?args.budget,
            "serving"
        );
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let reloader = Arc::clone(&self.reloader);
        let interval = args.reload_interval;
        let watcher = tokio::spawn(async move {
            let mut stopped = stopped;
            reloader
                .watch(interval, async move {
                    let _ = stopped.wait_for(|stopped| *stopped).await;
                })
                .await;
        });
        let served = Server::new(decider)
            .serve(self.grpc, self.http, shutdown_signal())
            .await;
        let _ = stop.send(true);
        let _ = watcher.await;
        tracing::info!("stopped");
        Ok(served?)
    }
}

/// An address, or `?` when unknown.
struct Shown(Option<SocketAddr>);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(address) => address.fmt(f),
            None => f.write_str("?"),
        }
    }
}

/// An error and its sources, on one line.
struct Chain<'a>(&'a dyn std::error::Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Completes on SIGTERM or Ctrl-C (SIGINT).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stop with Ctrl-C");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The key hasher of the secrets `args` and the environment give.
fn hasher(args: &ServeArgs) -> Result<KeyHasher, ServeFailure> {
    let current = read_secret("secret", args.secret_file.as_deref(), SECRET_ENV)?;
    let previous = read_secret(
        "previous secret",
        args.previous_secret_file.as_deref(),
        PREVIOUS_SECRET_ENV,
    )?;
    let secret = match current {
        Some(secret) => secret,
        None if args.backend.backend.is_process_local() => {
            tracing::info!(
                "no secret given: counters are keyed with a random secret of this process"
            );
            let mut random = Zeroizing::new(vec![0; MIN_SECRET_LEN]);
            rand::rng().fill_bytes(&mut random[..]);
            random
        }
        None => {
            return Err(ServeFailure::Secret(format!(
                "a secret is required: --secret-file or {SECRET_ENV}"
            )));
        }
    };
    let hasher = KeyHasher::new(&secret)
        .map_err(|error| ServeFailure::Secret(format!("the secret: {error}")))?;
    match previous {
        Some(previous) => hasher
            .with_previous_secret(&previous)
            .map_err(|error| ServeFailure::Secret(format!("the previous secret: {error}"))),
        None => Ok(hasher),
    }
}

/// A secret from `file` or the environment variable `env`, not both.
fn read_secret(
    what: &str,
    file: Option<&Path>,
    env: &str,
) -> Result<Option<Zeroizing<Vec<u8>>>, ServeFailure> {
    let from_env = std::env::var_os(env).map(|value| Zeroizing::new(value.into_encoded_bytes()));
    match (file, from_env) {
        (Some(_), Some(_)) => Err(ServeFailure::Secret(format!(
            "the {what} is given both as a file and in {env}: give one"
        ))),
        (Some(path), None) => {
            let mut bytes = Zeroizing::new(fs::read(path).map_err(|error| {
                ServeFailure::Secret(format!(
                    "cannot read the {what} from {}: {error}",
                    path.display()
                ))
            })?);
            // A file written by a shell or an editor ends with a line break
            // that is not part of the secret.
            while bytes
                .last()
                .is_some_and(|byte| matches!(byte, b'\n' | b'\r'))
            {
                bytes.pop();
            }
            Ok(Some(bytes))
        }
        (None, from_env) => Ok(from_env),
    }
}

async fn check(args: CheckArgs) -> ExitCode {
    match ask(&args).await {
        Ok(response) => {
            print!("{}", Printed(&response));
            if response.overall_code() == Code::OverLimit {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("runlimit-server check: {error}");
            ExitCode::from(2)
        }
    }
}

async fn ask(args: &CheckArgs) -> Result<RateLimitResponse, String> {
    let address = if args.addr.contains("://") {
        args.addr.clone()
    } else {
        format!("http://{}", args.addr)
    };
    let endpoint = tonic::transport::Endpoint::from_shared(address)
        .map_err(|error| format!("invalid address {}: {error}", args.addr))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|error| format!("cannot connect to {}: {}", args.addr, Chain(&error)))?;
    let request = RateLimitRequest {
        domain: args.domain.clone(),
        descriptors: vec![RateLimitDescriptor {
            hits_addend: args.hits,
            ..RateLimitDescriptor::new(
                args.entries
                    .iter()
                    .map(|(key, value)| Entry::new(key, value)),
            )
        }],
        hits_addend: 0,
    };
    RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
}

/// A response as `check` prints it.
struct Printed<'a>(&'a RateLimitResponse);

impl fmt::Display for Printed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let response = self.0;
        writeln!(f, "{}", response.overall_code().as_str_name())?;
        for (index, status) in response.statuses.iter().enumerate() {
            write!(f, "descriptor {index}: {}", status.code().as_str_name())?;
            match &status.current_limit {
                None if status.limit_remaining == u32::MAX => f.write_str(" unlimited")?,
                None => f.write_str(" no limit")?,
                Some(limit) => {
                    let unit = Unit::try_from(limit.unit)
                        .map_or("unknown", Unit::as_str_name)
                        .to_ascii_lowercase();
                    write!(f, " limit={}/{unit}", limit.requests_per_unit)?;
                    if !limit.name.is_empty() {
                        write!(f, " name={}", limit.name)?;
                    }
                    write!(f, " remaining={}", status.limit_remaining)?;
                    if let Some(reset) = &status.duration_until_reset {
                        write!(f, " reset={}s", reset.seconds)?;
                    }
                }
            }
            writeln!(f)?;
        }
        for header in &response.response_headers_to_add {
            writeln!(f, "header {}: {}", header.key, header.value)?;
        }
        Ok(())
    }
}
