#!/usr/bin/env bash
# Prepare what `scripts/gpu_check.sh` needs on a CUDA machine with no network (run it HERE, on a
# machine with the project set up and PyPI in reach): the offline models' tokenizers, and
# wheels (Python 3.12, x86-64) of the packages storyeval needs that the GPU image lacks.
# Everything goes into .gpu/ (ignored by git); carry it: the device tool's `carry: [".gpu"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p .gpu/tokenizers .gpu/wheels
"$BIN/python" - <<'PY'
from storyeval.models import load_causal_lm, load_encoder
load_encoder().tokenizer.save_pretrained(".gpu/tokenizers/encoder")
load_causal_lm().tokenizer.save_pretrained(".gpu/tokenizers/lm")
PY
# What the GPU image (see the device tool's KINDS.md) lacks among storyeval's needs on the paths
# the GPU tests and benchmark run; spaCy and POT (33 MB) are left out: their tests skip.
# (the versions storyeval is tested with; k-means falls back to scikit-learn without faiss)
PACKAGES=(pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
  pysbd==0.3.4 nltk==3.10.4 krippendorff==0.9.0
  pingouin==0.7.0 pandas-flavor==0.8.1
  # the Dask engine (--num-gpus) and TRL's trainers (train reward|mle)
  dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2 tornado==6.6.1
  zict==3.0.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
for package in "${PACKAGES[@]}"; do
  "$BIN/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d .gpu/wheels "$package" || echo "[gpu_prepare] no wheel for $package (its tests will skip)"
done
# rouge-score publishes only a source archive: build its (pure Python) wheel here
"$BIN/python" -m pip wheel -q --no-deps -w .gpu/wheels rouge-score==0.1.2 \
  || echo "[gpu_prepare] could not build rouge-score (ROUGE will be missing there)"
du -sh .gpu
echo "[gpu_prepare] ready: run scripts/gpu_check.sh on the GPU machine with .gpu carried"
