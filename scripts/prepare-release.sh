#!/usr/bin/env bash
# Prepare a release: bump versions, refresh lockfiles, run the full test gate
# and build the .crate files, leaving the changes uncommitted for review.
#
# Usage:
#   scripts/prepare-release.sh [--dry-run] X.Y.Z[-pre.N]
#
# What it does (real run):
#   1. checks the version, a clean git tree and a `## [X.Y.Z]` CHANGELOG heading
#   2. sets `version` in [workspace.package] of Cargo.toml and the `version`
#      of every internal path dependency in [workspace.dependencies]
#   3. refreshes Cargo.lock (and smoke/external-consumer/Cargo.lock) so the
#      `--locked` builds keep working with the new versions
#   4. runs scripts/test.sh
#   5. packages every publishable crate (`cargo package --no-verify`)
# Afterwards: review `git diff`, commit, push, then run
# scripts/publish-release.sh X.Y.Z.
#
# Environment:
#   DRY_RUN=1      same as --dry-run: edit nothing; show the Cargo.toml diff a
#                  real run would make, check CHANGELOG and crate versions,
#                  run the tests and list each crate's package contents
#   ALLOW_DIRTY=1  proceed even if the git tree has uncommitted changes
#   SKIP_TESTS=1   do not run scripts/test.sh (both modes)

set -euo pipefail

usage() {
    sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

dry_run=0
version=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        -*)
            echo "error: unknown option: $arg (try --help)" >&2
            exit 2
            ;;
        *)
            [[ -z $version ]] || {
                echo "error: more than one version given" >&2
                exit 2
            }
            version=$arg
            ;;
    esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
# shellcheck source=scripts/release-common.sh
source scripts/release-common.sh

# DRY_RUN (env) is equivalent to --dry-run; is_set comes from the helpers.
if is_set "${DRY_RUN:-}"; then dry_run=1; fi

[[ -n $version ]] || {
    usage >&2
    exit 2
}
validate_version "$version"
require_tomllib

if [[ $dry_run -eq 1 ]]; then
    log "DRY RUN: preparing $version without editing any file"
fi

# ---------------------------------------------------------------- pre-checks

if ! tree_is_clean; then
    if [[ $dry_run -eq 1 ]]; then
        warn "git tree has uncommitted changes; a real run would refuse (unless ALLOW_DIRTY=1)"
    elif is_set "${ALLOW_DIRTY:-}"; then
        warn "git tree has uncommitted changes; continuing because ALLOW_DIRTY is set"
    else
        git status --short >&2
        die "git tree has uncommitted changes; commit or stash them, or set ALLOW_DIRTY=1"
    fi
fi

if git rev-parse -q --verify "refs/tags/v$version" >/dev/null; then
    if [[ $dry_run -eq 1 ]]; then
        warn "tag v$version already exists; a real run would refuse"
    else
        die "tag v$version already exists; was $version already released?"
    fi
fi

if [[ $dry_run -eq 1 ]]; then
    # A rehearsal may precede the changelog edit: report, do not stop.
    (check_changelog "$version") || echo "warning: a real run would stop here"
else
    check_changelog "$version"
fi
log "CHANGELOG.md has a '## [$version]' section"

current_version=$(workspace_version)
log "workspace version: $current_version -> $version"

crate_list=$(present_release_crates) || die "cannot determine the crates to release"
[[ -n $crate_list ]] || die "none of the release crates exist under crates/"
mapfile -t crates <<<"$crate_list"
log "crates to package, in dependency order: ${crates[*]}"

# Every release crate must inherit the workspace version; otherwise bumping
# [workspace.package] would leave that crate behind.
check_crate_versions "$current_version" "${crates[@]}"

# ------------------------------------------------------------- version bump

