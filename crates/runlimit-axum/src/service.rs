//! The service the layer wraps around an inner service.

use std::{
    fmt,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    task::{Context, Poll},
};

use http::{Request, Response, request::Parts};
use runlimit_core::{
    BatchDecision, Check, Decision, Denial, Limiter, Policy, QuotaMode, Receipt, SubjectKey,
};
use runlimit_http::draft_11::{Advertise, PolicyName};
use smallvec::SmallVec;
use tower_service::Service;

use crate::{
    body::{BodyMode, HeadKeyed},
    charge::{Charge, Outcome},
    context::{AppliedPolicy, RateLimitContext},
    extract::MissingMetadata,
    fields::{Fields, fields_for, prepend},
    future::ResponseFuture,
    kept::Kept,
    layer::{Config, PolicyMeta, PolicySource, ProcessLocalStorage, Rule},
    rejection::{Rejection, RejectionMapper},
};

/// The service [`RateLimitLayer`](crate::RateLimitLayer) produces.
pub struct RateLimitService<S, L: Limiter, M, B = HeadKeyed> {
    /// The instance the next call hands to its admission: taken by `call`,
    /// and made again from the spare only if this service is used again.
    inner: Option<S>,
    shared: Arc<Shared<S, L, M>>,
    body: B,
}

/// What every clone of one layered service shares.
struct Shared<S, L: Limiter, M> {
    config: Arc<Config<L, M>>,
    /// An instance of the inner service to clone when a `RateLimitService`
    /// whose instance went to a call is polled or cloned again.
    ///
    /// Admission runs before the inner service is called, so each call owns
    /// an instance of it. Cloning a replacement on every call, as Tower's
    /// readiness contract would otherwise need, costs a clone of the inner
    /// service per request (for an axum route, an allocation) that frameworks
    /// which clone the whole service per request, as axum and tonic do, never
    /// use. Behind a mutex so that the service is `Send` whenever the inner
    /// service is, and `Sync` whenever it is `Send` and `Sync`, without asking
    /// more of it. Set by the first call, before it takes its instance.
    spare: OnceLock<Mutex<S>>,
}

impl<S, L: Limiter, M, B> RateLimitService<S, L, M, B> {
    pub(crate) fn new(inner: S, config: Arc<Config<L, M>>, body: B) -> Self {
        Self {
            shared: Arc::new(Shared {
                config,
                spare: OnceLock::new(),
            }),
            inner: Some(inner),
            body,
        }
    }
}

