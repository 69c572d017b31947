"""The Dask engine against the local engine, on a real local Dask cluster (2 worker
processes on 127.0.0.1, started once for this module): every score, per-system row and
signature equal; resume after an interrupted run; a worker killed mid-run; generation,
perturbation and judging; partitioned readers; the missing-extra message; devices."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.corpus import read_stories

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client() -> Any:
    pytest.importorskip("distributed", reason="the dask extra")
    from storyeval.engine.dask import close, connect

    started = connect(workers=2)
    addresses = started.scheduler_info()["address"]
    assert addresses.startswith("tcp://127.0.0.1:"), addresses
    yield started
    close(started)


def _records(run: Any) -> list[tuple[Any, ...]]:
    return [(s.item_id, s.metric, repr(s.value), s.signature) for s in run.scores]


def _demo_subset(examples_dir: Path, tmp_path: Path, prompts: int = 6) -> Path:
    """The stories of the first prompts (all three systems)."""
    rows = [json.loads(line) for line in (examples_dir / "stories.jsonl").open()]
    keep = {f"s{i:03d}" for i in range(1, prompts + 1)}
    path = tmp_path / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["prompt_id"] in keep))
    return path


def _blas_threads() -> dict[str, int]:
    """The thread count of each BLAS and OpenMP library this process has loaded, by file."""
    import numpy  # noqa: F401  (loads numpy's BLAS, as scoring does)
    from threadpoolctl import threadpool_info

    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}


def test_this_process_and_the_workers_run_blas_on_as_many_threads(client):
    """The bit-for-bit comparisons below hold only when both sides split their matrix
    products alike: OpenBLAS reads its thread count once, when numpy loads, and float32
    products on 2 threads differ from those on 1 in the 8th digit."""
    here = _blas_threads()
    blas = [path for path in here if "numpy" in path] or list(here)
    assert blas, "no BLAS library is loaded"
    for address, there in client.run(_blas_threads).items():
        assert {path: there.get(path) for path in blas} == {path: here[path] for path in blas}, (
            address
        )


def test_dask_scores_equal_local_on_the_example_corpus(client, examples_dir, tmp_path):
    """The default suite (perplexity, BERTScore, MoverScore, self-BLEU, ...) on 6 stories in
    blocks of 3 (one per worker): the score records, signatures and per-system tables of the
    two engines are identical, to the last bit."""
    from storyeval.metrics.files import score_file, score_source

    path = _demo_subset(examples_dir, tmp_path, prompts=2)
    local = score_file(path, None, bootstrap=200, block_size=3)
    remote = score_source(
        path, None, client=client, bootstrap=200, block_size=3, read_blocksize=2000
    )
    assert _records(remote) == _records(local)
    assert remote.systems.equals(local.systems)
    assert {name: run.signature.render() for name, run in remote.metrics.items()} == {
        name: run.signature.render() for name, run in local.metrics.items()
    }
    assert {"perplexity", "bertscore_f", "moverscore", "self_bleu"} <= set(local.metrics)


def test_corpus_level_statistics_equal_local(client, examples_dir, tmp_path):
    """Corpus BLEU, self-BLEU and MAUVE from statistics gathered after the map (90 stories
    in blocks of 25, read in byte ranges far smaller than the file)."""
    from storyeval.metrics.files import score_file, score_source

    path = _demo_subset(examples_dir, tmp_path, prompts=30)
    names = "bleu,self_bleu,mauve,mauve_star,cross_story_repetition"
    options = {"mauve.seeds": 2}
    local = score_file(path, names, options=options, missing="skip", bootstrap=100, block_size=25)
    remote = score_source(
        path, names, client=client, options=options, missing="skip", bootstrap=100,
        block_size=25, read_blocksize=15_000,
    )  # fmt: skip
    assert remote.systems.equals(local.systems)
    assert set(local.systems.statistic) >= {"corpus_bleu", "mauve", "mauve_star"}


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_resume_skips_finished_blocks(engine, request, examples_dir, tmp_path):
    """Both executors save finished blocks and a re-run reuses them (one block lost: only
    it is scored again), with the same records."""
    from storyeval.metrics.files import score_file

    if engine == "dask":
        from storyeval.metrics.files import score_source

        client = request.getfixturevalue("client")
        run = functools.partial(score_source, client=client)
    else:
        run = score_file
    path = _demo_subset(examples_dir, tmp_path, prompts=14)  # 42 stories
    work = tmp_path / "work"
    settings = {"missing": "skip", "bootstrap": 0, "block_size": 9, "work_dir": work}
    first = run(path, "bleu,distinct1,bertscore_f", **settings)
    blocks = sorted(work.glob("*/block-*.pkl"))
    assert len(blocks) == 5 and first.timings.get("blocks_reused", 0) == 0
    blocks[2].unlink()  # as if the run had stopped before this block
    again = run(path, "bleu,distinct1,bertscore_f", **settings)
    assert again.timings["blocks_reused"] == 4
    assert _records(again) == _records(first)


def test_a_worker_killed_mid_run_is_replaced_and_nothing_is_lost(client, examples_dir, tmp_path):
    """A worker process is killed with SIGKILL while blocks are being scored: its blocks are
    computed again elsewhere, finished blocks are kept, and the result is unchanged."""
    import signal

    from storyeval.metrics.files import score_file, score_source

    path = _demo_subset(examples_dir, tmp_path)
    work = tmp_path / "work"
    result: dict[str, Any] = {}

    def run() -> None:
        result["run"] = score_source(path, "perplexity,distinct1", client=client, bootstrap=0,
                                     block_size=4, work_dir=work)  # fmt: skip

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while not list(work.glob("*/block-*.pkl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = client.run(os.getpid)
    os.kill(next(iter(pids.values())), signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive() and "run" in result
    local = score_file(path, "perplexity,distinct1", bootstrap=0, block_size=4)
    assert _records(result["run"]) == _records(local)
    client.wait_for_workers(2, timeout=60)


def test_generate_perturb_and_judge_on_the_cluster_equal_local(
    client, examples_dir, tmp_path, tiny_models
):
    """Generation and judging with a two-layer model of SmolLM2's architecture (the engines'
    equality is what is tested, not the text), perturbation with spaCy and WordNet."""
    from storyeval.generate import DecodingConfig, generate_stories, read_prompts
    from storyeval.generate.core import generate_source
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import BackendSpec
    from storyeval.judge.core import JudgeSettings, judge_blocks, judge_source
    from storyeval.perturb import perturb_stories
    from storyeval.perturb.engine import perturb_source

    human = examples_dir / "human.jsonl"
    prompts = tmp_path / "prompts.jsonl"
    rows = [json.loads(line) for line in human.open()][:3]
    prompts.write_text(
        "".join(json.dumps({"id": r["id"], "prompt": r["prompt"]}) + "\n" for r in rows)
    )
    decoding = DecodingConfig.from_options(top_p=0.9, max_new_tokens=80)
    model = str(tiny_models["lm"])
    local = generate_stories(
        read_prompts(prompts),
        model=model,
        decoding=decoding,
        seed=3,
        progress=False,
        block_size=2,
        max_words=60,
    )
    remote = generate_source(
        prompts, client=client, block_size=2, model=model, decoding=decoding, seed=3, max_words=60
    )
    assert [(s.id, s.story, s.extra["signature"]) for s in remote] == [
        (s.id, s.story, s.extra["signature"]) for s in local
    ]
    stories = read_stories(human)[:20]
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    here = perturb_stories(stories, mode="mix", seed=5)
    there = perturb_source(small, client=client, block_size=7, mode="mix", seed=5)
    assert there.records() == here.records()
    rubric = load_rubric("karpinska")
    spec = BackendSpec(models=(model,))
    judged = judge_blocks(stories[:2], rubric, spec.build(), block_size=1)
    small2 = tmp_path / "two.jsonl"
    small2.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories[:2]))
    on_cluster = judge_source(
        small2, rubric, spec, client=client, block_size=1, settings=JudgeSettings()
    )
    assert [(j.item_id, j.criterion, j.rater_id) for j in on_cluster.judgments] == [
        (j.item_id, j.criterion, j.rater_id) for j in judged.judgments
    ]
    # the judge's batched passes reduce in another order on another number of CPU threads
    # (a Dask task runs on --num-cpus threads): equal to float rounding, not to the bit
    np.testing.assert_allclose(
        [j.value for j in on_cluster.judgments], [j.value for j in judged.judgments], atol=1e-5
    )


def test_partitioned_readers_give_the_files_lines(tmp_path, examples_dir):
    """JSONL in byte ranges far smaller than the file, Parquet row groups, CSV: the same
    stories as read_stories, and a bad line reported with the file's own line number."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storyeval.base.errors import DataFileError
    from storyeval.engine.sources import plan_partitions, read_partitioned

    path = examples_dir / "stories.jsonl"
    expected = read_stories(path)
    assert len(plan_partitions(str(path), blocksize=5000)) > 10
    from storyeval.engine.sources import read_partition

    parts = [read_partition(s) for s in plan_partitions(str(path), blocksize=5000)]
    assert [s for p in parts for s in p.stories] == expected
    table = pa.Table.from_pylist(
        [{"id": s.id, "story": s.story, "prompt": s.prompt, "system": s.system} for s in expected]
    )
    parquet = tmp_path / "stories.parquet"
    pq.write_table(table, parquet, row_group_size=50)
    stories, lines = read_partitioned(str(parquet))
    assert [s.id for s in stories] == [s.id for s in expected] and lines[expected[120].id] == 121
    bad = tmp_path / "bad.jsonl"
    text = path.read_text().splitlines()
    text[150] = '{"id": "broken", "story": '
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(DataFileError, match=r"bad.jsonl:151: malformed JSON"):
        read_partitioned(str(bad)) if False else _read_small_blocks(bad)
    csv_path = tmp_path / "stories.csv"
    pd.DataFrame([s.to_dict() for s in expected[:5]]).to_csv(csv_path, index=False)
    assert [s.id for s in read_partitioned(str(csv_path))[0]] == [s.id for s in expected[:5]]


