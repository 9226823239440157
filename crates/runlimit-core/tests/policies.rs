//! Policy validation and fingerprints.

use std::time::Duration;

use runlimit_core::{
    FixedWindowPolicy, GcraPolicy, MAX_LIMIT, MAX_WINDOW, Policy, PolicyError, PolicyField,
    PolicyId, QuotaMode, ScopeId,
};

fn id(value: &str) -> PolicyId {
    PolicyId::new(value).expect("valid id")
}

fn scope(value: &str) -> ScopeId {
    ScopeId::new(value).expect("valid scope")
}

fn fixed(limit: u64, window: Duration) -> Result<FixedWindowPolicy, PolicyError> {
    FixedWindowPolicy::new(id("auth.login"), scope("client"), limit, window)
}

fn gcra(quota: u64, period: Duration, burst: u64) -> Result<GcraPolicy, PolicyError> {
    GcraPolicy::new(id("api.read"), scope("client"), quota, period, burst)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn fixed_window_accepts_the_portable_bounds() {
    let policy = fixed(MAX_LIMIT, MAX_WINDOW).expect("bounds are inclusive");
    assert_eq!(policy.limit(), MAX_LIMIT);
    assert_eq!(policy.window(), MAX_WINDOW);
    assert_eq!(policy.window_millis(), 31_622_400_000);
    assert_eq!(policy.quota_mode(), QuotaMode::Enforce);
    let smallest = fixed(1, Duration::from_millis(1)).expect("smallest");
    assert_eq!(smallest.capacity(), 1);
}

#[test]
fn fixed_window_rejects_each_invalid_field() {
    assert_eq!(
        fixed(0, Duration::from_secs(1)),
        Err(PolicyError::CountOutOfRange {
            field: PolicyField::Limit,
            value: 0,
            maximum: MAX_LIMIT
        })
    );
    assert_eq!(
        fixed(MAX_LIMIT + 1, Duration::from_secs(1)),
        Err(PolicyError::CountOutOfRange {
            field: PolicyField::Limit,
            value: MAX_LIMIT + 1,
            maximum: MAX_LIMIT
        })
    );
    assert_eq!(
        fixed(1, Duration::ZERO),
        Err(PolicyError::DurationOutOfRange {
            field: PolicyField::Window,
            value: Duration::ZERO,
            maximum: MAX_WINDOW
        })
    );
    let too_long = MAX_WINDOW + Duration::from_millis(1);
    assert_eq!(
        fixed(1, too_long),
        Err(PolicyError::DurationOutOfRange {
            field: PolicyField::Window,
            value: too_long,
            maximum: MAX_WINDOW
        })
    );
    let fractional = Duration::from_micros(1_500);
    assert_eq!(
        fixed(1, fractional),
        Err(PolicyError::DurationNotWholeMilliseconds {
            field: PolicyField::Window,
            value: fractional
        })
    );
    assert_eq!(
        fixed(1, fractional).expect_err("fractional").to_string(),
        "window 1.5ms is not a whole number of milliseconds"
    );
}

#[test]
fn gcra_rejects_each_invalid_field() {
    let second = Duration::from_secs(1);
    for (quota, burst, field, value) in [
        (0, 1, PolicyField::Quota, 0),
        (MAX_LIMIT + 1, 1, PolicyField::Quota, MAX_LIMIT + 1),
        (1, 0, PolicyField::BurstCapacity, 0),
        (1, MAX_LIMIT + 1, PolicyField::BurstCapacity, MAX_LIMIT + 1),
    ] {
        assert_eq!(
            gcra(quota, second, burst),
            Err(PolicyError::CountOutOfRange {
                field,
                value,
                maximum: MAX_LIMIT
            })
        );
    }
    assert_eq!(
        gcra(1, Duration::ZERO, 1),
        Err(PolicyError::DurationOutOfRange {
            field: PolicyField::Period,
            value: Duration::ZERO,
            maximum: MAX_WINDOW
        })
    );
    assert_eq!(
        gcra(1, Duration::from_nanos(1_000_001), 1),
        Err(PolicyError::DurationNotWholeMilliseconds {
            field: PolicyField::Period,
            value: Duration::from_nanos(1_000_001)
        })
    );
    // One unit per 366 days with a burst of two needs 732 days to replenish.
    assert_eq!(
        gcra(1, MAX_WINDOW, 2),
        Err(PolicyError::ReplenishmentTooLong {
            replenishment: MAX_WINDOW * 2,
            maximum: MAX_WINDOW
        })
    );
    // The product of the largest burst and period overflows u64 milliseconds.
    assert!(matches!(
        gcra(1, MAX_WINDOW, MAX_LIMIT),
        Err(PolicyError::ReplenishmentTooLong { .. })
    ));
}

#[test]
fn gcra_full_replenishment_rounds_up_to_whole_milliseconds() {
    let policy = gcra(3, Duration::from_millis(10), 1).expect("valid");
    // 1 × 10 ms / 3 = 3.33… ms, reported as 4 ms.
    assert_eq!(policy.full_replenishment(), Duration::from_millis(4));
    let policy = gcra(MAX_LIMIT, MAX_WINDOW, MAX_LIMIT).expect("replenishes in one window");
    assert_eq!(policy.full_replenishment(), MAX_WINDOW);
    assert_eq!(policy.capacity(), MAX_LIMIT);
}

#[test]
fn fingerprint_changes_with_every_fingerprinted_field() {
    let window = Duration::from_secs(60);
    let base = fixed(40, window).expect("valid");
    let variants = [
        FixedWindowPolicy::new(id("auth.other"), scope("client"), 40, window),
        FixedWindowPolicy::new(id("auth.login"), scope("identity"), 40, window),
        FixedWindowPolicy::new(id("auth.login"), scope("client"), 41, window),
        FixedWindowPolicy::new(id("auth.login"), scope("client"), 40, window * 2),
    ];
    for variant in variants {
        assert_ne!(variant.expect("valid").fingerprint(), base.fingerprint());
    }

    let base = gcra(10, Duration::from_secs(1), 20).expect("valid");
    let variants = [
        gcra(11, Duration::from_secs(1), 20),
        gcra(10, Duration::from_secs(2), 20),
        gcra(10, Duration::from_secs(1), 21),
        GcraPolicy::new(
            id("api.other"),
            scope("client"),
            10,
            Duration::from_secs(1),
            20,
        ),
        GcraPolicy::new(
            id("api.read"),
            scope("other"),
            10,
            Duration::from_secs(1),
            20,
        ),
    ];
    for variant in variants {
        assert_ne!(variant.expect("valid").fingerprint(), base.fingerprint());
    }
}

#[test]
fn algorithms_never_share_a_fingerprint() {
    // Same id, scope and leading numbers: the algorithm tag keeps them apart.
    let fixed = FixedWindowPolicy::new(id("x"), scope("y"), 10, Duration::from_millis(1000))
        .expect("valid");
    let gcra =
        GcraPolicy::new(id("x"), scope("y"), 10, Duration::from_millis(1000), 1).expect("valid");
    assert_ne!(fixed.fingerprint(), gcra.fingerprint());
}

#[test]
fn quota_mode_is_not_fingerprinted() {
    let enforce = fixed(40, Duration::from_secs(60)).expect("valid");
    let shadow = enforce.clone().with_quota_mode(QuotaMode::Shadow);
    assert_eq!(shadow.quota_mode(), QuotaMode::Shadow);
    assert_eq!(shadow.fingerprint(), enforce.fingerprint());
    let gcra_enforce = gcra(10, Duration::from_secs(1), 20).expect("valid");
    let gcra_shadow = gcra_enforce.clone().with_quota_mode(QuotaMode::Shadow);
    assert_eq!(gcra_shadow.fingerprint(), gcra_enforce.fingerprint());
}

#[test]
fn fingerprint_golden_vectors() {
    // Computed independently with Python's hashlib from the documented framing.
    let fixed = fixed(40, Duration::from_secs(60)).expect("valid");
    assert_eq!(
        hex(fixed.fingerprint().as_bytes()),
        "100a4631a5762702aae1abcebdbb3d031efabdf864b14d9dac12e46e97c424fc"
    );
    let gcra = gcra(10, Duration::from_secs(1), 20).expect("valid");
    assert_eq!(
        hex(gcra.fingerprint().as_bytes()),
        "1b1888aa0922e09a0bd0fb482d530aace11040d10a89ab5999ab9df51abbbaba"
    );
    assert_eq!(
        format!("{:?}", gcra.fingerprint()),
        "PolicyFingerprint(1b1888aa…)"
    );
}

#[test]
fn debug_shows_parameters_but_not_the_fingerprint() {
    let policy = fixed(40, Duration::from_secs(60)).expect("valid");
    let shown = format!("{policy:?}");
    assert!(shown.contains("limit: 40"), "{shown}");
    assert!(!shown.contains("100a4631"), "{shown}");
}