# Rewrites only the relevant `version = "..."` lines, line by line, so every
# comment and all formatting in Cargo.toml survive. Afterwards both documents
# are parsed with tomllib and compared: the only differences allowed are the
# versions that were meant to change, and all of them must now be the target.
# With --check it prints a unified diff and writes nothing.
bump_manifest() {
    python3 - "$version" "$@" <<'PY'
import difflib, os, re, sys, tomllib

new_version = sys.argv[1]
check_only = "--check" in sys.argv[2:]
path = "Cargo.toml"

with open(path, encoding="utf-8") as f:
    original = f.read()
before = tomllib.loads(original)
ws = before.get("workspace", {})
if "version" not in ws.get("package", {}):
    sys.exit("error: Cargo.toml has no version in [workspace.package]")

deps = ws.get("dependencies", {})
internal = sorted(n for n, s in deps.items() if isinstance(s, dict) and "path" in s)
# Unpublished helpers are only dev-dependencies, which cargo strips on publish.
unpublished = {"runlimit-conformance", "runlimit-demo"}
internal = [n for n in internal if n not in unpublished]
missing = [n for n in internal if "version" not in deps[n]]
if missing:
    # crates.io needs a version on every dependency of a published crate.
    sys.exit(f"error: internal dependencies without a version: {', '.join(missing)}")

header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
version_kv = re.compile(r'^(\s*version\s*=\s*)"[^"]*"')
inline_dep = re.compile(r'^\s*"?([A-Za-z0-9_-]+)"?\s*=\s*\{')
inline_version = re.compile(r'(\bversion\s*=\s*)"[^"]*"')

section = None
out = []
for line in original.splitlines(keepends=True):
    m = header.match(line)
    if m:
        section = re.sub(r"\s+", "", m.group(1))
    elif section == "workspace.package":
        line = version_kv.sub(lambda m: f'{m.group(1)}"{new_version}"', line, count=1)
    elif section == "workspace.dependencies":
        m = inline_dep.match(line)
        if m and m.group(1) in internal:
            line = inline_version.sub(lambda m: f'{m.group(1)}"{new_version}"', line, count=1)
    elif section and section.startswith("workspace.dependencies."):
        # Table form: [workspace.dependencies.runlimit-core]
        if section.split(".", 2)[2].strip('"') in internal:
            line = version_kv.sub(lambda m: f'{m.group(1)}"{new_version}"', line, count=1)
    out.append(line)
updated = "".join(out)

# Verify: normalise the versions we intended to change and demand that
# nothing else differs, and that every intended version was changed.
after = tomllib.loads(updated)
a_ws = after["workspace"]
problems = []
if a_ws["package"]["version"] != new_version:
    problems.append("[workspace.package] version was not updated")
for n in internal:
    if a_ws["dependencies"][n].get("version") != new_version:
        problems.append(f"[workspace.dependencies] {n} version was not updated")
def normalised(doc):
    doc["workspace"]["package"]["version"] = "*"
    for n in internal:
        doc["workspace"]["dependencies"][n]["version"] = "*"
    return doc
if normalised(tomllib.loads(original)) != normalised(after):
    problems.append("edit changed more than the version fields")
if problems:
    sys.exit("error: refusing to write Cargo.toml: " + "; ".join(problems))

if original == updated:
    print(f"Cargo.toml already at {new_version}; nothing to change")
elif check_only:
    sys.stdout.writelines(difflib.unified_diff(
        original.splitlines(keepends=True), updated.splitlines(keepends=True),
        fromfile="a/Cargo.toml", tofile="b/Cargo.toml"))
else:
    with open(path + ".release-tmp", "w", encoding="utf-8") as f:
        f.write(updated)
    os.replace(path + ".release-tmp", path)
    print(f"Cargo.toml: set {new_version} in [workspace.package]"
          + (f" and for {', '.join(internal)}" if internal else ""))
PY
}

external_manifest=smoke/external-consumer/Cargo.toml

if [[ $dry_run -eq 1 ]]; then
    log "changes a real run would make to Cargo.toml:"
    bump_manifest --check
    would_run cargo update --workspace
    if [[ -f $external_manifest ]]; then
        would_run cargo update --workspace --manifest-path "$external_manifest"
    fi
else
    log "bumping versions"
    bump_manifest
    # Cargo.lock records the version of every workspace crate, so `--locked`
    # builds fail until it is refreshed. `--workspace` touches only our own
    # crates, never third-party dependency versions.
    run cargo update --workspace
    if [[ -f $external_manifest ]]; then
        # The external consumer is its own workspace with its own lockfile; it
        # refers to our crates by path, and `cargo update --workspace` also
        # refreshes path dependencies there.
        run cargo update --workspace --manifest-path "$external_manifest"
    fi
    check_crate_versions "$version" "${crates[@]}"
fi

# --------------------------------------------------------------------- tests

if is_set "${SKIP_TESTS:-}"; then
    warn "SKIP_TESTS is set; not running scripts/test.sh"
else
    log "running the full test gate"
    run bash scripts/test.sh
fi

# ----------------------------------------------------------------- packaging

# Why not plain `cargo package -p <crate>` per crate: packaging writes a
# Cargo.lock into the .crate, and resolving it requires every dependency to be
# available from a registry. runlimit-memory etc. depend on the *new*
# runlimit-core, which is not on crates.io yet, so a per-crate call fails. One
# `cargo package` invocation naming all crates lets cargo resolve them against
# a local overlay of the crates it is packaging in that same run.
#
# --no-verify: verification would compile every crate again from its tarball;
# scripts/test.sh has just built and tested the same sources, and the real
# verification happens per crate in `cargo publish` (scripts/publish-release.sh)
# once its dependencies are on crates.io.
# --allow-dirty: the version bump above is deliberately still uncommitted.
package_args=()
for crate in "${crates[@]}"; do
    package_args+=(-p "$crate")
done

if [[ $dry_run -eq 1 ]]; then
    log "package contents (current version $current_version)"
    for crate in "${crates[@]}"; do
        echo "--- $crate"
        run cargo package --locked --allow-dirty --list -p "$crate"
    done
    # Packaging without verification only writes under target/package; it
    # catches manifest problems (missing license, description, ...) early.
    log "trial packaging at the current version (writes only under the target directory)"
    run cargo package --locked --allow-dirty --no-verify "${package_args[@]}"
    log "DRY RUN complete: nothing was modified"
else
    log "packaging"
    run cargo package --locked --allow-dirty --no-verify "${package_args[@]}"
    log "release $version prepared; packages are in ${CARGO_TARGET_DIR:-target}/package/"
    echo "Next: review 'git diff', commit (e.g. \"Release $version\"), push, then run"
    echo "      scripts/publish-release.sh $version"
fi
