//! The service the layer wraps around an inner service.

use std::{
    fmt,
    sync::Arc,
    task::{Context, Poll},
};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use runlimit_core::{BatchDecision, Check, Decision, Limiter};
use runlimit_http::draft_11::{
    Advertise, PolicyName, QuotaPolicy, QuotaStatus, policy_field, status_field,
};
use tower_service::Service;

use crate::{
    context::{AppliedPolicy, RateLimitContext},
    extract::MissingMetadata,
    future::ResponseFuture,
    layer::{Config, PolicySource},
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

/// The policy a request resolved for one check.
struct Resolved<P> {
    policy: Arc<P>,
    name: PolicyName,
    advertised: Option<QuotaPolicy>,
}

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
    let mut resolved = Vec::with_capacity(config.rules.len());
    for rule in &config.rules {
        let policy = match &rule.source {
            PolicySource::Fixed {
                policy,
                name,
                advertised,
            } => Ok(Resolved {
                policy: Arc::clone(policy),
                name: name.clone(),
                advertised: advertised.clone(),
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

    let mut checks = Vec::with_capacity(resolved.len());
    for (rule, policy) in config.rules.iter().zip(&resolved) {
        match rule.extractor.extract(&parts, &policy.policy) {
            Ok(key) => checks.push(Check::new(&*policy.policy, key)),
            Err(missing) => {
                return Ok(config.mapper.respond(&Rejection::MissingMetadata {
                    policy: Some(&policy.name),
                    missing,
                }));
            }
        }
    }

    let outcome = match checks.as_slice() {
        [single] => config
            .limiter
            .check(single)
            .await
            .map(|decision| BatchDecision::from_decisions(vec![decision])),
        all => config.limiter.check_all(all).await,
    };
    let applied: Vec<AppliedPolicy> = match outcome {
        Err(error) => {
            if config.failure.admits_after(&error) {
                return inner.call(Request::from_parts(parts, body)).await;
            }
            return Ok(config
                .mapper
                .respond(&Rejection::BackendFailure { error: &error }));
        }
        Ok(BatchDecision::Allowed(decisions)) => resolved
            .into_iter()
            .zip(decisions)
            .map(|(policy, decision)| AppliedPolicy::new(policy.name, decision, policy.advertised))
            .collect(),
        Ok(BatchDecision::ShadowDenied { index, denial }) => {
            // A shadow-denied batch consumed nothing; only the denying check has
            // a decision to report.
            let Ok(decision) = Decision::shadow_denied(denial) else {
                return Ok(config.mapper.respond(&Rejection::StorageCapacity {
                    policy: &resolved[index].name,
                    retry_after: denial.retry_after(),
                }));
            };
            let policy = resolved.swap_remove(index);
            vec![AppliedPolicy::new(policy.name, decision, policy.advertised)]
        }
        Ok(BatchDecision::Denied { index, denial }) => {
            let policy = &resolved[index].name;
            let rejection = if denial.is_storage_capacity() {
                Rejection::StorageCapacity {
                    policy,
                    retry_after: denial.retry_after(),
                }
            } else {
                Rejection::QuotaExceeded {
                    policy,
                    denial: &denial,
                }
            };
            return Ok(config.mapper.respond(&rejection));
        }
        Ok(_) => {
            // An outcome this version does not know: fail closed.
            let error = MissingMetadata::new("unrecognized batch decision");
            return Ok(config
                .mapper
                .respond(&Rejection::BackendFailure { error: &error }));
        }
    };

    let fields = config
        .response_fields
        .then(|| fields_for(&applied))
        .flatten();
    let mut context = parts
        .extensions
        .remove::<RateLimitContext>()
        .unwrap_or_default();
    context.extend(applied);
    parts.extensions.insert(context);
    let mut response = inner.call(Request::from_parts(parts, body)).await?;
    if let Some(fields) = fields {
        prepend(response.headers_mut(), fields);
    }
    Ok(response)
}

fn resolve<P: runlimit_core::Policy + Advertise>(policy: Arc<P>) -> Resolved<P> {
    let name = PolicyName::of(&*policy);
    let advertised = policy.quota_policy(name.clone()).ok();
    Resolved {
        policy,
        name,
        advertised,
    }
}

/// This layer's `RateLimit-Policy` and `RateLimit` values.
fn fields_for(applied: &[AppliedPolicy]) -> Option<Vec<(HeaderName, HeaderValue)>> {
    let policies: Vec<QuotaPolicy> = applied
        .iter()
        .filter_map(|policy| policy.advertised().cloned())
        .collect();
    let statuses: Vec<QuotaStatus> = applied
        .iter()
        .filter_map(|policy| {
            QuotaStatus::from_decision(policy.name().clone(), policy.decision())
                .ok()
                .flatten()
        })
        .collect();
    let fields: Vec<_> = [policy_field(&policies), status_field(&statuses)]
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    (!fields.is_empty()).then_some(fields)
}

/// Puts this layer's field lines before those inner layers added, so members
/// appear in composition order (outermost first) even though responses travel
/// inside-out.
fn prepend(headers: &mut HeaderMap, fields: Vec<(HeaderName, HeaderValue)>) {
    for (name, value) in fields {
        let existing: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
        headers.remove(&name);
        headers.append(name.clone(), value);
        for value in existing {
            headers.append(name.clone(), value);
        }
    }
}
