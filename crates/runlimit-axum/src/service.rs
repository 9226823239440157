//! The service the layer wraps around an inner service.

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, header::Entry};
use runlimit_core::{BatchDecision, Check, Decision, Denial, Limiter};
use runlimit_http::draft_11::{
    Advertise, PolicyName, QuotaPolicy, RATELIMIT_POLICY, policy_field, status_field_for,
};
use smallvec::SmallVec;
use tower_service::Service;

use crate::{
    charge::Outcome,
    context::{AppliedPolicy, RateLimitContext},
    extract::MissingMetadata,
    future::ResponseFuture,
    layer::{Config, PolicyMeta, PolicySource},
    rejection::{Rejection, RejectionMapper},
};

/// The service [`RateLimitLayer`](crate::RateLimitLayer) produces.
pub struct RateLimitService<S, L: Limiter, M> {
    inner: S,
    config: Arc<Config<L, M>>,
}

impl<S, L: Limiter, M> RateLimitService<S, L, M> {
    pub(crate) fn new(inner: S, config: Arc<Config<L, M>>) -> Self {
        Self { inner, config }
    }
}

impl<S: Clone, L: Limiter, M> Clone for RateLimitService<S, L, M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, L: Limiter, M> fmt::Debug for RateLimitService<S, L, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("checks", &self.config.rules.len())
            .finish_non_exhaustive()
    }
}

impl<S, L, M, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, L, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    L: Limiter + 'static,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Tower's readiness contract: call the instance that was polled ready and
        // leave a fresh clone for the next poll_ready.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(Box::pin(admit(Arc::clone(&self.config), ready, request)))
    }
}

/// The policy a request resolved for one check: borrowed from the layer for
/// fixed policies, owned when selected per request.
struct Resolved<'a, P> {
    policy: PolicyRef<'a, P>,
    meta: MetaRef<'a>,
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
    Fixed(&'a Arc<PolicyMeta>),
    Selected(Arc<PolicyMeta>),
}

impl MetaRef<'_> {
    fn name(&self) -> &PolicyName {
        match self {
            Self::Fixed(meta) => &meta.name,
            Self::Selected(meta) => &meta.name,
        }
    }

    fn to_arc(&self) -> Arc<PolicyMeta> {
        match self {
            Self::Fixed(meta) => Arc::clone(meta),
            Self::Selected(meta) => Arc::clone(meta),
        }
    }
}

/// Rules per layer that stay on the stack; more spill to the heap.
const INLINE_RULES: usize = 2;