impl<S: Clone, L: Limiter, M> Shared<S, L, M> {
    /// A fresh instance of the inner service, from the spare.
    fn spare_instance(&self) -> S {
        let spare = self
            .spare
            .get()
            // The spare is set before any call takes an instance, and only a
            // call leaves a service without one.
            .expect("a service without an instance has had a call, which set the spare");
        // A panicking `S::clone` cannot leave the spare half-changed: it is
        // only read.
        spare.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl<S: Clone, L: Limiter, M, B> RateLimitService<S, L, M, B> {
    /// The instance this call takes, after making sure that a spare exists
    /// for whatever uses this service next.
    fn take_instance(&mut self) -> S {
        // The spare is cloned before the instance is taken, so a panicking
        // `S::clone` leaves this service as it was.
        if let Some(ready) = &self.inner
            && self.shared.spare.get().is_none()
        {
            let _ = self.shared.spare.set(Mutex::new(ready.clone()));
        }
        // Without an instance the call was not preceded by poll_ready, against
        // the contract: it gets a fresh one.
        self.inner
            .take()
            .unwrap_or_else(|| self.shared.spare_instance())
    }

    /// The instance the next call will use.
    fn instance(&mut self) -> &mut S {
        let shared = &self.shared;
        self.inner.get_or_insert_with(|| shared.spare_instance())
    }
}

impl<S: Clone, L: Limiter, M, B: Copy> Clone for RateLimitService<S, L, M, B> {
    fn clone(&self) -> Self {
        Self {
            inner: Some(
                self.inner
                    .clone()
                    .unwrap_or_else(|| self.shared.spare_instance()),
            ),
            shared: Arc::clone(&self.shared),
            body: self.body,
        }
    }
}

impl<S: fmt::Debug, L: Limiter, M, B: fmt::Debug> fmt::Debug for RateLimitService<S, L, M, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("checks", &self.shared.config.rules.len())
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl<S, L, M, B, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, L, M, B>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    L: Limiter + 'static,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
    B: BodyMode<ReqBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.instance().poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Tower's readiness contract: the call gets the instance that was polled
        // ready; a next poll_ready makes another from the spare.
        let mut ready = self.take_instance();
        let (mut parts, body) = request.into_parts();
        let config = &self.shared.config;
        // One place each calls the inner service and boxes an admission, so
        // the request head is moved as few times as the paths allow.
        match admission_now(config, self.body.reads_body(), &mut parts) {
            Now::Call(fields) => {
                ResponseFuture::called(ready.call(Request::from_parts(parts, body)), fields)
            }
            Now::Answer(response) => ResponseFuture::answered(response),
            Now::AwaitOne(key) => ResponseFuture::admitting(Box::pin(admit_one(
                Arc::clone(config),
                self.body,
                ready,
                parts,
                body,
                key,
            ))),
            Now::Await => ResponseFuture::admitting(Box::pin(admit(
                Arc::clone(config),
                self.body,
                ready,
                parts,
                body,
            ))),
        }
    }
}

/// What a layer can make of a request while it is called.
enum Now<B> {
    /// Call the inner service now; its response gets these fields (none for
    /// a skipped request, a check that does not apply, or failing open).
    Call(Fields),
    /// Answer with this instead of calling the inner service.
    Answer(Response<B>),
    /// Admit under the layer's one check in a future ([`admit_one`]),
    /// with the request's key when it was taken already.
    AwaitOne(Option<SubjectKey>),
    /// Admit under the layer's checks in a future ([`admit`]).
    Await,
}

/// Admits the request whose head is `parts` while the layer is called, when
/// it can: a skipped request, and a layer of one fixed check that reads no
/// body on a limiter that decides at once. Everything else awaits.
fn admission_now<L, M, ResBody>(
    config: &Config<L, M>,
    reads_body: bool,
    parts: &mut Parts,
) -> Now<ResBody>
where
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
{
    if config.skip.as_ref().is_some_and(|skip| skip(parts)) {
        // Not admitted at all.
        return Now::Call(Fields::new());
    }
    let Some(single) = single_fixed(config) else {
        return Now::Await;
    };
    if reads_body {
        return Now::AwaitOne(None);
    }
    // The request head is all the check reads: it is keyed now, and decided
    // now if the limiter can, so the admission needs no future of its own.
    let key = match single.key(config, parts) {
        Ok(Some(key)) => key,
        Ok(None) => return Now::Call(Fields::new()),
        Err(answer) => return Now::Answer(answer),
    };
    let Some(decided) = config.limiter.check_now(&Check::new(single.policy, key)) else {
        return Now::AwaitOne(Some(key));
    };
    match single.admitted(config, parts, decided) {
        Ok(fields) => Now::Call(fields),
        Err(answer) => Now::Answer(answer),
    }
}

/// The layer's one rule, its policy and their metadata, when the layer has a
/// single check of a fixed policy and counts every admission (no refunds):
/// the common layer, which [`admission_now`] admits while it is called when
/// it can, and [`admit_one`] otherwise.
struct SingleFixed<'a, P> {
    rule: &'a Rule<P>,
    policy: &'a P,
    meta: &'a Kept<PolicyMeta>,
}

