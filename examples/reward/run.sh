#!/usr/bin/env bash
# The comparison of Clark (2021), chapter 5, small enough for a 2-core CPU (about 8 minutes):
# the offline SmolLM2 fine-tuned by maximum likelihood only (MLE) against the same MLE steps
# followed by policy-gradient steps with sentence mover's similarity (SMS) as the reward, both
# continuing held-out prompts, scored by the other metrics, and a Likert study file so that
# people can rate them. Run from the repository root:  bash examples/reward/run.sh [OUT]
set -euo pipefail
out=${1:-out/reward}
mkdir -p "$out"
export PATH="$PWD/.venv/bin:$PATH"
head -n 24 examples/human.jsonl > "$out/train.jsonl"     # prompts + human continuations (references)
tail -n 12 examples/human.jsonl > "$out/test.jsonl"      # held-out prompts

storyeval train mle --prompts "$out/train.jsonl" -o "$out/mle" --steps 24 --lr 5e-5
# --beta: a KL penalty towards the MLE model; without it the policy soon learns run-on
# sentences that SMS rewards (reward hacking: the thesis mixes MLE into the loss for this reason)
storyeval train reward --prompts "$out/train.jsonl" -o "$out/sms" --metric sms \
    --mle-steps 24 --steps 20 --lr 1e-4 --beta 0.1 --max-new-tokens 64

for model in mle sms; do
  storyeval generate "$out/test.jsonl" --model "$out/$model" --system "$model" --top-p 0.9 \
      --max-new-tokens 160 --max-words 90 --max-attempts 30 --seed 1 --no-progress \
      -o "$out/$model-stories.jsonl"
done
cat "$out/mle-stories.jsonl" "$out/sms-stories.jsonl" > "$out/stories.jsonl"

# the other metrics (SMS itself too, to see the reward move on held-out prompts)
storyeval score "$out/stories.jsonl" --metrics sms,bertscore_f,rougeL,perplexity,distinct2,repeated_ngram_rate \
    --no-progress -o "$out/scores.jsonl" --per-system "$out/systems.csv"
storyeval paired "$out/scores.jsonl" --metric sms --system-a sms --system-b mle

# people: a Likert study over both systems' stories (serve it with storyeval serve)
if [ "$out" = out/reward ]; then   # the study file reads out/reward/stories.jsonl
  storyeval study check examples/reward/study.yaml
  echo "study: storyeval serve examples/reward/study.yaml"
fi
