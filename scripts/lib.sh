# Shared setup for the project's scripts. Sourced, never run.
#
# What the scripts install lands inside the checkout (ignored by git): npm packages in
# node_modules/, the Python venv in .venv/, caches in .cache/. The two cargo tools, which take
# minutes to build, land outside it, one folder per pinned version under
# ${XDG_CACHE_HOME:-~/.cache}/edgerunner/tools (or $EDGERUNNER_TOOLS_HOME), so that every clone on
# a machine shares them. Each install is skipped when the pinned version is already there, so a
# second run — and a fresh clone on a machine that has run this before — is fast. Compiled
# dependencies are shared the same way (seed_target / save_target below).

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WORKER_BUILD_VERSION=0.8.7

# The wasm-bindgen CLI must be exactly the version of the library in Cargo.lock.
wasm_bindgen_version() {
  awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock"
}

TOOLS_HOME="${EDGERUNNER_TOOLS_HOME:-${XDG_CACHE_HOME:-${HOME:-$ROOT}/.cache}/edgerunner/tools}"
mkdir -p "$TOOLS_HOME" 2>/dev/null && [ -w "$TOOLS_HOME" ] || TOOLS_HOME="$ROOT/.tools"
export EDGERUNNER_TOOLS_HOME="$TOOLS_HOME"
WORKER_BUILD_ROOT="$TOOLS_HOME/worker-build-$WORKER_BUILD_VERSION"
WASM_BINDGEN_ROOT="$TOOLS_HOME/wasm-bindgen-cli-$(wasm_bindgen_version)"
export PATH="$WORKER_BUILD_ROOT/bin:$WASM_BINDGEN_ROOT/bin:$ROOT/node_modules/.bin:$PATH"
# worker-build and wrangler keep caches and logs under XDG dirs: keep them in the project.
export XDG_CACHE_HOME="$ROOT/.cache"
mkdir -p "$XDG_CACHE_HOME"
export XDG_CONFIG_HOME="$ROOT/.cache/config"
# No telemetry, no request metadata lookups: the only network we need is the registries.
export WRANGLER_SEND_METRICS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false
export WRANGLER_LOG_PATH="$ROOT/.cache/wrangler-logs"
# wrangler writes a debug log per command (a full bench run: over 500 MB); a day's are kept.
find "$WRANGLER_LOG_PATH" -maxdepth 1 -name 'wrangler-*.log' -mtime +0 -delete 2>/dev/null || true

# scripts/dev records each server it starts here, one file per port (its pid and the state dir
# it serves), so that scripts/bootstrap-admin writes to the state that a running server reads.
RUN_DIR="${EDGERUNNER_RUN_DIR:-$ROOT/.cache/run}"

# The published EvalGate SDK (tests/interop) and schemathesis (tests/contract), one venv.
PYTHON_REQUIREMENTS=("$ROOT/tests/interop/requirements.txt" "$ROOT/tests/contract/requirements.txt"
  "$ROOT/tests/metrics/requirements.txt")