fn single_fixed<L: Limiter, M>(config: &Config<L, M>) -> Option<SingleFixed<'_, L::Policy>> {
    match (&*config.rules, &config.charge) {
        (
            [
                rule @ Rule {
                    source: PolicySource::Fixed { policy, meta },
                    ..
                },
            ],
            None,
        ) => Some(SingleFixed { rule, policy, meta }),
        _ => None,
    }
}

impl<P: Policy + 'static> SingleFixed<'_, P> {
    /// The key `parts` have under this check; `None` when the check does not
    /// apply to the request, or the layer's answer when it cannot be keyed.
    fn key<L, M, ResBody>(
        &self,
        config: &Config<L, M>,
        parts: &Parts,
    ) -> Result<Option<SubjectKey>, Response<ResBody>>
    where
        L: Limiter<Policy = P>,
        M: RejectionMapper<ResBody>,
    {
        if self
            .rule
            .applies
            .as_ref()
            .is_some_and(|applies| !applies(parts))
        {
            // The check does not apply to this request: nothing to count.
            return Ok(None);
        }
        match self.rule.extractor.extract(parts, self.policy) {
            Ok(key) => Ok(Some(key)),
            Err(missing) => Err(config.mapper.respond(&Rejection::MissingMetadata {
                policy: Some(&self.meta.name),
                missing,
            })),
        }
    }

    /// What the check's outcome makes of the request: admitted, with its
    /// context recorded in `parts` and the fields for the inner service's
    /// response (none when failing open on a backend error), or the layer's
    /// answer instead.
    fn admitted<L, M, ResBody>(
        &self,
        config: &Config<L, M>,
        parts: &mut Parts,
        decided: Result<Decision, L::Error>,
    ) -> Result<Fields, Response<ResBody>>
    where
        L: Limiter<Policy = P>,
        P: Advertise,
        M: RejectionMapper<ResBody>,
    {
        let Self { rule, meta, .. } = self;
        let decision = match decided {
            Ok(decision) => decision,
            // Failing open: no context and no fields.
            Err(error) if config.failure.admits_after(&error) => return Ok(Fields::new()),
            Err(error) => {
                return Err(config
                    .mapper
                    .respond(&Rejection::BackendFailure { error: &error }));
            }
        };
        if let Some(denial) = decision.denial().filter(|_| decision.is_denied()) {
            return Err(quota_rejection(config, meta, rule.disclosed, denial));
        }
        let fields = if rule.disclosed {
            fields_for(
                config.fields,
                &[(&**meta, &decision)],
                config.static_policy_field.as_ref(),
            )
        } else {
            Fields::new()
        };
        RateLimitContext::record(
            &mut parts.extensions,
            smallvec::smallvec![AppliedPolicy::new(
                Kept::clone(meta),
                decision,
                rule.disclosed
            )],
        );
        Ok(fields)
    }
}

/// [`admit`] for a layer of one fixed check counted on admission
/// ([`single_fixed`]) whose admission waits, on the body or on the limiter
/// (`key` is the request's key when it was taken before the wait): step for
/// step the same, without the per-request lists that several, selected or
/// refundable checks need.
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps its arguments twice in its state"
)]
fn admit_one<S, L, M, B, ReqBody, ResBody>(
    config: Arc<Config<L, M>>,
    body_mode: B,
    mut inner: S,
    mut parts: Parts,
    body: ReqBody,
    key: Option<SubjectKey>,
) -> impl Future<Output = Result<Response<ResBody>, S::Error>>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
    B: BodyMode<ReqBody>,
{
    async move {
        let Some(single) = single_fixed(&config) else {
            // The caller checked; a layer's rules never change after it is built.
            return Box::pin(admit(Arc::clone(&config), body_mode, inner, parts, body)).await;
        };
        let body = match body_mode.prepare(&mut parts, body).await {
            Ok(body) => body,
            Err(rejection) => return Ok(config.mapper.respond(&rejection)),
        };
        let key = match key.map_or_else(|| single.key(&config, &parts), |key| Ok(Some(key))) {
            Ok(Some(key)) => key,
            Ok(None) => return inner.call(Request::from_parts(parts, body)).await,
            Err(answer) => return Ok(answer),
        };
        let decided = config.limiter.check(&Check::new(single.policy, key)).await;
        match single.admitted(&config, &mut parts, decided) {
            Ok(fields) => {
                let mut response = inner.call(Request::from_parts(parts, body)).await?;
                prepend(response.headers_mut(), fields);
                Ok(response)
            }
            Err(answer) => Ok(answer),
        }
    }
}

