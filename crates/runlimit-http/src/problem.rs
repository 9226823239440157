//! An RFC 9457 problem-details body for quota denials.
//!
//! ```
//! use runlimit_http::{draft_11::PolicyName, problem::QuotaExceededProblem};
//!
//! let problem = QuotaExceededProblem::new(vec![PolicyName::new("auth.login/identity")?]);
//! let json = serde_json::to_value(&problem).expect("serializes");
//! assert_eq!(json["status"], 429);
//! assert_eq!(json["violated-policies"][0], "auth.login/identity");
//! # Ok::<(), runlimit_http::FieldError>(())
//! ```

use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::draft_11::PolicyName;

/// The `Content-Type` of a problem-details JSON body.
pub const CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The problem type the RateLimit draft registers for exceeded quotas.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A problem-details body saying which quota policies a request violated.
///
/// Name only policies the application is willing to disclose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaExceededProblem {
    /// The problem type URI.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short, human-readable summary.
    pub title: String,
    /// The HTTP status code, 429.
    pub status: u16,
    /// Human-readable detail, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The names of the violated policies, as in `RateLimit-Policy`.
    #[serde(rename = "violated-policies")]
    pub violated_policies: Vec<String>,
}

impl QuotaExceededProblem {
    /// A 429 problem naming `violated` policies.
    #[must_use]
    pub fn new(violated: Vec<PolicyName>) -> Self {
        Self {
            problem_type: QUOTA_EXCEEDED_TYPE.to_owned(),
            title: "Request cannot be satisfied as assigned quota has been exceeded".to_owned(),
            status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
            detail: None,
            violated_policies: violated
                .into_iter()
                .map(|name| name.as_str().to_owned())
                .collect(),
        }
    }

    /// Adds human-readable detail.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}