# Seconds since the outermost script started (nested scripts inherit the start), so that a CI
# log says where its time went.
export EDGERUNNER_T0="${EDGERUNNER_T0:-$(date +%s)}"
log() { printf '\033[1m==> [%4ss] %s\033[0m\n' "$(( $(date +%s) - EDGERUNNER_T0 ))" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

ensure_rust_target() {
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "adding rustup target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
  fi
}

# The two cargo tools are built without optimisation (opt-level 0, no debug info), but for the
# four crates of wasm-bindgen that do its work: they run a few times per build, and a release
# build of them costs three times the CPU. Measured on this 2-core machine from an empty cargo
# home, user+system CPU seconds: worker-build 397 optimised, 121 not; wasm-bindgen-cli 263
# optimised, 89 not, 143 as here. What it costs when they run: the worker build as long (its
# time is rustc and wasm-opt); the protocol's wasm32 tests 1 s more (7 s with all of
# wasm-bindgen at opt-level 0, reading the test module). Each installs as its own job.
tool_install() {
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo install --quiet "$@"
}

worker_build_current() { [ "$(worker-build --version 2>/dev/null || true)" = "$WORKER_BUILD_VERSION" ]; }

wasm_bindgen_current() {
  [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)" = "$(wasm_bindgen_version)" ]
}

ensure_worker_build() {
  if ! worker_build_current; then
    log "installing worker-build $WORKER_BUILD_VERSION into $WORKER_BUILD_ROOT (a few minutes, once per machine)"
    tool_install --root "$WORKER_BUILD_ROOT" worker-build --version "$WORKER_BUILD_VERSION" --locked
  fi
}

ensure_wasm_bindgen() {
  local want
  want="$(wasm_bindgen_version)"
  [ -n "$want" ] || die "no wasm-bindgen in Cargo.lock"
  if ! wasm_bindgen_current; then
    log "installing wasm-bindgen-cli $want into $WASM_BINDGEN_ROOT (Cargo.lock pins wasm-bindgen $want)"
    # Not --locked: the CLI's own lockfile pins crates the registry index no longer has.
    tool_install --root "$WASM_BINDGEN_ROOT" wasm-bindgen-cli --version "$want" \
      --config 'profile.release.package.wasm-bindgen-cli.opt-level=2' \
      --config 'profile.release.package.wasm-bindgen-cli-support.opt-level=2' \
      --config 'profile.release.package.walrus.opt-level=2' \
      --config 'profile.release.package.wasmparser.opt-level=2' \
      || die "could not install wasm-bindgen-cli $want; run: cargo install --root $WASM_BINDGEN_ROOT wasm-bindgen-cli --version $want"
  fi
}

ensure_cargo_tools() {
  ensure_worker_build
  ensure_wasm_bindgen
}

node_modules_current() { cmp -s "$ROOT/package-lock.json" "$ROOT/node_modules/.edgerunner-lock" 2>/dev/null; }

ensure_node_modules() {
  if ! node_modules_current; then
    log "npm ci (wrangler, workerd, binaryen, playwright-core)"
    npm ci --no-audit --no-fund --loglevel=error
    cp "$ROOT/package-lock.json" "$ROOT/node_modules/.edgerunner-lock"
  fi
}

ensure_venv() {
  local stamp="$ROOT/.venv/.edgerunner-requirements"
  if [ ! -x "$ROOT/.venv/bin/python" ]; then
    log "creating Python venv in .venv"
    python3 -m venv "$ROOT/.venv"
  fi
  if [ ! -f "$stamp" ] || ! cat "${PYTHON_REQUIREMENTS[@]}" | cmp -s - "$stamp"; then
    log "installing the pinned EvalGate SDK, schemathesis and prometheus-client into .venv"
    local requirement args=()
    for requirement in "${PYTHON_REQUIREMENTS[@]}"; do args+=(-r "$requirement"); done
    "$ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check "${args[@]}"
    cat "${PYTHON_REQUIREMENTS[@]}" > "$stamp"
  fi
}

# Local secrets for `wrangler dev`: random values, generated once, never committed; and
# EDGERUNNER_LOCAL_HOOKS=1, which marks the server as a local one (a retention pass may name
# the time it runs as; see SECURITY.md). A deployment never has it.
ensure_dev_vars() {
  if [ ! -f "$ROOT/.dev.vars" ]; then
    log "generating .dev.vars with random local secrets"
    umask 077
    {
      echo "REMOTE_RUNNER_SIGNING_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      echo "CRON_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
    } > "$ROOT/.dev.vars"
  fi
  if ! grep -q '^EDGERUNNER_LOCAL_HOOKS=' "$ROOT/.dev.vars"; then
    echo "EDGERUNNER_LOCAL_HOOKS=1" >> "$ROOT/.dev.vars"
  fi
}

# Debian's chromium for the panel's browser suite (playwright-core drives it; nothing downloads a
# browser). Installed with apt-get when missing, as CI runs as root. Sets CHROMIUM_BIN.
ensure_chromium() {
  CHROMIUM_BIN="${CHROMIUM_BIN:-$(command -v chromium || true)}"
  if [ -z "$CHROMIUM_BIN" ]; then
    [ "$(id -u)" = 0 ] || die "chromium is missing: sudo apt-get install chromium fonts-dejavu-core"
    log "installing Debian's chromium (for the panel's browser suite)"
    local packages=(chromium fonts-dejavu-core)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null; } \
      || die "apt-get could not install chromium"
    CHROMIUM_BIN="$(command -v chromium)"
  fi
  export CHROMIUM_BIN
}

