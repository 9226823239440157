//! The layer and its configuration.

use std::{fmt, future::Future, pin::Pin, sync::Arc};

use http::{HeaderMap, HeaderValue, StatusCode, request::Parts};
use runlimit_core::{Lifecycle, Limiter, Policy};
use runlimit_http::draft_11::{Advertise, PolicyName, QuotaPolicy, policy_field};
use tower_layer::Layer;

use crate::{
    charge::{Charge, CountWhen},
    extract::{KeyExtractor, MissingMetadata, SharedExtractor},
    failure::FailureMode,
    rejection::DefaultRejection,
    service::RateLimitService,
};

pub(crate) type Selected<P> = Result<Arc<P>, MissingMetadata>;
type SyncSelector<P> = Arc<dyn Fn(&Parts) -> Selected<P> + Send + Sync>;
type AsyncSelector<P> =
    Arc<dyn Fn(&Parts) -> Pin<Box<dyn Future<Output = Selected<P>> + Send>> + Send + Sync>;

/// A policy's name and advertisement, computed once per policy.
#[derive(Debug)]
pub(crate) struct PolicyMeta {
    pub(crate) name: PolicyName,
    pub(crate) advertised: Option<QuotaPolicy>,
}

impl PolicyMeta {
    pub(crate) fn of<P: Policy + Advertise>(policy: &P) -> Arc<Self> {
        let name = PolicyName::of(policy);
        let advertised = policy.quota_policy(name.clone()).ok();
        Arc::new(Self { name, advertised })
    }
}

/// Where a check's policy comes from.
pub(crate) enum PolicySource<P> {
    /// One pre-validated policy, with its metadata computed once.
    Fixed {
        policy: Arc<P>,
        meta: Arc<PolicyMeta>,
    },
    /// Chosen per request, synchronously.
    Select(SyncSelector<P>),
    /// Chosen per request, asynchronously.
    SelectAsync(AsyncSelector<P>),
}

impl<P> Clone for PolicySource<P> {
    fn clone(&self) -> Self {
        match self {
            Self::Fixed { policy, meta } => Self::Fixed {
                policy: Arc::clone(policy),
                meta: Arc::clone(meta),
            },
            Self::Select(select) => Self::Select(Arc::clone(select)),
            Self::SelectAsync(select) => Self::SelectAsync(Arc::clone(select)),
        }
    }
}

/// One check the layer runs per request.
pub(crate) struct Rule<P> {
    pub(crate) source: PolicySource<P>,
    pub(crate) extractor: SharedExtractor<P>,
}

impl<P> Clone for Rule<P> {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
            extractor: Arc::clone(&self.extractor),
        }
    }
}

pub(crate) type SkipPredicate = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// Everything a service needs, shared by every clone of it.
pub(crate) struct Config<L: Limiter, M> {
    pub(crate) limiter: Arc<L>,
    pub(crate) rules: Vec<Rule<L::Policy>>,
    pub(crate) skip: Option<SkipPredicate>,
    pub(crate) failure: FailureMode,
    pub(crate) mapper: Arc<M>,
    pub(crate) response_fields: bool,
    /// `RateLimit-Policy` for a layer whose policies are all fixed, encoded once.
    pub(crate) static_policy_field: Option<HeaderValue>,
    /// Set when requests count only for some responses.
    pub(crate) charge: Option<Arc<dyn Charge<L>>>,
}

impl<L: Limiter, M> Config<L, M> {
    /// Adds a rule and re-encodes the static `RateLimit-Policy` value.
    fn push_rule(&mut self, rule: Rule<L::Policy>) {
        self.rules.push(rule);
        self.refresh_static_policy_field();
    }

    /// Encodes `RateLimit-Policy` once when every policy is fixed.
    fn refresh_static_policy_field(&mut self) {
        let advertised: Option<Vec<QuotaPolicy>> = self
            .rules
            .iter()
            .map(|rule| match &rule.source {
                PolicySource::Fixed { meta, .. } => Some(meta.advertised.clone()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|all| all.into_iter().flatten().collect());
        self.static_policy_field = advertised
            .and_then(|policies| policy_field(&policies).ok())
            .map(|(_, value)| value);
    }
}

impl<L: Limiter, M> Clone for Config<L, M> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            rules: self.rules.clone(),
            skip: self.skip.clone(),
            failure: self.failure.clone(),
            mapper: Arc::clone(&self.mapper),
            response_fields: self.response_fields,
            static_policy_field: self.static_policy_field.clone(),
            charge: self.charge.clone(),
        }
    }
}

/// A Tower layer that admits each request against a Runlimit backend before
/// the inner service runs.
///
/// For each request the service:
///
/// 1. evaluates the optional [`skip`](Self::skip) predicate on the request head;
/// 2. resolves each check's policy (fixed, or selected per request among
///    pre-validated policies, synchronously or asynchronously);
/// 3. derives each check's [`SubjectKey`](runlimit_core::SubjectKey) with the
///    application's [`KeyExtractor`];
/// 4. evaluates all checks as **one atomic batch** (a single check alone), so a
///    client limit and an identity limit are consumed together or not at all;
/// 5. on an enforced denial, a capacity denial, missing metadata or (failing
///    closed) a backend error, answers through the
///    [`RejectionMapper`](crate::RejectionMapper) **without calling the inner
///    service or reading the request body**;
/// 6. otherwise appends the decisions to the request's
///    [`RateLimitContext`](crate::RateLimitContext) and calls the inner service
///    that was polled ready, optionally appending `RateLimit` fields to its
///    response.
///
/// # What the layer does not do
///
/// It never reads `Forwarded`, `X-Forwarded-For`, `ConnectInfo`, cookies or
/// identities: which peers are trusted proxies and how subjects are normalized
/// is the application's decision, made in its key extractors. It does not bound
/// concurrency (use a semaphore or `tower::limit`) or buffer bodies, and it
/// refunds quota only when told to with [`count_when`](Self::count_when).
///
/// # Examples
///
/// ```
/// use std::{net::SocketAddr, sync::Arc, time::Duration};
///
/// use axum::{Router, extract::ConnectInfo, routing::post};
/// use runlimit_axum::{MissingMetadata, RateLimitLayer};
/// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
/// use runlimit_memory::{MemoryStore, MemoryStoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = FixedWindowPolicy::new(
///     PolicyId::new("auth.login")?,
///     ScopeId::new("client")?,
///     40,
///     Duration::from_secs(60),
/// )?;
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let limiter = MemoryStore::new(MemoryStoreConfig::new(50_000)?);
///
/// // This service is reached directly, so the TCP peer is the client. Behind a
/// // proxy, read the address your trusted-proxy layer established instead.
/// let layer = RateLimitLayer::new(limiter).check(policy, move |parts: &http::request::Parts, policy: &FixedWindowPolicy| {
///     let ConnectInfo(peer) = parts
///         .extensions
///         .get::<ConnectInfo<SocketAddr>>()
///         .ok_or(MissingMetadata::new("peer address"))?;
///     Ok(hasher.hash_for(policy, peer.ip().to_string().as_bytes()))
/// });
/// let app: Router = Router::new()
///     .route("/login", post(|| async { "welcome" }))
///     .layer(layer);
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
pub struct RateLimitLayer<L: Limiter, M = DefaultRejection> {
    // Shared with every service the layer makes: `layer` runs once per route
    // and, for routers that never receive their state, once per request, so it
    // must be an `Arc` clone and nothing more.
    config: Arc<Config<L, M>>,
}

impl<L: Limiter> RateLimitLayer<L, DefaultRejection> {
    /// A layer over `limiter` with no checks yet, failing closed, answering
    /// rejections with [`DefaultRejection`].
    ///
    /// Add at least one check: a layer without checks rejects every request it
    /// does not skip (as missing metadata), rather than silently admitting it.
    #[must_use]
    pub fn new(limiter: L) -> Self {
        Self::from_shared(Arc::new(limiter))
    }

    /// Like [`new`](Self::new), for a backend shared with other layers, replicas
    /// or tasks.
    #[must_use]
    pub fn from_shared(limiter: Arc<L>) -> Self {
        Self {
            config: Arc::new(Config {
                limiter,
                rules: Vec::new(),
                skip: None,
                failure: FailureMode::default(),
                mapper: Arc::new(DefaultRejection),
                response_fields: true,
                static_policy_field: None,
                charge: None,
            }),
        }
    }
}

impl<L: Limiter, M> RateLimitLayer<L, M> {
    /// The configuration to change while building; copied only if a clone of
    /// this layer already shares it.
    fn config_mut(&mut self) -> &mut Config<L, M> {
        Arc::make_mut(&mut self.config)
    }
}

