#!/usr/bin/env bash
# The single test entry point for Runlimit. CI (.ci/run and
# .github/workflows/ci.yml) and the README all call this script, so a green
# local run means the same thing as a green CI run.
#
# Usage:
#   scripts/test.sh           full gate: fmt, clippy (with incompatible_msrv
#                             against rust-version), cargo-deny (installed
#                             from crates.io when missing), tests, docs,
#                             external consumer check, and the demo
#   scripts/test.sh --quick   local iteration: skips clippy and rustdoc (the two
#                             slowest steps that only report lint-level issues)
#
# Environment:
#   CARGO_TARGET_DIR                      respected if already set (cargo reads it
#                                         itself; the external consumer build goes
#                                         into a subdirectory of it).
#   RUNLIMIT_POSTGRES_TEST_DATABASE_URL   defaults to
#                                         postgres://postgres@127.0.0.1:5432/test
#   RUNLIMIT_REDIS_TEST_URL               defaults to redis://127.0.0.1:6379/
#   RUNLIMIT_REQUIRE_SERVICES=1           makes backend tests fail instead of
#                                         skipping when a service is unreachable
#                                         (CI sets it; locally tests print a skip
#                                         reason and carry on).
#
# The URL defaults apply only when the variable is unset. Setting one to the
# empty string is left alone, so a developer can opt out of a backend with e.g.
# `RUNLIMIT_REDIS_TEST_URL= scripts/test.sh`.

set -euo pipefail

usage() {
    sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

quick=0
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "scripts/test.sh: unknown argument: $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

# Always work from the repository root, wherever the script was called from,
# so relative paths (smoke/, scripts/, the default target/) are stable.
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# The cargo-deny release this gate is checked with; installed when missing.
cargo_deny_version=0.20.2

export RUNLIMIT_POSTGRES_TEST_DATABASE_URL="${RUNLIMIT_POSTGRES_TEST_DATABASE_URL-postgres://postgres@127.0.0.1:5432/test}"
export RUNLIMIT_REDIS_TEST_URL="${RUNLIMIT_REDIS_TEST_URL-redis://127.0.0.1:6379/}"

# The Redis Cluster tests need a cluster: start (or reuse) a 3-master one on
# loopback unless the caller named one. Without redis-server the cluster tests
# skip, or fail under RUNLIMIT_REQUIRE_SERVICES=1.
if [[ -z "${RUNLIMIT_REDIS_CLUSTER_TEST_NODES+x}" ]]; then
    if cluster_nodes="$(bash scripts/redis-cluster.sh start)"; then
        export RUNLIMIT_REDIS_CLUSTER_TEST_NODES="$cluster_nodes"
    else
        echo "note: could not start a local Redis Cluster; its tests will skip or fail" >&2
    fi
fi

# Announce each step before running it, and name the step that failed so a
# long CI log does not have to be scrolled to find the culprit.
current_step=""
step() {
    current_step="$*"
    echo
    echo "==> $*"
}
on_exit() {
    local status=$?
    if [[ $status -ne 0 && -n "$current_step" ]]; then
        echo >&2
        echo "==> FAILED (exit $status): $current_step" >&2
    fi
}
trap on_exit EXIT

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

if [[ $quick -eq 0 ]]; then
    step "cargo clippy --workspace --all-targets --all-features --locked -- -D warnings"
    cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
else
    echo
    echo "==> (--quick) skipping cargo clippy"
fi

# Optional features must build switched off too (clippy above runs with all).
step "cargo check -p runlimit-memory --no-default-features --locked"
cargo check -p runlimit-memory --no-default-features --locked

# The dependency graph's licenses, duplicate crates and sources, against
# deny.toml. Advisories need the RustSec database from the network, so only
# the public workflow checks them. A machine without cargo-deny gets it
# installed from crates.io first (a few minutes, once), so a fresh clone's
# first run is the same gate CI runs.
if ! cargo deny --version >/dev/null 2>&1; then
    step "cargo install --locked cargo-deny@$cargo_deny_version (not installed)"
    cargo install --locked "cargo-deny@$cargo_deny_version"
fi
step "cargo deny check licenses bans sources"
cargo deny --locked check licenses bans sources

# Plain `cargo test`: tests that need PostgreSQL or Redis print their own skip
# reason when the service is unreachable (unless RUNLIMIT_REQUIRE_SERVICES=1).
step "cargo test --workspace --all-features --locked"
cargo test --workspace --all-features --locked

if [[ $quick -eq 0 ]]; then
    step "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps --all-features --locked"
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked
    # Default features too: links to feature-gated items must not break there.
    step "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps --locked"
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
else
    echo
    echo "==> (--quick) skipping cargo doc"
fi

# The external consumer is a separate workspace that uses the crates only
# through their public API, the way a downstream user would. It gets its own
# target subdirectory so its feature/dependency resolution never invalidates
# the main workspace's build cache.
external_target_dir="${CARGO_TARGET_DIR:-target}/external-consumer"
step "cargo check --manifest-path smoke/external-consumer/Cargo.toml --locked --target-dir $external_target_dir"
cargo check --manifest-path smoke/external-consumer/Cargo.toml --locked --target-dir "$external_target_dir"

# The documented complete programs (the README's and the memory crate docs')
# must also behave as written, not just compile.
step "run the documented programs in smoke/external-consumer"
RUNLIMIT_KEY_SECRET="smoke-test secret of at least 32 bytes" \
    cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin memory_backend
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin gcra
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin sliding_window
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin topology
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin changing_policies
# The README's layer example served over TCP (unknown paths 404, a login
# admitted then 429), and its testing section's test.
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin axum_layer
cargo run --quiet --manifest-path smoke/external-consumer/Cargo.toml --locked \
    --target-dir "$external_target_dir" --bin testing_handlers

# The client example the README points to: two rate-limited APIs called by
# twenty callers each, none refused (it fails otherwise).
step "cargo run -p runlimit-client --example calling_apis"
cargo run --quiet -p runlimit-client --all-features --locked --example calling_apis

# The demo that README's first command runs.
if [[ -f scripts/run-demo.sh && -x scripts/run-demo.sh ]]; then
    step "scripts/run-demo.sh"
    scripts/run-demo.sh
fi

current_step=""
echo
echo "==> all checks passed$([[ $quick -eq 1 ]] && echo ' (quick mode: clippy and doc skipped)')"