# Compiled dependencies, shared by the clones on a machine: a copy of a finished run's target/
# (without incremental state) under ${XDG_CACHE_HOME:-~/.cache}/edgerunner/target-<rustc version>
# (or $EDGERUNNER_TARGET_CACHE). A fresh clone starts from it, so cargo rebuilds only this
# repository's own crates, not the ~400 crates they depend on; a checkout that already has a
# target/ is left alone. The copy is refreshed after every passing scripts/test.
target_cache_dir() {
  local base="${EDGERUNNER_TARGET_CACHE:-$(dirname "$TOOLS_HOME")}"
  printf '%s/target-%s' "$base" "$(rustc -V | tr -c 'A-Za-z0-9.\n' '-' | tr -d '\n')"
}

seed_target() {
  local cache
  case "$TOOLS_HOME" in "$ROOT"/*) return 0 ;; esac
  cache="$(target_cache_dir)"
  if [ ! -e "$ROOT/target" ] && [ -d "$cache" ]; then
    log "seeding target/ from the machine's build cache ($cache)"
    cp -a "$cache" "$ROOT/target.seeding" && mv "$ROOT/target.seeding" "$ROOT/target" \
      || { rm -rf "$ROOT/target.seeding"; log "could not copy the build cache; building from scratch"; }
  fi
}

save_target() {
  local cache tmp
  case "$TOOLS_HOME" in "$ROOT"/*) return 0 ;; esac  # no cache outside the checkout to share
  cache="$(target_cache_dir)"
  mkdir -p "$(dirname "$cache")" 2>/dev/null && [ -w "$(dirname "$cache")" ] || return 0
  tmp="$(mktemp -d "$cache.new.XXXXXX")"
  if cp -a "$ROOT/target/." "$tmp/" && rm -rf "$tmp/panel" "$tmp/tmp" \
     && find "$tmp" -type d -name incremental -prune -exec rm -rf {} +; then
    ( flock 9
      rm -rf "$cache.old"
      if [ -d "$cache" ]; then mv "$cache" "$cache.old"; fi
      mv "$tmp" "$cache"
      rm -rf "$cache.old" ) 9>"$cache.lock"
    log "saved target/ as the machine's build cache: $(du -sh "$cache" | cut -f1)"
  else
    rm -rf "$tmp"
  fi
}

# Background jobs, for steps that need neither each other nor the CPU-bound step in front (a
# tool install beside clippy, npm beside cargo): `start_job NAME COMMAND...` runs COMMAND (a
# function too, under `set -e` as here) with its output in .cache/jobs/NAME.log; `wait_job NAME`
# waits for it, prints its output and how long it ran, and fails the script when it failed.
# `stop_jobs` (in an EXIT trap) stops those still running.
declare -A JOB_PIDS=() JOB_T0=()
JOBS_DIR="$ROOT/.cache/jobs"
start_job() {
  local name="$1"; shift
  mkdir -p "$JOBS_DIR"
  rm -f "$JOBS_DIR/$name.end"
  # The EXIT trap records when it ended, failed or not (set -e ends the subshell at a failure).
  ( trap 'date +%s >"$JOBS_DIR/'"$name"'.end"' EXIT; "$@" ) >"$JOBS_DIR/$name.log" 2>&1 </dev/null &
  JOB_PIDS[$name]=$!
  JOB_T0[$name]=$(date +%s)
  log "$name: started in the background"
}

wait_job() {
  local name="$1" rc=0 took
  wait "${JOB_PIDS[$name]}" || rc=$?
  unset "JOB_PIDS[$name]"
  took=$(( $(cat "$JOBS_DIR/$name.end" 2>/dev/null || date +%s) - JOB_T0[$name] ))
  sed 's/^/    /' "$JOBS_DIR/$name.log" >&2
  [ "$rc" = 0 ] || die "$name failed after $took s (its output is above)"
  log "$name: done in $took s (background)"
}

# A process and every process under it, children first (by process id, never by name).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}

stop_jobs() {
  local name
  for name in "${!JOB_PIDS[@]}"; do kill_tree "${JOB_PIDS[$name]}"; done
  JOB_PIDS=()
}

# Steps of a script, each logged with the time it took when the next one starts (or at
# `step_done`), so that a log says where its time went.
STEP_NAME='' STEP_T0=''
step() {
  step_done
  STEP_NAME="$1" STEP_T0=$(date +%s)
  log "$1"
}

step_done() {
  if [ -n "$STEP_NAME" ]; then log "${STEP_NAME%% *}: done in $(( $(date +%s) - STEP_T0 )) s"; fi
  STEP_NAME=
}

# What every script needs to build and serve the worker. What is missing installs at once, each
# in the background (two compiles and a download), rather than one after the other.
ensure_all() {
  ensure_rust_target
  start_missing_installs
  wait_installs
}

start_missing_installs() {
  if ! worker_build_current; then start_job worker-build ensure_worker_build; fi
  if ! wasm_bindgen_current; then start_job wasm-bindgen-cli ensure_wasm_bindgen; fi
  if ! node_modules_current; then start_job npm-ci ensure_node_modules; fi
}

wait_installs() {
  local name
  for name in worker-build wasm-bindgen-cli npm-ci; do
    if [ -n "${JOB_PIDS[$name]:-}" ]; then wait_job "$name"; fi
  done
}

# A TCP port nothing listens on right now.
free_port() {
  # Not the kernel's pick (bind to port 0): that comes from the ephemeral range, where any
  # outgoing connection may take the port between this check and the server's bind (a chaos
  # restart failed so, "Address already in use", with three lanes connecting meanwhile). A port
  # below that range is never an outgoing connection's; a random one, so that servers starting
  # at once rarely pick the same, and checked free.
  python3 -c '
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
for _ in range(200):
    port = random.randrange(10000, max(low, 10001))
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("free_port: no free port found below the ephemeral range")
'
}

# Starts `wrangler dev` in the background on fresh or given state and waits until /healthz
# answers. Sets SERVER_PID, SERVER_LOG and BASE_URL. The worker must already be built (into
# build/, or $EDGERUNNER_BUILD_DIR when set).
start_local_server() {
  local state_dir="$1" port="$2" env_args=()
  if [ -n "${EDGERUNNER_DEV_VARS:-}" ]; then env_args=(--env-file "$EDGERUNNER_DEV_VARS"); fi
  SERVER_LOG="$state_dir/wrangler-dev.log"
  mkdir -p "$state_dir"
  wrangler d1 migrations apply DB --local --persist-to "$state_dir" </dev/null >"$state_dir/migrations.log" 2>&1 \
    || { cat "$state_dir/migrations.log" >&2; die "D1 migrations failed"; }
  # A copy of the config without [build]: the worker is already built, and a test server must
  # not rebuild and restart mid-run because someone saved a source file.
  awk -v root="$ROOT" -v out="${EDGERUNNER_BUILD_DIR:-build}" '
    /^\[build\]/ { skip = 1; next }
    /^\[/ { skip = 0 }
    skip { next }
    /^main = / { print "main = \"" root "/" out "/index.js\""; next }
    /^migrations_dir = / { print "migrations_dir = \"" root "/migrations\""; next }
    /^directory = "panel"/ { print "directory = \"" root "/panel\""; next }
    { print }
  ' "$ROOT/wrangler.toml" > "$state_dir/wrangler.toml"
  # Its own session and process group, so that stopping it also stops workerd. Without
  # wrangler's DevTools inspector proxy, which a test server has no use for: attached to workerd,
  # it has every console call of the Worker serialized for DevTools and handled in node.
  # Measured over 300 authenticated GETs: node 3.0 CPU-s and workerd 3.7 with it, 0.3 and 1.7
  # without, and the Worker's own time per request 9 ms against 2. The log lines are the same
  # (workerd's structured logs, read from its stdout). wrangler 4 has no flag for it; it leaves
  # the proxy out when VSCODE_INSPECTOR_OPTIONS is set (in a VS Code debug terminal, whose own
  # debugger attaches instead). scripts/dev keeps it, for a developer's DevTools.
  VSCODE_INSPECTOR_OPTIONS="${VSCODE_INSPECTOR_OPTIONS:-edgerunner-test-server}" \
    setsid node "$ROOT/node_modules/wrangler/bin/wrangler.js" dev -c "$state_dir/wrangler.toml" \
    --ip 127.0.0.1 --port "$port" --inspector-port "$(free_port)" \
    --persist-to "$state_dir" --test-scheduled --show-interactive-dev-session=false "${env_args[@]}" \
    </dev/null >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  BASE_URL="http://127.0.0.1:$port"
  wait_for_server
}

# Waits until the server started in the background (SERVER_PID, logging to SERVER_LOG) answers
# BASE_URL/healthz; dies with its log when it exits first or does not answer in time.
wait_for_server() {
  local attempt
  # Bounded wait: 120 polls of up to 1 s each.
  for attempt in $(seq 1 120); do
    if curl -fsS --max-time 1 "$BASE_URL/healthz" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      cat "$SERVER_LOG" >&2
      die "wrangler dev exited before it served"
    fi
    sleep 1
  done
  cat "$SERVER_LOG" >&2
  die "wrangler dev did not answer /healthz within 120 s"
}

# A second server, on fresh state under DIR, whose signing secret is too short: sessions there
# must answer 503 and a cron pass with its short CRON_SECRET is refused (the identity and
# open_internet suites). Exports SHORT_SECRET_BASE_URL and SHORT_SECRET_STATE_DIR; sets
# SERVER_PID (and BASE_URL) as start_local_server does.
start_short_secret_server() {
  local dir="$1"
  mkdir -p "$dir"
  printf 'REMOTE_RUNNER_SIGNING_SECRET=only-16-chars-xx\nCRON_SECRET=x\n' > "$dir/dev.vars"
  EDGERUNNER_DEV_VARS="$dir/dev.vars" start_local_server "$dir" "$(free_port)"
  # The suites talk to the Worker's own socket, not wrangler's dev proxy (see find_direct_url).
  find_direct_url
  export SHORT_SECRET_BASE_URL="${DIRECT_URL:-$BASE_URL}" SHORT_SECRET_STATE_DIR="$dir"
}

# The URL of the Worker itself inside a `start_local_server` (workerd's own socket, behind
# wrangler's dev proxy), found by asking each port the server's workerd listens on for /healthz.
# Sets DIRECT_URL (empty when none answers). The dev proxy on BASE_URL is a development aid:
# under bursts of concurrent requests it sometimes answers a POST with its own
# `503 "Your worker restarted mid-request"` although the Worker restarted nothing (measured: the
# claim race passed through the direct socket every time, and failed about one run in three
# through the proxy, on this code and on the previous release alike). Suites that make such
# bursts talk to the Worker directly, as production clients do (production has no dev proxy).
find_direct_url() {
  local port public="${BASE_URL##*:}"
  DIRECT_URL=
  for port in $(python3 - "$SERVER_PID" <<'PY'
import os, sys
session = int(sys.argv[1])
inodes = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if os.getsid(int(pid)) != session or open(f"/proc/{pid}/comm").read().strip() != "workerd":
            continue
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        continue
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        cols = row.split()
        if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
            print(int(cols[1].rsplit(":", 1)[1], 16))
PY
  ); do
    [ "$port" = "$public" ] && continue
    if [ "$(curl -fsS --max-time 2 "http://127.0.0.1:$port/healthz" 2>/dev/null)" = '{"status":"ok"}' ]; then
      DIRECT_URL="http://127.0.0.1:$port"
      return 0
    fi
  done
}

# A suite with a file tests/e2e/own-server/SUITE.vars runs against a server of its own, on fresh
# state under DIR, whose dev.vars are fresh secrets plus that file's lines (settings no other
# suite may see, such as a local test server's short archive grace):
#   with_own_server SUITE DIR COMMAND...
# runs COMMAND with BASE_URL, EDGERUNNER_STATE_DIR and EDGERUNNER_DEV_VARS naming that server,
# then stops it. Without such a file, COMMAND runs as it is.
with_own_server() {
  local suite="$1" dir="$2" vars="$ROOT/tests/e2e/own-server/$1.vars"
  shift 2
  if [ ! -f "$vars" ]; then "$@"; return; fi
  mkdir -p "$dir"
  (
    umask 077
    {
      echo "REMOTE_RUNNER_SIGNING_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      echo "CRON_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      grep -v '^#' "$vars"
    } > "$dir/dev.vars"
    EDGERUNNER_DEV_VARS="$dir/dev.vars" start_local_server "$dir" "$(free_port)"
    trap stop_local_server EXIT
    find_direct_url
    export BASE_URL="${DIRECT_URL:-$BASE_URL}" EDGERUNNER_STATE_DIR="$dir" EDGERUNNER_DEV_VARS="$dir/dev.vars"
    "$@"
  )
}

stop_local_server() {
  if [ -n "${SERVER_PID:-}" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
