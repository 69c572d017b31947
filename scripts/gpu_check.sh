#!/usr/bin/env bash
# The GPU check, on a CUDA machine with the image's Python (torch, transformers) and no network:
# installs the carried wheels (.gpu/wheels, from scripts/gpu_prepare.sh) into a private folder,
# runs the GPU test suite (`pytest -m gpu tests/gpu`: every model command on cuda against the
# CPU) and the GPU benchmark (benchmarks/bench_gpu.py), and writes one JSON of results to
# ${OUT:-.gpu/out}/gpu_check.json (plus the logs). Nothing comes from the network.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-.gpu/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 STORYEVAL_TOKENIZERS="$PWD/.gpu/tokenizers" HF_HUB_OFFLINE=1
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/storyeval-site .gpu/wheels/*.whl || exit 1
fi
export PYTHONPATH="$PWD/src:/tmp/storyeval-site${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY' > "$OUT/machine.json"
import json, torch, transformers
print(json.dumps({"card": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                  "torch": torch.__version__, "transformers": transformers.__version__}))
PY
started=$(date +%s)
# each half bounded (seconds; TESTS_LIMIT, BENCH_LIMIT): a hang still leaves the other's results
timeout "${TESTS_LIMIT:-300}" "$PY" -m pytest -m gpu tests/gpu -q -rs --durations=0 \
  -p no:cacheprovider -o addopts="" --junitxml="$OUT/tests.xml" > "$OUT/tests.log" 2>&1
tests_rc=$?
tests_s=$(( $(date +%s) - started ))
timeout "${BENCH_LIMIT:-360}" "$PY" benchmarks/bench_gpu.py --device cuda --precision bfloat16 \
  --json "$OUT/bench.json" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
bench_rc=$?
"$PY" - "$OUT" "$tests_rc" "$tests_s" "$bench_rc" <<'PY'
import json, pathlib, sys, xml.etree.ElementTree as ET
out, tests_rc, tests_s, bench_rc = pathlib.Path(sys.argv[1]), *map(int, sys.argv[2:])
summary = {"machine": json.loads((out / "machine.json").read_text()), "tests_exit": tests_rc,
           "tests_seconds": tests_s, "bench_exit": bench_rc}
if (out / "tests.xml").exists():
    suite = ET.parse(out / "tests.xml").getroot().find("testsuite")
    if suite is not None:
        summary["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
if (out / "bench.json").exists():
    summary["bench"] = json.loads((out / "bench.json").read_text())
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps(summary, indent=1))
PY
exit $(( tests_rc != 0 || bench_rc != 0 ))