/// The policy a request resolved for one check: borrowed from the layer for
/// fixed policies, owned when selected per request.
struct Resolved<'a, P> {
    policy: PolicyRef<'a, P>,
    meta: MetaRef<'a>,
    disclosed: bool,
    /// The layer's rule this check comes from.
    rule: usize,
}

enum PolicyRef<'a, P> {
    Fixed(&'a P),
    Selected(Arc<P>),
}

impl<P> std::ops::Deref for PolicyRef<'_, P> {
    type Target = P;

    fn deref(&self) -> &P {
        match self {
            Self::Fixed(policy) => policy,
            Self::Selected(policy) => policy,
        }
    }
}

enum MetaRef<'a> {
    Fixed(&'a Kept<PolicyMeta>),
    Selected(Arc<PolicyMeta>),
}

impl MetaRef<'_> {
    fn get(&self) -> &PolicyMeta {
        match self {
            Self::Fixed(meta) => meta,
            Self::Selected(meta) => meta,
        }
    }

    fn to_kept(&self) -> Kept<PolicyMeta> {
        match self {
            Self::Fixed(meta) => Kept::clone(meta),
            Self::Selected(meta) => Kept::Counted(Arc::clone(meta)),
        }
    }
}

/// Checks per layer that stay on the stack; more spill to the heap.
const INLINE_RULES: usize = 2;

type Inline<T> = SmallVec<[T; INLINE_RULES]>;

/// The positions of a group that is every check, for layers of up to 16.
const IDENTITY: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// One group of checks evaluated together (the enforced ones, or the shadow
/// ones) that consumed quota, and its receipt, for a refund.
struct Group<'a, P> {
    checks: Inline<Check<'a, P>>,
    receipt: Receipt,
}

/// The groups a request may be refunded for: empty, and never allocated,
/// unless the layer charges by outcome. On the heap, because the admission
/// future holds it while the inner service runs, and that future is copied
/// into its box on every request.
type Groups<'a, P> = Vec<Group<'a, P>>;

/// Why admission stopped before the inner service.
enum Stop<E> {
    /// Reject with this response.
    Reject(E),
    /// A backend error the failure mode admits: call the inner service
    /// without context or fields.
    FailOpen,
}

