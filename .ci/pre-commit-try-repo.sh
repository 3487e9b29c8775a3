#!/usr/bin/env bash
# Runs this repository's pre-commit hooks the way a user's repository runs them:
# `pre-commit try-repo` on a temporary repository holding a GitHub workflow, an Azure
# Pipelines file (a top-level `steps:` list of another tool), mkdocs.yml, its own
# .pre-commit-config.yaml, one clean pipeline (locked, its prompt changed since) and one
# pipeline with a warning. Expected: step-runtime-validate passes (the warning is shown,
# every other YAML file is skipped), step-runtime-lint fails on that warning alone and
# step-runtime-lock-check fails naming the changed prompt. .ci/run runs this.
#
# One try-repo run, as each run installs the hook environment afresh (about a
# minute, mostly pip). The hooks come from a snapshot of the working tree (tracked
# and untracked, not ignored files). Needs git and pre-commit (a dev dependency);
# PYTHON names the interpreter to use.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
case "$python" in /*) ;; */*) python="$PWD/$python" ;; esac # it runs from other folders
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PRE_COMMIT_HOME="$work/cache"
git_quiet() { git -c user.name=ci -c user.email=ci@example.invalid -c init.defaultBranch=main "$@"; }
fail() { echo "FAIL: $1" >&2; exit 1; }

# 1. The hook repository: the working tree as it is now.
src="$work/step-runtime"
mkdir -p "$src"
(cd "$here" && git ls-files -z -co --exclude-standard) |
  (cd "$here" && "$python" -c '
import os, shutil, sys
dest = sys.argv[1]
for name in sys.stdin.buffer.read().decode().split("\0"):
    if name and os.path.isfile(name):  # a deleted tracked file is not copied
        os.makedirs(os.path.join(dest, os.path.dirname(name)), exist_ok=True)
        shutil.copy2(name, os.path.join(dest, name))
' "$src")
git_quiet -C "$src" init -q
git_quiet -C "$src" add -A
git_quiet -C "$src" commit -q -m snapshot
rev="$(git -C "$src" rev-parse HEAD)"

# 2. A user's repository.
repo="$work/user"
mkdir -p "$repo/.github/workflows" "$repo/pipelines/prompts"
cat >"$repo/.github/workflows/ci.yml" <<'EOF'
name: ci
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo hello
EOF
cat >"$repo/.pre-commit-config.yaml" <<EOF
repos:
  - repo: $src
    rev: $rev
    hooks:
      - id: step-runtime-validate
EOF
cat >"$repo/azure-pipelines.yml" <<'EOF'
trigger: [main]
pool: {vmImage: ubuntu-latest}
steps:
  - script: echo hello
EOF
cat >"$repo/mkdocs.yml" <<'EOF'
site_name: docs
EOF
echo "Answer from the evidence." >"$repo/pipelines/prompts/answer.md"
cat >"$repo/pipelines/qa.yaml" <<'EOF'
name: qa
settings: {entry_step_id: answer}
inputs:
  question: {type: string, maxLength: 2000}
steps:
  - id: answer
    action: call_model
    prompt_key: answer
    user_parts:
      question: {source: question}
    next: finish
  - id: finish
    action: finalize
EOF
cat >"$repo/pipelines/warn.yaml" <<'EOF'
settings: {entry_step_id: start}
steps:
  - id: start
    action: finalize
  - id: orphan
    action: finalize
EOF
# qa.yaml is locked, then its prompt changes: the lock hook must fail, naming the prompt.
(cd "$repo" && "$python" -m runtime lock pipelines/qa.yaml >/dev/null)
echo "Answer from the evidence only." >"$repo/pipelines/prompts/answer.md"
git_quiet -C "$repo" init -q
git_quiet -C "$repo" add -A

# 3. The hooks, through try-repo.
cd "$repo"
set +e
out="$("$python" -m pre_commit try-repo "$src" --ref "$rev" --all-files --verbose 2>&1)"
status=$?
set -e
echo "$out"
[ "$status" -eq 1 ] || fail "try-repo exited $status, expected 1 (lint fails on the warning)"
grep -Eq '^step-runtime validate\.+Passed$' <<<"$out" || fail "step-runtime-validate did not pass"
grep -Eq '^step-runtime lint\.+Failed$' <<<"$out" || fail "step-runtime-lint did not fail"
grep -Fq "pipelines/warn.yaml:5:9: warning UNREACHABLE_STEP" <<<"$out" ||
  fail "the warning in pipelines/warn.yaml is missing"
for other in ci.yml .pre-commit-config.yaml azure-pipelines.yml mkdocs.yml pipelines/qa.yaml:; do
  if grep -Fq "$other" <<<"$out"; then fail "$other was reported"; fi
done
grep -Fq "pipelines/prompts/answer.md:1:1: error LOCK_DRIFT prompt 'answer' changed at line 1" <<<"$out" ||
  fail "step-runtime-lock-check did not name the changed prompt of the locked pipeline"
grep -Eq '^step-runtime lock --check\.+Failed$' <<<"$out" || fail "step-runtime-lock-check did not fail"
echo "pre-commit try-repo: ok"
