# shellcheck shell=bash
# Shared helpers for scripts/prepare-release.sh and scripts/publish-release.sh.
# Sourced, never executed: both scripts must agree on the crate list and on
# what a valid version looks like, so those live in exactly one place.

# Every crate that is published to crates.io, in dependency order (each crate
# only depends on crates listed before it). Crates are added to the workspace
# over time; entries whose crates/<name> directory does not exist yet are
# skipped. Crates marked `publish = false` (runlimit-conformance,
# runlimit-demo) are deliberately absent and never packaged.
RELEASE_CRATES=(
    runlimit-core
    runlimit-memory
    runlimit-postgres
    runlimit-redis
    runlimit-http
    runlimit-axum
    runlimit-client
    runlimit-sim
    runlimit-server
)

log() { echo "==> $*"; }
warn() { echo "warning: $*" >&2; }
die() {
    echo "error: $*" >&2
    exit 1
}

# True for the usual spellings of "on" in an environment variable.
is_set() {
    case "${1:-}" in
        1 | true | TRUE | yes | YES | on | ON) return 0 ;;
        *) return 1 ;;
    esac
}

# Print a command, shell-quoted so it can be copied and pasted, then run it.
run() {
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    "$@"
}

# Print a command that a real run would execute, without running it.
would_run() {
    printf '+ (dry run, not executed)'
    printf ' %q' "$@"
    printf '\n'
}

# Accept X.Y.Z with an optional pre-release (X.Y.Z-rc.1), following SemVer 2.0:
# no leading zeros in numeric parts. Build metadata (+...) is rejected because
# crates.io ignores it for ordering, which makes it a trap in release tooling.
validate_version() {
    local version=$1
    local num='(0|[1-9][0-9]*)'
    local ident='[0-9A-Za-z-]+'
    if [[ ! $version =~ ^${num}\.${num}\.${num}(-${ident}(\.${ident})*)?$ ]]; then
        die "'$version' is not a version of the form X.Y.Z or X.Y.Z-pre.N"
    fi
    if [[ $version == *-* ]]; then
        local part
        local -a parts
        IFS=. read -r -a parts <<<"${version#*-}"
        for part in "${parts[@]}"; do
            if [[ $part =~ ^0[0-9]+$ ]]; then
                die "'$version': numeric pre-release identifiers must not have leading zeros"
            fi
        done
    fi
}

# The release scripts read Cargo.toml with Python's tomllib (3.11+) rather
# than grepping it, so comments and formatting cannot fool them.
require_tomllib() {
    command -v python3 >/dev/null 2>&1 || die "python3 (3.11 or newer) is required"
    python3 -c 'import tomllib' 2>/dev/null ||
        die "python3 lacks tomllib; Python 3.11 or newer is required"
}

# [workspace.package] version from the root Cargo.toml.
workspace_version() {
    python3 - <<'PY'
import sys, tomllib
with open("Cargo.toml", "rb") as f:
    doc = tomllib.load(f)
version = doc.get("workspace", {}).get("package", {}).get("version")
if not isinstance(version, str):
    sys.exit("Cargo.toml has no [workspace.package] version")
print(version)
PY
}

# Print, one per line and in dependency order, the crates from RELEASE_CRATES
# that exist in this checkout. Uses `cargo metadata --no-deps`, which neither
# resolves dependencies nor touches the network or Cargo.lock. Fails when a
# listed crate is `publish = false`, or when a workspace member that *is*
# publishable is missing from RELEASE_CRATES (a new crate would otherwise be
# silently left out of the release).
present_release_crates() {
    local metadata
    metadata=$(cargo metadata --no-deps --format-version 1) ||
        die "cargo metadata failed"
    python3 - "$metadata" "${RELEASE_CRATES[@]}" <<'PY'
import json, os, sys
meta = json.loads(sys.argv[1])
wanted = sys.argv[2:]
members = {p["name"]: p for p in meta["packages"]}
errors = []
for name in wanted:
    if not os.path.isdir(os.path.join("crates", name)):
        continue
    pkg = members.get(name)
    if pkg is None:
        errors.append(f"crates/{name} exists but is not a workspace member")
    elif pkg.get("publish") == []:
        errors.append(f"{name} is in the release list but has `publish = false`")
    else:
        print(name)
for name, pkg in sorted(members.items()):
    if name not in wanted and pkg.get("publish") != []:
        errors.append(
            f"{name} is publishable but not in RELEASE_CRATES "
            "(scripts/release-common.sh); add it in dependency order or set `publish = false`"
        )
for e in errors:
    print(f"error: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

# Check that every given crate resolves to the expected version (i.e. it
# inherits `version.workspace = true` or was bumped by hand).
check_crate_versions() {
    local expected=$1
    shift
    local metadata
    metadata=$(cargo metadata --no-deps --format-version 1) ||
        die "cargo metadata failed"
    python3 - "$metadata" "$expected" "$@" <<'PY' || die "crate versions do not match $expected"
import json, sys
meta = json.loads(sys.argv[1])
expected = sys.argv[2]
versions = {p["name"]: p["version"] for p in meta["packages"]}
bad = [f"{n} is {versions.get(n)}" for n in sys.argv[3:] if versions.get(n) != expected]
for b in bad:
    print(f"error: {b}, expected {expected}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# CHANGELOG.md (Keep a Changelog) must have a `## [X.Y.Z]` heading, optionally
# followed by a date (`## [X.Y.Z] - 2026-05-01`).
check_changelog() {
    local version=$1
    [[ -f CHANGELOG.md ]] || die "CHANGELOG.md not found"
    awk -v h="## [$version]" 'index($0, h) == 1 { found = 1 } END { exit !found }' CHANGELOG.md ||
        die "CHANGELOG.md has no '## [$version]' heading; move the Unreleased notes under it first"
}

# True when there are no staged, unstaged or untracked (non-ignored) changes.
tree_is_clean() {
    [[ -z $(git status --porcelain --untracked-files=normal) ]]
}