/// Admits a request to `inner` under every check of the layer.
///
/// A function returning an `async` block rather than an `async fn`: an
/// `async fn` moves its arguments into locals and keeps both in its state,
/// which every request's box must hold.
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps its arguments twice in its state"
)]
fn admit<S, L, M, B, ReqBody, ResBody>(
    config: Arc<Config<L, M>>,
    body_mode: B,
    mut inner: S,
    mut parts: Parts,
    body: ReqBody,
) -> impl Future<Output = Result<Response<ResBody>, S::Error>>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
    B: BodyMode<ReqBody>,
{
    async move {
        if config.rules.is_empty() {
            return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                policy: None,
                missing: MissingMetadata::new("the rate-limit layer has no checks configured"),
            }));
        }
        let body = match body_mode.prepare(&mut parts, body).await {
            Ok(body) => body,
            Err(rejection) => return Ok(config.mapper.respond(&rejection)),
        };

        // Resolve every policy before touching the backend: selection failures never
        // consume quota and never fail open. Checks that do not apply are left out.
        let resolved = match resolve(&config, &parts).await {
            Ok(resolved) => resolved,
            Err(response) => return Ok(response),
        };
        if resolved.is_empty() {
            // No check applies to this request: nothing to count.
            return inner.call(Request::from_parts(parts, body)).await;
        }

        let mut checks: Inline<Check<'_, L::Policy>> = SmallVec::new();
        for policy in &resolved {
            match config.rules[policy.rule]
                .extractor
                .extract(&parts, &policy.policy)
            {
                Ok(key) => match config.reserve {
                    None => checks.push(Check::new(&*policy.policy, key)),
                    Some((units, _)) => match Check::weighted(&*policy.policy, key, units) {
                        Ok(check) => checks.push(check),
                        // A check added after `reserve` whose policy cannot
                        // hold the reservation: never admitted unreserved.
                        Err(_) => {
                            return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                                policy: Some(&policy.meta.get().name),
                                missing: MissingMetadata::new(
                                    "a policy whose capacity holds the reserved cost",
                                ),
                            }));
                        }
                    },
                },
                Err(missing) => {
                    return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                        policy: Some(&policy.meta.get().name),
                        missing,
                    }));
                }
            }
        }

        let mut decisions: Inline<Option<Decision>> = SmallVec::from_elem(None, resolved.len());
        let mut groups: Groups<'_, L::Policy> = Vec::new();
        // One group, or the enforced and the shadow checks apart (boxed: rare,
        // and its state would otherwise enlarge every request's future).
        let evaluated = if is_mixed(&checks) {
            Box::pin(evaluate_mixed(
                &config,
                &resolved,
                &checks,
                &mut decisions,
                &mut groups,
            ))
            .await
        } else {
            let every: Inline<usize>;
            let positions = match IDENTITY.get(..checks.len()) {
                Some(positions) => positions,
                None => {
                    every = (0..checks.len()).collect();
                    &every
                }
            };
            evaluate_group(
                &config,
                &resolved,
                &checks,
                positions,
                &mut decisions,
                &mut groups,
            )
            .await
        };
        match evaluated {
            Ok(()) => {}
            Err(Stop::Reject(response)) => return Ok(response),
            Err(Stop::FailOpen) => return inner.call(Request::from_parts(parts, body)).await,
        }

        let mut applied: Inline<AppliedPolicy> = SmallVec::new();
        let mut reported: Inline<(&PolicyMeta, &Decision)> = SmallVec::new();
        for (policy, decision) in resolved.iter().zip(&decisions) {
            if let Some(decision) = decision {
                applied.push(AppliedPolicy::new(
                    policy.meta.to_kept(),
                    *decision,
                    policy.disclosed,
                ));
                if policy.disclosed {
                    reported.push((policy.meta.get(), decision));
                }
            }
        }
        // The precomputed `RateLimit-Policy` describes every check of the layer.
        let static_policy = config
            .static_policy_field
            .as_ref()
            .filter(|_| reported.len() == config.rules.len());
        let fields = fields_for(config.fields, &reported, static_policy);
        // What the inner service's future does not need is not kept beside it.
        drop(reported);
        drop(decisions);
        drop(checks);
        RateLimitContext::record(&mut parts.extensions, applied);

        let mut response = inner.call(Request::from_parts(parts, body)).await?;
        if let Some(charge) = &config.charge {
            if !charge.counts(response.status(), response.headers()) {
                // Boxed, so that only a refunded request pays for the refunds' state.
                Box::pin(refund_all(&**charge, &config.limiter, groups)).await;
            } else if let Some(used) = charge.used(response.extensions()) {
                Box::pin(settle_all(&**charge, &config.limiter, groups, used)).await;
            }
        }
        prepend(response.headers_mut(), fields);
        Ok(response)
    }
}

/// Gives back the receipt of every group of a request whose response does
/// not count.
async fn refund_all<L: Limiter>(
    charge: &dyn Charge<L>,
    limiter: &L,
    groups: Groups<'_, L::Policy>,
) {
    for group in groups {
        charge.refund(limiter, &group.checks, group.receipt).await;
    }
}

