//! The layer and its configuration.

use std::{fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use http::{HeaderMap, HeaderValue, StatusCode, request::Parts};
use runlimit_core::{Backend, CostError, Lifecycle, Limiter, Policy, Settle};
use runlimit_http::draft_11::{Advertise, PolicyName, QuotaPolicy, policy_field};
use tower_layer::Layer;

use crate::{
    body::{BodyKeyed, HeadKeyed},
    charge::{Charge, CountWhen, Counts, Reserve},
    extract::{KeyExtractor, MissingMetadata, SharedExtractor},
    failure::FailureMode,
    fields::ResponseFields,
    kept::{Interner, Kept},
    networks::PeerLimits,
    rejection::DefaultRejection,
    service::RateLimitService,
};

pub(crate) type Selected<P> = Result<Arc<P>, MissingMetadata>;
type SyncSelector<P> = Arc<dyn Fn(&Parts) -> Selected<P> + Send + Sync>;
type AsyncSelector<P> =
    Arc<dyn Fn(&Parts) -> Pin<Box<dyn Future<Output = Selected<P>> + Send>> + Send + Sync>;
pub(crate) type Applies = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
/// Whether a selected policy's counters are shared, for a layer that requires
/// shared storage.
pub(crate) type SharedCheck<L> = Arc<dyn Fn(&L, &<L as Limiter>::Policy) -> bool + Send + Sync>;

/// A policy's name and advertisement, computed once per policy.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct PolicyMeta {
    pub(crate) name: PolicyName,
    pub(crate) advertised: Option<QuotaPolicy>,
}

/// How many distinct fixed policies' metadata, and how many distinct
/// `RateLimit-Policy` values, layers keep for the life of the process (see
/// [`kept`](crate::kept)): tens of bytes per policy.
const KEPT_CONSTANTS: usize = 1_024;

static KEPT_METAS: Interner<PolicyMeta> = Interner::new(KEPT_CONSTANTS);
static KEPT_POLICY_FIELDS: Interner<str> = Interner::new(KEPT_CONSTANTS);

impl PolicyMeta {
    pub(crate) fn of<P: Policy + Advertise>(policy: &P) -> Self {
        let name = PolicyName::of(policy);
        let advertised = policy.quota_policy(name.clone()).ok();
        Self { name, advertised }
    }

    /// The metadata of a fixed policy, kept once for every layer that has it.
    fn fixed<P: Policy + Advertise>(policy: &P) -> Kept<Self> {
        KEPT_METAS.keep(Box::new(Self::of(policy)))
    }
}

/// `value`, kept for the life of the process when the bound allows, so that
/// copying it into a response writes no shared reference count.
fn kept_field_value(value: HeaderValue) -> HeaderValue {
    match value
        .to_str()
        .map(|text| KEPT_POLICY_FIELDS.keep(text.into()))
    {
        // Visible ASCII, as `from_static` requires: `to_str` accepted it.
        Ok(Kept::Static(text)) => HeaderValue::from_static(text),
        Ok(Kept::Counted(_)) | Err(_) => value,
    }
}

