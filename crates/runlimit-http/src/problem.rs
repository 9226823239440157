//! RFC 9457 problem-details bodies: [`QuotaExceededProblem`] for quota
//! denials, and [`Problem`] for every other status an admission answers with
//! (a request the service cannot key, a body over its cap, a backend outage).
//!
//! ```
//! use http::StatusCode;
//! use runlimit_http::{draft_11::PolicyName, problem::{Problem, QuotaExceededProblem}};
//!
//! let problem = QuotaExceededProblem::new(vec![PolicyName::new("auth.login/identity")?]);
//! let json = serde_json::to_value(&problem).expect("serializes");
//! assert_eq!(json["status"], 429);
//! assert_eq!(json["violated-policies"][0], "auth.login/identity");
//!
//! let problem = Problem::new(StatusCode::BAD_REQUEST).with_detail("missing x-api-key");
//! let json = serde_json::to_value(&problem).expect("serializes");
//! assert_eq!(json["type"], "about:blank");
//! assert_eq!(json["title"], "Bad Request");
//! assert_eq!(json["status"], 400);
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

/// The problem type that adds nothing to the status code's own meaning
/// (RFC 9457, section 4.2.1), and the one a body without `type` has.
pub const ABOUT_BLANK: &str = "about:blank";

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

/// A problem-details body for any status: by default of type
/// [`ABOUT_BLANK`], titled with the status's reason phrase, as RFC 9457
/// recommends for a problem that adds no type of its own, with the detail of
/// this occurrence.
///
/// Reading one, members it does not know (extensions of other problem
/// types) are ignored, as RFC 9457 asks of consumers, and a missing `type`
/// reads as [`ABOUT_BLANK`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The problem type URI.
    #[serde(rename = "type", default = "about_blank")]
    pub problem_type: String,
    /// A short, human-readable summary of the problem type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The HTTP status code.
    pub status: u16,
    /// Human-readable explanation of this occurrence, if any. Never put a
    /// subject, a key or a backend's error text here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

fn about_blank() -> String {
    ABOUT_BLANK.to_owned()
}

impl Problem {
    /// An [`ABOUT_BLANK`] problem for `status`, titled with its reason
    /// phrase (none for a code without one).
    #[must_use]
    pub fn new(status: StatusCode) -> Self {
        Self {
            problem_type: about_blank(),
            title: status.canonical_reason().map(str::to_owned),
            status: status.as_u16(),
            detail: None,
        }
    }

    /// Adds human-readable detail.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}
