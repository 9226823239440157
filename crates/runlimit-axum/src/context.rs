//! What the layer tells downstream handlers about admitted requests.

use runlimit_core::Decision;
use runlimit_http::draft_11::PolicyName;

/// One policy a request was admitted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedPolicy {
    name: PolicyName,
    decision: Decision,
    advertised: Option<runlimit_http::draft_11::QuotaPolicy>,
}

impl AppliedPolicy {
    pub(crate) fn new(
        name: PolicyName,
        decision: Decision,
        advertised: Option<runlimit_http::draft_11::QuotaPolicy>,
    ) -> Self {
        Self {
            name,
            decision,
            advertised,
        }
    }

    /// The policy's name, as in the `RateLimit` fields.
    #[must_use]
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The decision: allowed, or shadow-denied (enforced denials never reach
    /// downstream handlers).
    #[must_use]
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    pub(crate) fn advertised(&self) -> Option<&runlimit_http::draft_11::QuotaPolicy> {
        self.advertised.as_ref()
    }
}

/// The policies a request was admitted under, in composition order (outermost
/// layer first), inserted into request extensions.
///
/// Nested layers append to the same context instead of replacing it. The
/// context is absent on skipped and fail-open requests: treat absence as "no
/// trustworthy limiter metadata", not as "unlimited".
///
/// ```
/// use axum::Extension;
/// use runlimit_axum::RateLimitContext;
///
/// async fn handler(context: Option<Extension<RateLimitContext>>) -> String {
///     match context {
///         Some(Extension(context)) => format!("{} policies applied", context.policies().len()),
///         None => "no limiter metadata".to_owned(),
///     }
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitContext {
    policies: Vec<AppliedPolicy>,
}

impl RateLimitContext {
    /// The applied policies, outermost layer first.
    #[must_use]
    pub fn policies(&self) -> &[AppliedPolicy] {
        &self.policies
    }

    /// Whether any applied policy was shadow-denied.
    #[must_use]
    pub fn any_shadow_denied(&self) -> bool {
        self.policies
            .iter()
            .any(|policy| policy.decision.is_shadow_denied())
    }

    pub(crate) fn extend(&mut self, applied: impl IntoIterator<Item = AppliedPolicy>) {
        self.policies.extend(applied);
    }
}