/// Where a check's policy comes from.
pub(crate) enum PolicySource<P> {
    /// One pre-validated policy, with its metadata computed once.
    Fixed {
        policy: Arc<P>,
        meta: Kept<PolicyMeta>,
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
                meta: meta.clone(),
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
    /// When set, the check runs only for requests it accepts.
    pub(crate) applies: Option<Applies>,
    /// Whether the policy's quota appears in response fields.
    pub(crate) disclosed: bool,
    /// Whether the extractor reads the buffered request body.
    pub(crate) reads_body: bool,
}

impl<P> Clone for Rule<P> {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
            extractor: Arc::clone(&self.extractor),
            applies: self.applies.clone(),
            disclosed: self.disclosed,
            reads_body: self.reads_body,
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
    pub(crate) fields: ResponseFields,
    /// `RateLimit-Policy` for the layer's checks, encoded once, when every one
    /// is fixed, unconditional, disclosed and advertisable: valid whenever all
    /// of them are reported.
    pub(crate) static_policy_field: Option<HeaderValue>,
    /// Set when requests count only for some responses, or settle to what
    /// they used.
    pub(crate) charge: Option<Arc<dyn Charge<L>>>,
    /// Which responses count, when the application said.
    pub(crate) counts: Option<Counts>,
    /// The cost each check reserves, and how to build the charge that
    /// settles it (made where the backend is known to settle).
    pub(crate) reserve: Option<(u64, MakeSettling<L>)>,
    /// Set when every policy must be stored where all replicas share it.
    pub(crate) shared_check: Option<SharedCheck<L>>,
    /// Whether the application declared it runs as one process.
    pub(crate) process_local_allowed: bool,
    /// Whether the layer buffers request bodies for its extractors.
    pub(crate) body_buffered: bool,
}

impl<L: Limiter, M> Config<L, M> {
    /// Encodes `RateLimit-Policy` once when every check is fixed,
    /// unconditional, disclosed and advertisable.
    fn refresh_static_policy_field(&mut self) {
        let advertised: Option<Vec<QuotaPolicy>> = self
            .rules
            .iter()
            .map(|rule| match &rule.source {
                PolicySource::Fixed { meta, .. } if rule.disclosed && rule.applies.is_none() => {
                    meta.advertised.clone()
                }
                _ => None,
            })
            .collect();
        self.static_policy_field = advertised
            .and_then(|policies| policy_field(&policies).ok())
            .map(|(_, value)| kept_field_value(value));
    }

    fn push_rule(&mut self, rule: Rule<L::Policy>) {
        self.rules.push(rule);
        self.refresh_static_policy_field();
    }

    /// The most recently added check, for the modifiers that apply to it.
    ///
    /// # Panics
    ///
    /// When no check has been added: a mistake in building the layer, found
    /// when it is built.
    fn last_rule(&mut self, modifier: &str) -> &mut Rule<L::Policy> {
        match self.rules.last_mut() {
            Some(rule) => rule,
            None => {
                panic!("RateLimitLayer::{modifier} modifies the last check added, and none was")
            }
        }
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
            fields: self.fields,
            static_policy_field: self.static_policy_field.clone(),
            charge: self.charge.clone(),
            counts: self.counts.clone(),
            reserve: self.reserve.clone(),
            shared_check: self.shared_check.clone(),
            process_local_allowed: self.process_local_allowed,
            body_buffered: self.body_buffered,
        }
    }
}

/// A Tower layer that admits each request against a Runlimit backend before
/// the inner service runs.
///
/// For each request the service:
///
/// 1. evaluates the optional [`skip`](Self::skip) predicate on the request head;
/// 2. for a layer that [keys on the body](Self::key_reads_body), buffers the body
///    up to its cap (a larger one is answered 413, never admitted);
/// 3. resolves each check's policy (fixed, or selected per request among
///    pre-validated policies, synchronously or asynchronously), leaving out
///    checks whose [`only_when`](Self::only_when) predicate does not accept the
///    request;
/// 4. derives each check's [`SubjectKey`](runlimit_core::SubjectKey) with the
///    application's [`KeyExtractor`];
/// 5. evaluates the enforced checks as **one atomic batch** (a single check
///    alone), so a client limit and an identity limit are consumed together or
///    not at all; then, if they allowed the request, the shadow checks, which
///    never deny;
/// 6. on an enforced denial, a capacity denial, missing metadata or (failing
///    closed) a backend error, answers through the
///    [`RejectionMapper`](crate::RejectionMapper) **without calling the inner
///    service**;
/// 7. otherwise appends the decisions to the request's
///    [`RateLimitContext`](crate::RateLimitContext) and calls the inner service
///    that was polled ready, adding [response fields](Self::fields) for its
///    disclosed policies to its response, and refunding by
///    [`count_when`](Self::count_when) when asked.
///
/// # Response fields and nested layers
///
/// `RateLimit-Policy` and `RateLimit` describe the same policies, in the same
/// order, on every response that carries them: the layer's reported checks
/// (those that applied, were decided on the quota and are disclosed) in the
/// order they were added. A quota denial reports the denied policy alone, if
/// disclosed. Responses travel back out through outer layers, which add their
/// own fields before the inner layers' members: a request an inner layer
/// denied gets the outer layers' allowed members first, then the inner
/// layer's denied one. The legacy fields hold one quota, the most restrictive
/// across the layers.
///
/// # What the layer does not do
///
/// It never reads `Forwarded`, `X-Forwarded-For`, `ConnectInfo`, cookies or
/// identities on its own: which peers are trusted proxies and how subjects are
/// normalized is the application's decision, made in its key extractors (the
/// ready-made [`PeerIp`](crate::PeerIp) reads the TCP peer, never a header). It
/// does not bound concurrency (use a semaphore or `tower::limit`), and it
/// refunds quota only when told to with [`count_when`](Self::count_when).
///
/// # Memory kept for the process
///
/// The name and advertisement of each fixed policy, and a layer's
/// precomputed `RateLimit-Policy` value, are kept for the life of the process
/// and shared by every layer built with the same ones, so that admitted
/// requests copy them without writing a shared reference count. At most
/// 1,024 distinct ones of each are kept (tens of bytes per policy); layers
/// built after that keep reference-counted copies, which behave the same.
///
/// # Examples
///
/// Apply it with `route_layer`, so that paths the router does not have are
/// still answered 404 by its fallback, never checked:
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
///     .route_layer(layer);
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
pub struct RateLimitLayer<L: Limiter, M = DefaultRejection, B = HeadKeyed> {
    // Shared with every service the layer makes: `layer` runs once per route
    // and, for routers that never receive their state, once per request, so it
    // must be an `Arc` clone and nothing more.
    config: Arc<Config<L, M>>,
    body: B,
}

