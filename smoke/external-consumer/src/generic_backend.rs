//! README "Generic backend API".
#![allow(dead_code)]

use runlimit_core::{BatchDecision, Check, Limiter};

async fn admit<L: Limiter>(
    limiter: &L,
    checks: &[Check<'_, L::Policy>],
) -> Result<BatchDecision, L::Error> {
    limiter.check_all(checks).await
}
