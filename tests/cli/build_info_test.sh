#!/usr/bin/env bash
# cli/build_info.cmake, the commit `fp8audit --version` names: a checkout's HEAD ("-dirty" with
# changed tracked files), "unknown" outside a checkout and in a directory that is only inside
# one, the commit given for a build from an archive, and a header rewritten only when it changes.
# Usage: build_info_test.sh CMAKE SCRIPT WORKDIR
set -euo pipefail
cmake=$1 script=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
commit_of() {  # SOURCE_DIR [extra -D...]: the commit the script finds
  local dir=$1; shift
  "$cmake" -DSOURCE_DIR="$dir" -DOUTPUT="$work/build_info.h" -DPRINT=1 "$@" -P "$script" 2>&1 |
    sed -n 's/^commit: //p'
}
header_commit() { sed -n 's/^#define FP8AUDIT_GIT_COMMIT "\(.*\)"$/\1/p' "$work/build_info.h"; }

mkdir "$work/plain"
[[ $(commit_of "$work/plain") == unknown ]] || fail "a plain directory: $(commit_of "$work/plain")"
[[ $(header_commit) == unknown ]] || fail "header says $(header_commit)"

repo=$work/repo
git init -q "$repo"
echo one >"$repo/file"
git -C "$repo" add file
git -C "$repo" -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -q -m one
head=$(git -C "$repo" rev-parse HEAD)
[[ $(commit_of "$repo") == "$head" ]] || fail "checkout: $(commit_of "$repo"), HEAD is $head"
[[ $(header_commit) == "$head" ]] || fail "header says $(header_commit)"
before=$(stat -c "%y %s" "$work/build_info.h")
commit_of "$repo" >/dev/null
[[ $(stat -c "%y %s" "$work/build_info.h") == "$before" ]] || fail "unchanged header rewritten"
echo untracked >"$repo/new"
[[ $(commit_of "$repo") == "$head" ]] || fail "an untracked file made it $(commit_of "$repo")"
echo two >"$repo/file"
[[ $(commit_of "$repo") == "$head-dirty" ]] || fail "changed file: $(commit_of "$repo")"
mkdir "$repo/sub"
[[ $(commit_of "$repo/sub") == unknown ]] || fail "a directory inside a checkout: $(commit_of "$repo/sub")"
[[ $(commit_of "$work/plain" -DCOMMIT=v0.1.0-7) == v0.1.0-7 ]] || fail "COMMIT not used"
if "$cmake" -DCOMMIT='x"y' -DOUTPUT="$work/bad.h" -P "$script" >/dev/null 2>&1; then
  fail "a COMMIT with a quote was accepted"
fi
echo "PASS: build_info.cmake"
