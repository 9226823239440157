#!/usr/bin/env bash
# Publish a prepared release to crates.io and tag it.
#
# Usage:
#   scripts/publish-release.sh [--dry-run] X.Y.Z[-pre.N]
#
# Run this on the release commit made after scripts/prepare-release.sh, once
# it has been pushed. Real run:
#   1. refuses a dirty tree, a HEAD that differs from its upstream branch, a
#      workspace version other than X.Y.Z, or an existing tag vX.Y.Z
#   2. for each crate in dependency order: `cargo publish -p <crate> --locked`,
#      then waits (bounded, up to ~10 minutes) until crates.io serves that
#      version, because the next crate's verification build needs it
#   3. creates the annotated tag vX.Y.Z and pushes it to the upstream remote
#
# Environment:
#   DRY_RUN=1          same as --dry-run: print every step; only runlimit-core
#                      gets a real `cargo publish --dry-run`; no tag, no push;
#                      no upstream needed, and crates.io lookup failures are
#                      warnings instead of errors
#   RESUME_RELEASE=1   continue an interrupted release: crates whose X.Y.Z is
#                      already on crates.io are checked and skipped (without
#                      it, an already published version is an error)

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

if is_set "${DRY_RUN:-}"; then dry_run=1; fi
resume=0
if is_set "${RESUME_RELEASE:-}"; then resume=1; fi

[[ -n $version ]] || {
    usage >&2
    exit 2
}
validate_version "$version"
require_tomllib
tag="v$version"

# In a dry run, problems that would stop a real run are reported and skipped.
fail_or_warn() {
    if [[ $dry_run -eq 1 ]]; then
        warn "$* (a real run would stop here)"
    else
        die "$*"
    fi
}

if [[ $dry_run -eq 1 ]]; then
    log "DRY RUN: nothing will be published, tagged or pushed"
fi
if [[ $resume -eq 1 ]]; then
    log "RESUME_RELEASE: versions already on crates.io will be verified and skipped"
fi

# cargo info is run from an empty scratch directory: inside this workspace it
# would describe our local crate instead of asking the registry.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# ------------------------------------------------------------------ git state

if ! tree_is_clean; then
    git status --short >&2
    fail_or_warn "git tree has uncommitted changes; publish only from the committed release"
fi

# The published crates and the tag must correspond to a commit that others
# can see, so HEAD has to be exactly the (freshly fetched) upstream branch.
remote=""
if [[ $dry_run -eq 1 ]]; then
    log "dry run: not checking HEAD against its upstream"
else
    branch=$(git symbolic-ref -q --short HEAD) || die "HEAD is detached; check out the release branch"
    remote=$(git config --get "branch.$branch.remote") ||
        die "branch $branch has no upstream; push it first (git push -u <remote> $branch)"
    run git fetch --quiet "$remote"
    upstream=$(git rev-parse --verify -q '@{u}') || die "branch $branch has no upstream"
    head=$(git rev-parse HEAD)
    [[ $head == "$upstream" ]] ||
        die "HEAD ($head) differs from its upstream $(git rev-parse --abbrev-ref '@{u}') ($upstream); push or pull first"
    log "HEAD $head matches $(git rev-parse --abbrev-ref '@{u}')"
fi

# An existing tag is fine only when resuming and it already marks this commit
# (the previous attempt got as far as tagging).
tag_exists=0
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    tag_commit=$(git rev-parse "$tag^{commit}")
    if [[ $resume -eq 1 && $tag_commit == "$(git rev-parse HEAD)" ]]; then
        tag_exists=1
        log "tag $tag already exists on HEAD; it will not be recreated"
    else
        fail_or_warn "tag $tag already exists (on $tag_commit)"
    fi
fi

# ------------------------------------------------------------ version checks

ws_version=$(workspace_version)
[[ $ws_version == "$version" ]] ||
    fail_or_warn "workspace version is $ws_version, not $version; run scripts/prepare-release.sh $version first"
if [[ $dry_run -eq 1 ]]; then
    (check_changelog "$version") || echo "warning: a real run would stop here"