def _read_small_blocks(path: Path) -> None:
    from storyeval.engine.sources import check_partitions, plan_partitions, read_partition

    parts = [read_partition(s) for s in plan_partitions(str(path), blocksize=3000)]
    check_partitions(
        str(path), [(p.n_lines, [s.id for s in p.stories], p.lines, p.problems) for p in parts]
    )


def test_score_command_with_the_dask_engine(client, run_cli, examples_dir, tmp_path):
    """On a running cluster (``--scheduler``, which stays up after the command); the test
    below starts a local cluster from the command."""
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    args = ["score", str(examples_dir / "stories.jsonl"), "--metrics", "bleu,distinct2",
            "--skip-missing", "--no-progress", "--block-size", "70"]  # fmt: skip
    assert run_cli(*args, "-o", str(local))[0] == 0
    address = client.scheduler.address
    code, _out, err = run_cli(*args, "-o", str(remote), "--engine", "dask", "--scheduler", address)
    assert code == 0, err
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3  # the cluster is still there
    assert remote.read_bytes() == local.read_bytes()
    assert not Path(f"{remote}.blocks").exists(), (
        "the resume folder goes once the output is written"
    )


@pytest.mark.slow
def test_one_worker_per_gpu_schedules_gpu_tasks(run_cli, examples_dir, tmp_path):
    """--num-gpus on a local cluster starts one worker per GPU, each offering GPU: 1 and
    seeing only its card; tasks asking for a GPU run there (CPU models here: the placement,
    not the card, is what this checks) and give the local numbers."""
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    args = ["score", str(examples_dir / "stories.jsonl"), "--metrics", "bleu,distinct2",
            "--skip-missing", "--no-progress", "--block-size", "70"]  # fmt: skip
    assert run_cli(*args, "-o", str(local))[0] == 0
    code, _out, err = run_cli(
        *args, "-o", str(remote), "--engine", "dask", "--workers", "2", "--num-gpus", "1"
    )
    assert code == 0, err
    assert remote.read_bytes() == local.read_bytes()
    from storyeval.engine.dask import gpu_cluster

    cluster = gpu_cluster(2, 1, {})
    try:
        from distributed import Client

        with Client(cluster) as client:
            seen = client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"])
            resources = {w["resources"]["GPU"] for w in client.scheduler_info()["workers"].values()}
        assert sorted(seen.values()) == ["0", "1"] and resources == {1}
    finally:
        cluster.close()