impl<L: Limiter> RateLimitLayer<L, DefaultRejection, HeadKeyed> {
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
                fields: ResponseFields::Draft,
                static_policy_field: None,
                charge: None,
                counts: None,
                reserve: None,
                shared_check: None,
                process_local_allowed: false,
                body_buffered: false,
            }),
            body: HeadKeyed,
        }
    }
}

impl<L: Limiter, M, B> RateLimitLayer<L, M, B> {
    /// The configuration to change while building; copied only if a clone of
    /// this layer already shares it.
    fn config_mut(&mut self) -> &mut Config<L, M> {
        Arc::make_mut(&mut self.config)
    }
}

impl<L, M, B> RateLimitLayer<L, M, B>
where
    L: Limiter,
    L::Policy: Advertise,
{
    /// Adds a check of a fixed, pre-validated `policy`, keyed by `extractor`.
    /// Enforced checks are evaluated as one atomic batch, in the order added.
    #[must_use]
    pub fn check(
        mut self,
        policy: impl Into<Arc<L::Policy>>,
        mut extractor: impl KeyExtractor<L::Policy>,
    ) -> Self {
        let policy = policy.into();
        extractor.prepare(&policy);
        let meta = PolicyMeta::fixed(&*policy);
        self.config_mut().push_rule(Rule {
            source: PolicySource::Fixed { policy, meta },
            reads_body: extractor.reads_body(),
            extractor: Arc::new(extractor),
            applies: None,
            disclosed: true,
        });
        self
    }

    /// Adds the checks of `limits`: the peer's own, then one per IPv6
    /// network level, from narrow to wide, each applying to IPv6 peers only,
    /// once their network has escalated (see [`PeerLimits`]).
    /// They join the layer's one atomic batch like any other check.
    #[must_use]
    pub fn check_peer(mut self, limits: PeerLimits<L::Policy>) -> Self
    where
        L::Policy: 'static,
    {
        let ((per_peer, peer), networks) = limits.into_levels();
        self = self.check(per_peer, peer);
        for ((policy, network), escalation) in networks {
            self = self
                .check(policy, network)
                .only_when(move |parts: &Parts| escalation.applies(parts));
        }
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
            reads_body: extractor.reads_body(),
            extractor: Arc::new(extractor),
            applies: None,
            disclosed: true,
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
            reads_body: extractor.reads_body(),
            extractor: Arc::new(extractor),
            applies: None,
            disclosed: true,
        });
        self
    }

    /// Makes the check added last apply only to requests `applies` accepts.
    /// For other requests the check is left out entirely: no key, no quota
    /// consumed, no context entry, no field. A password-reset request that
    /// names no account is then not counted against a per-recipient limit,
    /// while the layer's other checks still run.
    ///
    /// This is not how to handle a key that is missing: a request a check
    /// applies to but cannot key is still rejected, never admitted.
    /// A layer that [keys on the body](Self::key_reads_body) can read it here
    /// as the [`RequestBody`](crate::RequestBody) extension.
    ///
    /// # Panics
    ///
    /// If no check has been added yet: a mistake in building the layer,
    /// found when it is built.
    #[must_use]
    pub fn only_when(mut self, applies: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        let config = self.config_mut();
        config.last_rule("only_when").applies = Some(Arc::new(applies));
        config.refresh_static_policy_field();
        self
    }

    /// Withholds the check added last from every response field and from
    /// the default rejection's body: its quota is enforced and reported to
    /// handlers in the [`RateLimitContext`](crate::RateLimitContext), never to
    /// clients.
    ///
    /// Policies are disclosed by default, because the draft fields exist to
    /// tell a client about its own quota, and a quota keyed on the caller
    /// itself (its address, its API key) tells it nothing about anyone else.
    /// Withhold every policy keyed on something a caller names rather than is:
    /// an identity policy's `r=` on a login route would tell a caller how many
    /// attempts remain on someone else's account.
    ///
    /// # Panics
    ///
    /// If no check has been added yet: a mistake in building the layer,
    /// found when it is built.
    #[must_use]
    pub fn withhold_fields(mut self) -> Self {
        let config = self.config_mut();
        config.last_rule("withhold_fields").disclosed = false;
        config.refresh_static_policy_field();
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

    /// Which rate-limit fields responses get; [`ResponseFields::Draft`] by
    /// default. Nested layers add theirs in composition order, outermost first.
    #[must_use]
    pub fn fields(mut self, fields: ResponseFields) -> Self {
        self.config_mut().fields = fields;
        self
    }

    /// Whether responses get the draft `RateLimit-Policy` and `RateLimit`
    /// fields (on by default); the same as [`fields`](Self::fields) with
    /// [`ResponseFields::Draft`] or [`ResponseFields::None`].
    #[must_use]
    pub fn response_fields(self, enabled: bool) -> Self {
        self.fields(if enabled {
            ResponseFields::Draft
        } else {
            ResponseFields::None
        })
    }

    /// Replaces the rejection mapper.
    #[must_use]
    pub fn rejection_mapper<M2>(self, mapper: M2) -> RateLimitLayer<L, M2, B> {
        let Config {
            limiter,
            rules,
            skip,
            failure,
            fields,
            static_policy_field,
            charge,
            counts,
            reserve,
            shared_check,
            process_local_allowed,
            body_buffered,
            ..
        } = Arc::unwrap_or_clone(self.config);
        RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                rules,
                skip,
                failure,
                mapper: Arc::new(mapper),
                fields,
                static_policy_field,
                charge,
                counts,
                reserve,
                shared_check,
                process_local_allowed,
                body_buffered,
            }),
            body: self.body,
        }
    }
}

impl<L, M> RateLimitLayer<L, M, HeadKeyed>
where
    L: Limiter,
    L::Policy: Advertise,
{
    /// Buffers each request's body, up to `limit` bytes, before any key is
    /// extracted, so extractors and [`only_when`](Self::only_when) predicates
    /// can read a field of a login or password-reset form from the
    /// [`RequestBody`](crate::RequestBody) extension; a
    /// [`BodyField`](crate::BodyField) reads a form or JSON field from it.
    ///
    /// A body over the cap (declared by `Content-Length` or read) is answered
    /// 413 and never admitted unkeyed, so padding a body is no way out of the
    /// limit; one that fails while being read is answered 400, and one not
    /// received within the [time limit](Self::body_timeout) (10 seconds unless
    /// set) 408, all without consuming quota or calling the inner service. The
    /// inner service receives exactly the bytes read. Memory per request is
    /// bounded by the cap.
    ///
    /// Opt-in, because buffering is work an unauthenticated caller makes the
    /// service do before it can be refused: every request on the route is read
    /// into memory, up to the cap, and held while its checks run. Keep the cap
    /// near the largest legitimate form, and keep a coarse head-keyed limit
    /// (a per-client gate) in an outer layer so floods are refused before
    /// their bodies are read.
    ///
    /// The request body type must be buildable from the bytes read
    /// (`From<Bytes>`), as axum's `Body` is.
    #[must_use]
    pub fn key_reads_body(mut self, limit: usize) -> RateLimitLayer<L, M, BodyKeyed> {
        self.config_mut().body_buffered = true;
        RateLimitLayer {
            config: self.config,
            body: BodyKeyed {
                limit,
                timeout: Duration::from_secs(10),
            },
        }
    }
}

