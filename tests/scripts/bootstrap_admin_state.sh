#!/usr/bin/env bash
# scripts/bootstrap-admin reaches the state that the running scripts/dev serves: a server started
# with EDGERUNNER_STATE_DIR, a bootstrap run without it, and the key it prints authenticates
# there. A bootstrap told another state writes there and says plainly that this server will
# refuse its key, which it does (401). scripts/test runs this in an end-to-end lane; alone:
#   tests/scripts/bootstrap_admin_state.sh     (needs the worker build: scripts/build)
# Its own port, state and run records, so a developer's own scripts/dev is left alone.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/edgerunner-dev-state.XXXXXX")"
trap 'stop_local_server; rm -rf "$work"' EXIT
export EDGERUNNER_RUN_DIR="$work/run"
port="$(free_port)"
SERVER_LOG="$work/dev.log" BASE_URL="http://127.0.0.1:$port"
EDGERUNNER_STATE_DIR="$work/served" PORT="$port" setsid "$ROOT/scripts/dev" </dev/null >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
wait_for_server

fail() { echo "FAIL: $*" >&2; exit 1; }
key_of() { sed -n 's/.*"apiKey":"\([^"]*\)".*/\1/p' <<<"$1"; }
status_with() {
  curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $1" \
    "$BASE_URL/api/developer/api-keys/self"
}

out="$(env -u EDGERUNNER_STATE_DIR "$ROOT/scripts/bootstrap-admin" --org "dev state" 2>"$work/err")" \
  || { cat "$work/err" >&2; fail "bootstrap-admin without EDGERUNNER_STATE_DIR failed"; }
key="$(key_of "$out")"
[ -n "$key" ] || fail "bootstrap-admin printed no key: $out"
[ "$(status_with "$key")" = 200 ] || fail "the served state refused the key bootstrap-admin printed"
grep -qF "wrote to local state $work/served (the running scripts/dev)" "$work/err" \
  || fail "bootstrap-admin did not say it wrote to the served state: $(cat "$work/err")"
echo "ok - a key from bootstrap-admin without EDGERUNNER_STATE_DIR authenticates on the scripts/dev started with it"

mkdir -p "$work/other"
wrangler d1 migrations apply DB --local --persist-to "$work/other" </dev/null >"$work/migrations.log" 2>&1 \
  || { cat "$work/migrations.log" >&2; fail "migrations on a second state failed"; }
out="$(EDGERUNNER_STATE_DIR="$work/other" "$ROOT/scripts/bootstrap-admin" --org "other state" 2>"$work/err")" \
  || { cat "$work/err" >&2; fail "bootstrap-admin with another EDGERUNNER_STATE_DIR failed"; }
grep -qF "the scripts/dev on port $port serves $work/served, not $work/other: it will refuse this key (401)" "$work/err" \
  || fail "bootstrap-admin did not say the running server serves another state: $(cat "$work/err")"
[ "$(status_with "$(key_of "$out")")" = 401 ] || fail "a key written to another state was not refused"
echo "ok - a key written to another state is said to be refused, and is"

out="$(env -u EDGERUNNER_STATE_DIR "$ROOT/scripts/bootstrap-admin" --org "batch" --count 3 2>"$work/err")" \
  || { cat "$work/err" >&2; fail "bootstrap-admin --count 3 failed"; }
[ "$(grep -c '"apiKey"' <<<"$out")" = 3 ] || fail "bootstrap-admin --count 3 did not print three lines: $out"
[ "$(sed -n 's/.*"organizationId":"\([^"]*\)".*/\1/p' <<<"$out" | sort -u | wc -l)" = 3 ] \
  || fail "bootstrap-admin --count 3 printed an organization twice: $out"
while read -r line; do
  [ "$(status_with "$(key_of "$line")")" = 200 ] || fail "a key of --count 3 was refused: $line"
done <<<"$out"
env -u EDGERUNNER_STATE_DIR "$ROOT/scripts/bootstrap-admin" --org "batch" --count 51 >/dev/null 2>"$work/err" \
  && fail "bootstrap-admin --count 51 was taken"
grep -qF -- "--count N must be from 1 to 50" "$work/err" || fail "--count 51 was refused without saying why"
echo "ok - --count 3 makes three organizations, each key of its own authenticating; --count 51 is refused"
echo "3 passed, 0 failed"
