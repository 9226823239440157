//! Core values cross threads and tasks freely.

use runlimit_core::{
    BatchDecision, Check, CounterKey, Decision, Denial, FixedWindowPolicy, GcraPolicy, KeyHasher,
    PolicyFingerprint, PolicyId, PreparedKeyHasher, ScopeId, SubjectKey,
};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn core_types_are_send_and_sync() {
    assert_send_sync::<PolicyId>();
    assert_send_sync::<ScopeId>();
    assert_send_sync::<FixedWindowPolicy>();
    assert_send_sync::<GcraPolicy>();
    assert_send_sync::<PolicyFingerprint>();
    assert_send_sync::<KeyHasher>();
    assert_send_sync::<PreparedKeyHasher>();
    assert_send_sync::<SubjectKey>();
    assert_send_sync::<CounterKey>();
    assert_send_sync::<Check<'static, FixedWindowPolicy>>();
    assert_send_sync::<Check<'static, GcraPolicy>>();
    assert_send_sync::<Decision>();
    assert_send_sync::<Denial>();
    assert_send_sync::<BatchDecision>();
    assert_send_sync::<runlimit_core::PolicyError>();
    assert_send_sync::<runlimit_core::BatchError>();
}