impl<L, M> RateLimitLayer<L, M, BodyKeyed>
where
    L: Limiter,
    L::Policy: Advertise,
{
    /// How long reading a body may take before the request is answered 408
    /// (10 seconds by default).
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body.timeout = timeout;
        self
    }
}

impl<L, M, B> RateLimitLayer<L, M, B>
where
    L: Lifecycle + 'static,
    L::Policy: Advertise,
{
    /// Counts a request against this layer's quotas only when `counts`
    /// returns `true` for its response's status and headers; otherwise the
    /// request's charge is refunded (every check of the layer).
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
        let counts: Counts = Arc::new(counts);
        let config = self.config_mut();
        config.charge = Some(match &config.reserve {
            Some((_, settling)) => settling(Some(Arc::clone(&counts))),
            None => Arc::new(CountWhen(Arc::clone(&counts))),
        });
        config.counts = Some(counts);
        self
    }
}

/// Builds the charge of a layer that reserves, with the responses that count.
pub(crate) type MakeSettling<L> = Arc<dyn Fn(Option<Counts>) -> Arc<dyn Charge<L>> + Send + Sync>;

/// A layer was asked to reserve a cost that one of its checks' policies can
/// never admit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReserveError {
    /// The reservation exceeds a policy's capacity, or is zero.
    #[error("policy {policy} cannot reserve this cost: {source}")]
    Cost {
        /// The policy that cannot hold the reservation.
        policy: String,
        /// Why.
        source: CostError,
    },
    /// A check's policy is selected per request, so its capacity is not
    /// known when the layer is built.
    #[error("a policy selected per request cannot reserve a cost")]
    SelectedPolicy,
}

impl<L, M, B> RateLimitLayer<L, M, B>
where
    L: Settle + 'static,
    L::Policy: Advertise,
{
    /// Charges each of the layer's checks `units` at admission, the most a
    /// request may use, and after the response gives back what the handler
    /// reports it did not use, in a [`Used`](crate::Used) response extension
    /// ([`Settle`]). For costs known only once the request has run: the
    /// tokens of a model's answer, the rows a query returned, the bytes sent.
    ///
    /// Reserve the largest cost you accept: a request is admitted only if
    /// its whole reservation fits, so concurrent requests can never together
    /// use more than the quota while their handlers run. A response without
    /// `Used` keeps the whole reservation, as do a dropped response future and
    /// an inner service error; a `Used` above the reservation keeps it too.
    /// With [`count_when`](Self::count_when) as well, a response that does not
    /// count is refunded whole. Call it after adding the checks.
    ///
    /// # Errors
    ///
    /// [`ReserveError::Cost`] when `units` is zero or exceeds a check's
    /// capacity, [`ReserveError::SelectedPolicy`] when a check's policy is
    /// selected per request: both found here, not per request.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use runlimit_axum::RateLimitLayer;
    /// # use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
    /// # use runlimit_memory::{MemoryStore, MemoryStoreConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 100,000 tokens a minute per tenant; a completion may take up to 4,000.
    /// let tokens = FixedWindowPolicy::new(PolicyId::new("llm.tokens")?, ScopeId::new("tenant")?, 100_000, Duration::from_secs(60))?;
    /// # let tenant = |_: &http::request::Parts, _: &FixedWindowPolicy| Ok(SubjectKey::from_digest([1; 32]));
    /// let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(50_000)?))
    ///     .check(tokens, tenant)
    ///     .reserve(4_000)?;
    /// // The handler inserts `runlimit_axum::Used(tokens_used)` into its response.
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reserve(mut self, units: u64) -> Result<Self, ReserveError> {
        for rule in &self.config.rules {
            match &rule.source {
                PolicySource::Fixed { policy, meta } => {
                    let capacity = policy.capacity();
                    if units == 0 || units > capacity {
                        return Err(ReserveError::Cost {
                            policy: meta.name.as_str().to_owned(),
                            source: CostError::OutOfRange {
                                cost: units,
                                capacity,
                            },
                        });
                    }
                }
                _ => return Err(ReserveError::SelectedPolicy),
            }
        }
        let settling: MakeSettling<L> =
            Arc::new(|counts| -> Arc<dyn Charge<L>> { Arc::new(Reserve { counts }) });
        let config = self.config_mut();
        config.charge = Some(settling(config.counts.clone()));
        config.reserve = Some((units, settling));
        Ok(self)
    }
}

