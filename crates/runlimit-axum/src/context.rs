//! What the layer tells downstream handlers about admitted requests.

use http::Extensions;
use runlimit_core::Decision;
use runlimit_http::draft_11::PolicyName;
use smallvec::SmallVec;

use crate::{kept::Kept, layer::PolicyMeta};

/// One policy a request was admitted under.
#[derive(Debug, Clone)]
pub struct AppliedPolicy {
    meta: Kept<PolicyMeta>,
    decision: Decision,
    disclosed: bool,
}

impl PartialEq for AppliedPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.meta.name == other.meta.name
            && self.decision == other.decision
            && self.disclosed == other.disclosed
    }
}

impl Eq for AppliedPolicy {}

impl AppliedPolicy {
    pub(crate) fn new(meta: Kept<PolicyMeta>, decision: Decision, disclosed: bool) -> Self {
        Self {
            meta,
            decision,
            disclosed,
        }
    }

    /// The policy's name, as in the `RateLimit` fields.
    #[must_use]
    pub fn name(&self) -> &PolicyName {
        &self.meta.name
    }

    /// The decision: allowed, or shadow-denied (enforced denials never reach
    /// downstream handlers).
    #[must_use]
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Whether the policy is disclosed to clients in response fields (see
    /// [`RateLimitLayer::withhold_fields`](crate::RateLimitLayer::withhold_fields)).
    #[must_use]
    pub fn is_disclosed(&self) -> bool {
        self.disclosed
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
    // Inline for the common one or two policies: no allocation per request.
    policies: SmallVec<[AppliedPolicy; 2]>,
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

    /// Records `applied` in a request's `extensions`, after what outer
    /// layers recorded (nested layers append).
    ///
    /// The first layer's record is one insertion, the code every request's
    /// own extensions already run (not the entry API's), so the layer adds
    /// less code per request; nested layers merge with the outer record.
    pub(crate) fn record(extensions: &mut Extensions, applied: SmallVec<[AppliedPolicy; 2]>) {
        let Some(mut outer) = extensions.insert(Self { policies: applied }) else {
            return;
        };
        let ours = extensions
            .remove::<Self>()
            .expect("this layer's record was just inserted");
        outer.policies.extend(ours.policies);
        extensions.insert(outer);
    }
}