async fn admit<S, L, M, ReqBody, ResBody>(
    config: Arc<Config<L, M>>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    L: Limiter,
    L::Policy: Advertise + 'static,
    M: RejectionMapper<ResBody>,
{
    let (mut parts, body) = request.into_parts();
    if config.skip.as_ref().is_some_and(|skip| skip(&parts)) {
        return inner.call(Request::from_parts(parts, body)).await;
    }
    if config.rules.is_empty() {
        return Ok(config.mapper.respond(&Rejection::MissingMetadata {
            policy: None,
            missing: MissingMetadata::new("the rate-limit layer has no checks configured"),
        }));
    }

    // Resolve every policy before touching the backend: selection failures never
    // consume quota and never fail open.
    let mut resolved: SmallVec<[Resolved<'_, L::Policy>; INLINE_RULES]> = SmallVec::new();
    for rule in &config.rules {
        let policy = match &rule.source {
            PolicySource::Fixed { policy, meta } => Ok(Resolved {
                policy: PolicyRef::Fixed(&**policy),
                meta: MetaRef::Fixed(meta),
            }),
            PolicySource::Select(select) => select(&parts).map(resolve),
            PolicySource::SelectAsync(select) => select(&parts).await.map(resolve),
        };
        match policy {
            Ok(policy) => resolved.push(policy),
            Err(missing) => {
                return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                    policy: None,
                    missing,
                }));
            }
        }
    }

    let mut checks: SmallVec<[Check<'_, L::Policy>; INLINE_RULES]> = SmallVec::new();
    for (rule, policy) in config.rules.iter().zip(&resolved) {
        match rule.extractor.extract(&parts, &policy.policy) {
            Ok(key) => checks.push(Check::new(&*policy.policy, key)),
            Err(missing) => {
                return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                    policy: Some(policy.meta.name()),
                    missing,
                }));
            }
        }
    }

    // One check needs no batch; several are one atomic batch. A layer that
    // counts by outcome also keeps the receipt, and the checks it names.
    let outcome = match (&config.charge, checks.as_slice()) {
        (Some(charge), checks) => charge.admit(&config.limiter, checks).await,
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
        Ok((outcome, receipt)) => (Ok(outcome), receipt),
        Err(error) => (Err(error), None),
    };
    let applied: SmallVec<[AppliedPolicy; INLINE_RULES]> = match outcome {
        Err(error) => {
            if config.failure.admits_after(&error) {
                return inner.call(Request::from_parts(parts, body)).await;
            }
            return Ok(config
                .mapper
                .respond(&Rejection::BackendFailure { error: &error }));
        }
        Ok(Outcome::Single(decision)) => match decision.denial() {
            Some(denial) if decision.is_denied() => {
                return Ok(config
                    .mapper
                    .respond(&rejection(resolved[0].meta.name(), denial)));
            }
            _ => resolved
                .iter()
                .map(|policy| AppliedPolicy::new(policy.meta.to_arc(), decision))
                .collect(),
        },
        Ok(Outcome::Batch(BatchDecision::Allowed(decisions))) => resolved
            .iter()
            .zip(decisions)
            .map(|(policy, decision)| AppliedPolicy::new(policy.meta.to_arc(), decision))
            .collect(),
        Ok(Outcome::Batch(BatchDecision::ShadowDenied { index, denial })) => {
            // A shadow-denied batch consumed nothing; only the denying check has
            // a decision to report.
            match Decision::shadow_denied(denial) {
                Ok(decision) => {
                    std::iter::once(AppliedPolicy::new(resolved[index].meta.to_arc(), decision))
                        .collect()
                }
                Err(_) => {
                    return Ok(config
                        .mapper
                        .respond(&rejection(resolved[index].meta.name(), &denial)));
                }
            }
        }
        Ok(Outcome::Batch(BatchDecision::Denied { index, denial })) => {
            return Ok(config
                .mapper
                .respond(&rejection(resolved[index].meta.name(), &denial)));
        }
        Ok(Outcome::Batch(_)) => {
            // An outcome this version does not know: fail closed.
            let error = MissingMetadata::new("unrecognized batch decision");
            return Ok(config
                .mapper
                .respond(&Rejection::BackendFailure { error: &error }));
        }
    };

    let fields = if config.response_fields {
        fields_for(&applied, config.static_policy_field.as_ref())
    } else {
        SmallVec::new()
    };
    // Outer layers' context stays first: nested layers append.
    parts
        .extensions
        .get_or_insert_with(RateLimitContext::default)
        .extend(applied);
    let mut response = inner.call(Request::from_parts(parts, body)).await?;
    if let (Some(charge), Some(receipt)) = (&config.charge, receipt)
        && !charge.counts(response.status(), response.headers())
    {
        charge.refund(&config.limiter, &checks, receipt).await;
    }
    drop(checks);
    prepend(response.headers_mut(), fields);
    Ok(response)
}

fn rejection<'a>(name: &'a PolicyName, denial: &'a Denial) -> Rejection<'a> {
    if denial.is_storage_capacity() {
        Rejection::StorageCapacity {
            policy: name,
            retry_after: denial.retry_after(),
        }
    } else {
        Rejection::QuotaExceeded {
            policy: name,
            denial,
        }
    }
}

fn resolve<'a, P: runlimit_core::Policy + Advertise>(policy: Arc<P>) -> Resolved<'a, P> {
    let meta = PolicyMeta::of(&*policy);
    Resolved {
        policy: PolicyRef::Selected(policy),
        meta: MetaRef::Selected(meta),
    }
}

type Fields = SmallVec<[(HeaderName, HeaderValue); 2]>;

/// This layer's `RateLimit-Policy` and `RateLimit` values.
fn fields_for(applied: &[AppliedPolicy], static_policy: Option<&HeaderValue>) -> Fields {
    let mut fields = Fields::new();
    let policy = match static_policy {
        Some(value) => Some(value.clone()),
        None => {
            let advertised: Vec<QuotaPolicy> = applied
                .iter()
                .filter_map(|policy| policy.advertised().cloned())
                .collect();
            policy_field(&advertised).ok().map(|(_, value)| value)
        }
    };
    if let Some(value) = policy {
        fields.push((RATELIMIT_POLICY, value));
    }
    if let Some(field) = status_field_for(
        applied
            .iter()
            .map(|policy| (policy.name(), policy.decision())),
    ) {
        fields.push(field);
    }
    fields
}

/// Puts this layer's field lines before those inner layers added, so members
/// appear in composition order (outermost first) even though responses travel
/// inside-out.
fn prepend(headers: &mut HeaderMap, fields: Fields) {
    for (name, value) in fields {
        // One lookup in the common case, where no inner layer added the field.
        let mut entry = match headers.entry(name) {
            Entry::Vacant(vacant) => {
                vacant.insert(value);
                continue;
            }
            Entry::Occupied(occupied) => occupied,
        };
        let existing: Vec<HeaderValue> = entry.iter().cloned().collect();
        entry.insert(value);
        for value in existing {
            entry.append(value);
        }
    }
}