/// A layer required a shared quota on a backend that keeps a policy in
/// process memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "policy {policy} must be shared across replicas, but its backend keeps it in process memory; \
     use a shared backend, or call allow_process_local() if this service runs as one process"
)]
pub struct ProcessLocalStorage {
    /// The policy whose counters would be process-local.
    pub policy: String,
}

impl<L, M, B> RateLimitLayer<L, M, B>
where
    L: Backend + 'static,
    L::Policy: Advertise,
{
    /// Requires every check's quota to be shared across replicas: fails, when
    /// the layer is built, if the backend keeps a fixed check's policy in
    /// process memory (a tiered limiter's local gate, deliberately
    /// per-process in front of a shared quota, passes): behind N replicas a
    /// process-local limit of 5 is really 5 × N, every deploy resets it, and
    /// nothing else says so. Policies selected per request are checked per
    /// request and refused (as a backend failure) when process-local.
    ///
    /// Call it after adding the checks. A service that really runs as one
    /// process says so with [`allow_process_local`](Self::allow_process_local).
    ///
    /// # Errors
    ///
    /// [`ProcessLocalStorage`], naming the first policy kept in process memory.
    pub fn require_shared(mut self) -> Result<Self, ProcessLocalStorage> {
        if self.config.process_local_allowed {
            return Ok(self);
        }
        for rule in &self.config.rules {
            if let PolicySource::Fixed { policy, meta } = &rule.source
                && !self.config.limiter.storage(policy).serves_a_fleet()
            {
                return Err(ProcessLocalStorage {
                    policy: meta.name.as_str().to_owned(),
                });
            }
        }
        self.config_mut().shared_check = Some(Arc::new(|limiter: &L, policy: &L::Policy| {
            limiter.storage(policy).serves_a_fleet()
        }));
        Ok(self)
    }
}

impl<L: Limiter, M, B> RateLimitLayer<L, M, B> {
    /// Declares that this service runs as a single process, so a
    /// process-local quota is the whole quota:
    /// [`require_shared`](Self::require_shared), called after it, then accepts
    /// any backend. An explicit choice, made in code rather than by leaving
    /// the guard out (say, from the deployment's configuration).
    #[must_use]
    pub fn allow_process_local(mut self) -> Self {
        self.config_mut().process_local_allowed = true;
        self
    }
}

impl<L: Limiter, M, B: Clone> Clone for RateLimitLayer<L, M, B> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            body: self.body.clone(),
        }
    }
}

impl<L: Limiter, M, B: fmt::Debug> fmt::Debug for RateLimitLayer<L, M, B>
where
    L::Policy: Policy,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("checks", &self.config.rules.len())
            .field("skip", &self.config.skip.is_some())
            .field("failure", &self.config.failure)
            .field("fields", &self.config.fields)
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl<S, L: Limiter, M, B: Copy> Layer<S> for RateLimitLayer<L, M, B> {
    type Service = RateLimitService<S, L, M, B>;

    /// # Panics
    ///
    /// When a check's extractor reads the request body (a
    /// [`BodyField`](crate::BodyField)) and the layer does not
    /// [buffer it](Self::key_reads_body): a mistake in building the layer,
    /// found when it is applied rather than on every request.
    fn layer(&self, inner: S) -> Self::Service {
        assert!(
            self.config.body_buffered || !self.config.rules.iter().any(|rule| rule.reads_body),
            "RateLimitLayer: a check keys on the request body, which the layer does not buffer; \
             call key_reads_body(limit) on it"
        );
        RateLimitService::new(inner, Arc::clone(&self.config), self.body)
    }
}