/// Settles every group of a request to the `used` units its response
/// reported.
async fn settle_all<L: Limiter>(
    charge: &dyn Charge<L>,
    limiter: &L,
    groups: Groups<'_, L::Policy>,
    used: u64,
) {
    for group in groups {
        charge
            .settle(limiter, &group.checks, group.receipt, used)
            .await;
    }
}

/// The policies of the checks that apply to this request, in order.
async fn resolve<'a, L, M, ResBody>(
    config: &'a Config<L, M>,
    parts: &Parts,
) -> Result<Inline<Resolved<'a, L::Policy>>, Response<ResBody>>
where
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
{
    let mut resolved = SmallVec::new();
    for (rule_index, rule) in config.rules.iter().enumerate() {
        if rule.applies.as_ref().is_some_and(|applies| !applies(parts)) {
            continue;
        }
        let policy = match &rule.source {
            PolicySource::Fixed { policy, meta } => {
                Ok((PolicyRef::Fixed(&**policy), MetaRef::Fixed(meta)))
            }
            PolicySource::Select(select) => select(parts).map(selected),
            PolicySource::SelectAsync(select) => select(parts).await.map(selected),
        };
        let (policy, meta) = match policy {
            Ok(policy) => policy,
            Err(missing) => {
                return Err(config.mapper.respond(&Rejection::MissingMetadata {
                    policy: None,
                    missing,
                }));
            }
        };
        if let (PolicyRef::Selected(selected), Some(is_shared)) = (&policy, &config.shared_check)
            && !is_shared(&config.limiter, selected)
        {
            let error = ProcessLocalStorage {
                policy: meta.get().name.as_str().to_owned(),
            };
            return Err(config
                .mapper
                .respond(&Rejection::BackendFailure { error: &error }));
        }
        resolved.push(Resolved {
            policy,
            meta,
            disclosed: rule.disclosed,
            rule: rule_index,
        });
    }
    Ok(resolved)
}

fn selected<'a, P: runlimit_core::Policy + Advertise>(
    policy: Arc<P>,
) -> (PolicyRef<'a, P>, MetaRef<'a>) {
    let meta = Arc::new(PolicyMeta::of(&*policy));
    (PolicyRef::Selected(policy), MetaRef::Selected(meta))
}

fn is_shadow<P: runlimit_core::Policy>(check: &Check<'_, P>) -> bool {
    check.policy().quota_mode() == QuotaMode::Shadow
}