else
    check_changelog "$version"
fi

crate_list=$(present_release_crates) || die "cannot determine the crates to release"
[[ -n $crate_list ]] || die "none of the release crates exist under crates/"
mapfile -t crates <<<"$crate_list"
if [[ $ws_version == "$version" ]]; then
    check_crate_versions "$version" "${crates[@]}"
fi
log "crates to publish, in dependency order: ${crates[*]}"

# ---------------------------------------------------------- crates.io lookups

# Prints "yes" if crate@version is on crates.io, "no" if crates.io answers
# that it is not, and "unknown" if the lookup itself failed (offline, outage).
# `cargo info` fetches the crate's sparse-index entry afresh on every call.
published_state() {
    local crate=$1 output
    if output=$(cd "$scratch" && cargo info --registry crates-io "$crate@$version" 2>&1); then
        echo yes
    elif [[ $output == *"could not find \`$crate@$version\`"* ]]; then
        echo no
    else
        echo "cargo info $crate@$version failed:" >&2
        printf '    %s\n' "${output//$'\n'/$'\n    '}" >&2
        echo unknown
    fi
}

# Wait until crates.io serves crate@version. `cargo publish` itself already
# waits a short while for this, but the index (and its CDN) can lag further
# behind; publishing the next crate before its dependency is visible would
# fail its verification build. Bounded: roughly ten minutes in total.
wait_until_indexed() {
    local crate=$1 waited=0 delay=5 limit=600
    while true; do
        if [[ $(published_state "$crate" 2>/dev/null) == yes ]]; then
            log "$crate $version is available on crates.io"
            return 0
        fi
        if ((waited >= limit)); then
            die "$crate $version still not visible on crates.io after ${limit}s; re-run later with RESUME_RELEASE=1"
        fi
        echo "    $crate $version not indexed yet; checking again in ${delay}s"
        sleep "$delay"
        waited=$((waited + delay))
        delay=$((delay * 2 > 60 ? 60 : delay * 2))
    done
}

# ----------------------------------------------------------------- publishing

for crate in "${crates[@]}"; do
    log "$crate $version"
    state=$(published_state "$crate")
    case "$state" in
        yes)
            if [[ $resume -eq 1 ]]; then
                log "$crate $version is already on crates.io; skipping (RESUME_RELEASE)"
                continue
            fi
            fail_or_warn "$crate $version is already on crates.io; set RESUME_RELEASE=1 to continue an interrupted release"
            [[ $dry_run -eq 1 ]] && continue
            ;;
        no) ;;
        *)
            fail_or_warn "could not find out whether $crate $version is on crates.io"
            ;;
    esac

    if [[ $dry_run -eq 1 ]]; then
        if [[ $crate == runlimit-core ]]; then
            # runlimit-core has no internal dependencies, so its dry run can
            # fully package and verify it against crates.io.
            run cargo publish --dry-run -p "$crate" --locked --allow-dirty
        else
            # The others depend on the new runlimit-core (and each other),
            # which is not on crates.io until the real run publishes it, so
            # `cargo publish --dry-run -p <crate>` would fail to resolve.
            would_run cargo publish -p "$crate" --locked
        fi
        echo "    (dry run) would then wait until $crate $version is indexed"
    else
        run cargo publish -p "$crate" --locked
        wait_until_indexed "$crate"
    fi
done

# ----------------------------------------------------------------------- tag

if [[ $dry_run -eq 1 ]]; then
    would_run git tag -a "$tag" -m "Runlimit $version"
    dry_remote=$(git config --get "branch.$(git symbolic-ref -q --short HEAD || echo HEAD).remote" || echo origin)
    would_run git push "$dry_remote" "refs/tags/$tag"
    log "DRY RUN complete"
else
    if [[ $tag_exists -eq 0 ]]; then
        run git tag -a "$tag" -m "Runlimit $version"
    fi
    run git push "$remote" "refs/tags/$tag"
    log "released $version: ${crates[*]}; pushed tag $tag to $remote"
fi