def test_without_the_extra_the_message_names_it(run_cli, examples_dir, monkeypatch):
    import sys

    from storyeval.engine import EngineError, check_engine

    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(EngineError, match=r"pip install 'storyeval\[dask\]'"):
        check_engine("dask")
    code, _, err = run_cli("score", str(examples_dir / "stories.jsonl"), "--metrics", "bleu",
                           "--engine", "dask")  # fmt: skip
    assert code == 2 and "storyeval[dask]" in err


def test_devices_cpu_and_a_clear_error_for_one_this_machine_lacks(run_cli, examples_dir):
    from storyeval.models.devices import DeviceError, resolve_device

    assert resolve_device("cpu") == "cpu" and resolve_device("auto") in ("cpu", "cuda", "mps")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="not available here"):
            resolve_device("cuda")
        code, _, err = run_cli("score", str(examples_dir / "human.jsonl"), "--metrics",
                               "bertscore_prompt", "--device", "cuda")  # fmt: skip
        assert code == 2 and "device cuda is not available here" in err
    code, _, err = run_cli("score", str(examples_dir / "human.jsonl"), "--metrics", "distinct1",
                           "--device", "tpu")  # fmt: skip
    assert code == 2 and "device must be one of cpu, cuda" in err


def _worker_malloc(client: Any) -> list[tuple[bool, str | None]]:
    from storyeval.engine.dask import maps_every_tensor

    def settings() -> tuple[bool, str | None]:
        return maps_every_tensor(), os.environ.get("MALLOC_MMAP_THRESHOLD_")

    return list(client.run(settings).values())


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
def test_workers_keep_large_tensors_on_the_heap(client, monkeypatch):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which switches off glibc's dynamic mmap
    threshold (every tensor then mapped and faulted afresh: 1.33x slower perplexity): the
    workers of connect() get a fixed threshold; workers started with Dask's defaults (by
    hand, by a cluster manager) are reported with what to set."""
    import platform
    import warnings

    import dask
    from distributed import Client, LocalCluster

    from storyeval.engine import EngineWarning
    from storyeval.engine.dask import MMAP_THRESHOLD, check_worker_allocators

    assert _worker_malloc(client) == [(False, MMAP_THRESHOLD)] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", EngineWarning)
        check_worker_allocators(client)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    defaults = {"distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": 65536}}
    with (
        dask.config.set(defaults),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as plain,
    ):
        glibc = platform.libc_ver()[0] == "glibc"
        assert _worker_malloc(plain) == [(glibc, None)]
        if glibc:
            with pytest.warns(EngineWarning, match=f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}"):
                check_worker_allocators(plain)