/// Whether `checks` hold both enforced and shadow checks.
fn is_mixed<P: runlimit_core::Policy>(checks: &[Check<'_, P>]) -> bool {
    checks.iter().any(is_shadow) && !checks.iter().all(is_shadow)
}

/// Evaluates the enforced checks of a mixed set as one atomic batch, then,
/// if they allowed the request, the shadow checks, so a shadow check never
/// denies and never consumes for a request the enforced ones refused. Fills
/// `decisions` (by position) and `groups` (for refunds).
async fn evaluate_mixed<'a, L, M, ResBody>(
    config: &Config<L, M>,
    resolved: &[Resolved<'_, L::Policy>],
    checks: &[Check<'a, L::Policy>],
    decisions: &mut [Option<Decision>],
    groups: &mut Groups<'a, L::Policy>,
) -> Result<(), Stop<Response<ResBody>>>
where
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
{
    // Enforced first; shadow only if the enforced batch let the request through.
    for wants_shadow in [false, true] {
        let positions: Inline<usize> = (0..checks.len())
            .filter(|&position| is_shadow(&checks[position]) == wants_shadow)
            .collect();
        let group: Inline<Check<'a, L::Policy>> =
            positions.iter().map(|&position| checks[position]).collect();
        evaluate_group(config, resolved, &group, &positions, decisions, groups).await?;
    }
    Ok(())
}

/// Evaluates `group` (the checks at `positions`) as one check or one atomic
/// batch and records its decisions, or the rejection it ends in.
async fn evaluate_group<'a, L, M, ResBody>(
    config: &Config<L, M>,
    resolved: &[Resolved<'_, L::Policy>],
    group: &[Check<'a, L::Policy>],
    positions: &[usize],
    decisions: &mut [Option<Decision>],
    groups: &mut Groups<'a, L::Policy>,
) -> Result<(), Stop<Response<ResBody>>>
where
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
{
    // A layer that counts by outcome also keeps the receipt.
    let outcome = match (&config.charge, group) {
        (Some(charge), group) => charge.admit(&config.limiter, group).await,
        (None, [single]) => config
            .limiter
            .check(single)
            .await
            .map(|decision| (Outcome::Single(decision), None)),
        (None, all) => config
            .limiter
            .check_all(all)
            .await
            .map(|batch| (Outcome::Batch(batch), None)),
    };
    let (outcome, receipt) = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            if config.failure.admits_after(&error) {
                return Err(Stop::FailOpen);
            }
            return Err(Stop::Reject(
                config
                    .mapper
                    .respond(&Rejection::BackendFailure { error: &error }),
            ));
        }
    };
    if let Some(receipt) = receipt {
        groups.push(Group {
            checks: group.iter().copied().collect(),
            receipt,
        });
    }
    let denied = |index: usize, denial: &Denial| {
        let policy = &resolved[positions[index]];
        Err(Stop::Reject(quota_rejection(
            config,
            policy.meta.get(),
            policy.disclosed,
            denial,
        )))
    };
    match outcome {
        Outcome::Single(decision) => {
            if let Some(denial) = decision.denial().filter(|_| decision.is_denied()) {
                return denied(0, denial);
            }
            decisions[positions[0]] = Some(decision);
        }
        Outcome::Batch(BatchDecision::Allowed(allowed)) => {
            for (&position, decision) in positions.iter().zip(allowed) {
                decisions[position] = Some(decision);
            }
        }
        Outcome::Batch(BatchDecision::ShadowDenied { index, denial }) => {
            // A shadow-denied batch consumed nothing; only the denying check has
            // a decision to report.
            match Decision::shadow_denied(denial) {
                Ok(decision) => decisions[positions[index]] = Some(decision),
                Err(_) => return denied(index, &denial),
            }
        }
        Outcome::Batch(BatchDecision::Denied { index, denial }) => return denied(index, &denial),
        Outcome::Batch(_) => {
            // An outcome this version does not know: fail closed.
            let error = MissingMetadata::new("unrecognized batch decision");
            return Err(Stop::Reject(
                config
                    .mapper
                    .respond(&Rejection::BackendFailure { error: &error }),
            ));
        }
    }
    Ok(())
}

/// The response to a denial of `meta`'s policy, with the layer's fields for
/// it when it is disclosed.
fn quota_rejection<L: Limiter, M, ResBody>(
    config: &Config<L, M>,
    meta: &PolicyMeta,
    disclosed: bool,
    denial: &Denial,
) -> Response<ResBody>
where
    M: RejectionMapper<ResBody>,
{
    let mut response = config
        .mapper
        .respond(&rejection(&meta.name, disclosed, denial));
    if disclosed && denial.is_quota_exceeded() {
        let decision = Decision::denied(*denial);
        let fields = fields_for(config.fields, &[(meta, &decision)], None);
        prepend(response.headers_mut(), fields);
    }
    response
}

fn rejection<'a>(name: &'a PolicyName, disclosed: bool, denial: &'a Denial) -> Rejection<'a> {
    if denial.is_storage_capacity() {
        Rejection::StorageCapacity {
            policy: name,
            retry_after: denial.retry_after(),
        }
    } else {
        Rejection::QuotaExceeded {
            policy: name,
            denial,
            disclosed,
        }
    }
}