impl<L, M> RateLimitLayer<L, M>
where
    L: Limiter,
    L::Policy: Advertise,
{
    /// Adds a check of a fixed, pre-validated `policy`, keyed by `extractor`.
    /// Several checks are evaluated as one atomic batch, in the order added.
    #[must_use]
    pub fn check(
        mut self,
        policy: impl Into<Arc<L::Policy>>,
        extractor: impl KeyExtractor<L::Policy>,
    ) -> Self {
        let policy = policy.into();
        let meta = PolicyMeta::of(&*policy);
        self.config_mut().push_rule(Rule {
            source: PolicySource::Fixed { policy, meta },
            extractor: Arc::new(extractor),
        });
        self
    }

    /// Adds a check whose policy `select` chooses per request among policies
    /// the application validated up front (for example a tier from an
    /// authenticated extension). An `Err` rejects the request; it never fails
    /// open.
    #[must_use]
    pub fn check_selected(
        mut self,
        select: impl Fn(&Parts) -> Result<Arc<L::Policy>, MissingMetadata> + Send + Sync + 'static,
        extractor: impl KeyExtractor<L::Policy>,
    ) -> Self {
        self.config_mut().push_rule(Rule {
            source: PolicySource::Select(Arc::new(select)),
            extractor: Arc::new(extractor),
        });
        self
    }

    /// Like [`check_selected`](Self::check_selected) with an asynchronous
    /// selector, for a policy looked up in a cache or service. The selector sees
    /// the request head and must copy what it needs into the returned future.
    #[must_use]
    pub fn check_selected_async<F, Fut>(
        mut self,
        select: F,
        extractor: impl KeyExtractor<L::Policy>,
    ) -> Self
    where
        F: Fn(&Parts) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<L::Policy>, MissingMetadata>> + Send + 'static,
    {
        let select: AsyncSelector<L::Policy> =
            Arc::new(move |parts: &Parts| Box::pin(select(parts)));
        self.config_mut().push_rule(Rule {
            source: PolicySource::SelectAsync(select),
            extractor: Arc::new(extractor),
        });
        self
    }

    /// Skips rate limiting for requests whose head matches `predicate`: no key,
    /// no policy, no backend call, no context and no fields. Only use trusted
    /// request data here (an authenticated extension, not a raw credential).
    #[must_use]
    pub fn skip(mut self, predicate: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.config_mut().skip = Some(Arc::new(predicate));
        self
    }

    /// Chooses what a backend error does; fail closed by default.
    #[must_use]
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.config_mut().failure = mode;
        self
    }

    /// Whether allowed responses get `RateLimit-Policy` and `RateLimit` fields
    /// for this layer's policies (on by default). Nested layers add theirs in
    /// composition order, outermost first.
    #[must_use]
    pub fn response_fields(mut self, enabled: bool) -> Self {
        self.config_mut().response_fields = enabled;
        self
    }

    /// Replaces the rejection mapper.
    #[must_use]
    pub fn rejection_mapper<M2>(self, mapper: M2) -> RateLimitLayer<L, M2> {
        let Config {
            limiter,
            rules,
            skip,
            failure,
            response_fields,
            static_policy_field,
            charge,
            ..
        } = Arc::unwrap_or_clone(self.config);
        RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                rules,
                skip,
                failure,
                mapper: Arc::new(mapper),
                response_fields,
                static_policy_field,
                charge,
            }),
        }
    }
}

impl<L, M> RateLimitLayer<L, M>
where
    L: Lifecycle + 'static,
    L::Policy: Advertise,
{
    /// Counts a request against this layer's quotas only when `counts`
    /// returns `true` for its response's status and headers; otherwise the
    /// request's charge is refunded (every check of the layer's batch).
    ///
    /// Quota is still consumed at admission, so concurrent requests can
    /// never slip past the limit while their handlers run ("count after the
    /// response" without the race). The refund runs after the inner service
    /// has answered, before the response is handed on, and never changes the
    /// response: a refund that fails keeps the charge, and the backend's
    /// observer sees the failure. A request whose response future is dropped
    /// (the client went away), or whose inner service returns an error, keeps
    /// its charge. Nested layers each refund their own checks by their own
    /// rule.
    ///
    /// # Examples
    ///
    /// Count only failed logins:
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use runlimit_axum::RateLimitLayer;
    /// # use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
    /// # use runlimit_memory::{MemoryStore, MemoryStoreConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let policy = FixedWindowPolicy::new(PolicyId::new("auth.login")?, ScopeId::new("identity")?, 8, Duration::from_secs(60))?;
    /// # let key = |_: &http::request::Parts, _: &FixedWindowPolicy| Ok(SubjectKey::from_digest([1; 32]));
    /// let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(50_000)?))
    ///     .check(policy, key)
    ///     .count_when(|status, _headers| !status.is_success());
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn count_when(
        mut self,
        counts: impl Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config_mut().charge = Some(Arc::new(CountWhen(counts)));
        self
    }
}

impl<L: Limiter, M> Clone for RateLimitLayer<L, M> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<L: Limiter, M> fmt::Debug for RateLimitLayer<L, M>
where
    L::Policy: Policy,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("checks", &self.config.rules.len())
            .field("skip", &self.config.skip.is_some())
            .field("failure", &self.config.failure)
            .field("response_fields", &self.config.response_fields)
            .finish_non_exhaustive()
    }
}

impl<S, L: Limiter, M> Layer<S> for RateLimitLayer<L, M> {
    type Service = RateLimitService<S, L, M>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, Arc::clone(&self.config))
    }
}
