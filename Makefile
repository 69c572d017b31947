# The README's two commands are `make demo` and `make test`; the rest are for developers.
VENV := .venv
BIN := $(VENV)/bin
OUT := out

.PHONY: setup setup-test demo test test-fast test-gpu test-served lint format typecheck check docs bench bench-study examples cards clean

setup:
	@scripts/setup.sh

setup-test:
	@scripts/setup.sh --test

## demo: set up, then run the main job on the bundled example corpus (results in out/)
demo: setup
	$(BIN)/storyeval validate examples/stories.jsonl
	$(BIN)/storyeval validate examples/judgments.jsonl
	$(BIN)/storyeval describe examples/stories.jsonl -o $(OUT)/describe.csv
	$(BIN)/storyeval score examples/stories.jsonl -o $(OUT)/scores.jsonl --per-system $(OUT)/systems.csv
	$(BIN)/storyeval correlate --scores $(OUT)/scores.jsonl --judgments examples/judgments.jsonl -o $(OUT)/correlations.csv
	$(BIN)/storyeval agreement --judgments examples/judgments.jsonl -o $(OUT)/agreement.csv
	$(BIN)/storyeval report --scores $(OUT)/scores.jsonl --judgments examples/judgments.jsonl --stories examples/stories.jsonl -o $(OUT)/report
	$(BIN)/storyeval study check examples/studies
	$(BIN)/storyeval study statement examples/studies/likert.yaml -o $(OUT)/study-likert-statement.md
	$(BIN)/storyeval triangle plan --alpha 0.05 --beta 0.05 --pd 0.5
	$(BIN)/storyeval study analyse --judgments examples/judgments.jsonl --stories examples/stories.jsonl -o $(OUT)/study-analysis
	$(BIN)/storyeval generate examples/human.jsonl --limit 3 --top-p 0.9 --max-new-tokens 80 --max-words 60 --seed 1 --no-progress -o $(OUT)/generated.jsonl
	$(BIN)/storyeval cyoa analyse examples/cyoa/sessions.jsonl -o $(OUT)/cyoa
	$(BIN)/storyeval perturb examples/human.jsonl --mix --seed 1 -o $(OUT)/union-negatives.jsonl
	$(BIN)/storyeval train union --stories examples/human.jsonl -o $(OUT)/union --epochs 3 \
		--max-length 48 --window 2 --stride 1 --lr 1e-4 --head-lr 2e-3 --seed 1 -q
	$(BIN)/storyeval score examples/stories.jsonl --metrics union --option union.model=$(OUT)/union \
		-o $(OUT)/union-scores.jsonl --per-system $(OUT)/union-per-system.csv --no-progress
	$(BIN)/storyeval train nsp --stories examples/human.jsonl -o $(OUT)/nsp --epochs 2 -q
	$(BIN)/storyeval score examples/stories.jsonl --metrics nsp_prompt,nsp_prev --option nsp.model=$(OUT)/nsp \
		-o $(OUT)/nsp-scores.jsonl --per-system $(OUT)/nsp-per-system.csv --no-progress

## test: set up (with Chromium and PostgreSQL), then run the whole test suite
# (bytecode first: the commands, servers and Dask workers the tests start load it instead of
# each compiling the package again, which they do where PYTHONDONTWRITEBYTECODE is set)
test: setup-test
	$(BIN)/python -m compileall -q -j 0 src > /dev/null
	$(BIN)/pytest -n 2 --dist loadfile

test-fast: setup
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow"

## test-gpu: the GPU tests on this machine's CUDA card (skipped without one)
test-gpu: setup-test
	$(BIN)/pytest -m gpu tests/gpu

## test-served: the judge against a real llama.cpp server (builds it into .llama/ first, ~8 min)
test-served: setup-test
	scripts/llama_server.sh
	$(BIN)/pytest -m served tests/test_served_judge.py

lint:
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy

format:
	$(BIN)/ruff format src tests benchmarks scripts
	$(BIN)/ruff check --fix src tests benchmarks scripts

typecheck:
	$(BIN)/mypy

## check: lint, format, types, import cycles, function length, docstrings, cards and the API site (what CI runs before the tests)
check: setup-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python scripts/check_import_cycles.py
	$(BIN)/python scripts/check_function_length.py
	$(BIN)/python scripts/docstring_coverage.py
	$(BIN)/python scripts/metric_cards.py --check
	$(BIN)/python scripts/check_shape.py
	$(BIN)/mkdocs build --strict --quiet

## docs: build the API reference site into site/
docs: setup
	$(BIN)/mkdocs build --strict

bench-study: setup-test
	$(BIN)/python benchmarks/bench_study_server.py

examples: setup
	$(BIN)/python scripts/make_examples.py

## bench: speed benchmarks (ratios measured in one run)
bench: setup
	$(BIN)/python benchmarks/bench_speed.py
	$(BIN)/python benchmarks/bench_bertscore.py
	$(BIN)/python benchmarks/bench_entity_eval.py
	$(BIN)/python benchmarks/bench_suite.py

## cards: regenerate the metric cards docs/metrics/*.md from the registry
cards:
	$(BIN)/python scripts/metric_cards.py

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache
