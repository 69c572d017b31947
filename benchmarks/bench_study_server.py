"""Load benchmark of the study server on loopback, a crash test, and potato side by side.

1. Throughput: ``storyeval serve --workers 2`` on a fresh database; simulated participants (a
   thread each on a keep-alive connection, plain HTTP like a browser without JavaScript)
   complete a Likert study as fast as they can, ``--concurrency`` at once. Prints judgments
   accepted per second and the latency of the submission requests (p50, p99), from the request
   to the server's acknowledgement (303); the median of ``--rounds`` rounds, each on a fresh
   database. Backends: ``sqlite`` (synchronous=FULL, the default: an acknowledged judgment
   survives a power cut), ``sqlite-normal`` (``--sqlite-sync normal``: survives a crash of the
   server, not a power cut) and ``postgresql`` (a private server with fsync on).
2. Crash: the same load on another fresh database; after ``--kill-after`` acknowledged pages
   every server process is killed with SIGKILL. Every acknowledged page must then be in the
   database, no item over its quota.
3. potato (``pip install potato-annotation``, run from ``--potato``, default the ``potato``
   command on PATH; skipped when absent): the same stories in its Likert layout (two 5-point
   schemes, url_direct login, the same caps), the same number of participants at once, each
   item posted the way its page does (an autosave per answer, then the navigation POST and the
   next page). Prints judgments per second and the ratio storyeval / potato.

Targets (issue 11): >= 500 judgments/s with p99 < 50 ms on SQLite, >= 300/s on PostgreSQL.
Bounded: at most ``--participants`` participants and ``--max-seconds`` seconds per phase.

    python benchmarks/bench_study_server.py                       # everything available
    python benchmarks/bench_study_server.py --backends sqlite --rounds 1 --potato ''
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from storyeval.human.study import load_study
from storyeval.server import study_store as store
from storyeval.server.db import Database
from storyeval.server.pgtemp import PostgresUnavailable, TemporaryPostgres, free_port
from storyeval.server.simulate import Acknowledged, KeepAliveClient, ServerProcess, StudyBrowser

REPO = Path(__file__).resolve().parent.parent
ADMIN = "benchmark-admin-token-000000"
PARTICIPANT_ITEMS = 10
RATERS = 6
STUDY = f"""
name: bench
title: Benchmark
protocol: likert
stories: stories.jsonl
criteria:
  - {{name: coherence, question: "How well do the sentences fit together?", scale: 5, labels: {{1: lowest, 5: highest}}}}
  - {{name: relevance, question: "How relevant is the story to the prompt?", scale: 5, labels: {{1: lowest, 5: highest}}}}
assignment: {{items_per_participant: {PARTICIPANT_ITEMS}, raters_per_item: {RATERS}, order: balanced}}
"""
POTATO_CONFIG = f"""
annotation_task_name: Benchmark
task_dir: .
output_annotation_dir: annotation_output/
output_annotation_format: jsonl
data_files: [data.jsonl]
item_properties: {{id_key: id, text_key: text}}
login: {{type: url_direct, url_argument: PROLIFIC_PID}}
user_config: {{allow_all_users: true}}
max_annotations_per_user: {PARTICIPANT_ITEMS}
max_annotations_per_item: {RATERS}
assignment_strategy: random
annotation_schemes:
  - {{annotation_type: likert, name: coherence, description: "How well do the sentences fit together?", min_label: lowest, max_label: highest, size: 5}}
  - {{annotation_type: likert, name: relevance, description: "How relevant is the story to the prompt?", min_label: lowest, max_label: highest, size: 5}}
"""
BACKEND_OPTIONS = {"sqlite": (), "sqlite-normal": ("--sqlite-sync", "normal"), "postgresql": ()}


def run_load(
    base: str,
    links: list[str],
    study_path: Path,
    *,
    concurrency: int,
    max_seconds: float,
    stop_after: int | None = None,
    on_stop: threading.Event | None = None,
) -> tuple[list[Acknowledged], float]:
    """``concurrency`` simulated participants at once, each a thread on its own keep-alive
    connection (a raw-socket client, so the load generator takes little of the CPU the server
    is measured with), until every link is done or ``max_seconds`` passed."""
    study = load_study(study_path)
    work: queue.Queue[int] = queue.Queue()
    for i in range(len(links)):
        work.put(i)
    acked: list[Acknowledged] = []
    lock = threading.Lock()
    deadline = time.monotonic() + max_seconds

    def record(ack: Acknowledged) -> None:
        with lock:
            acked.append(ack)
            if stop_after is not None and len(acked) >= stop_after and on_stop is not None:
                on_stop.set()

    def worker(seed: int) -> None:
        while time.monotonic() < deadline:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            with KeepAliveClient(base, timeout=30) as client:
                try:
                    StudyBrowser(client, study, seed=seed * 1000 + i, on_acknowledged=record).run(
                        links[i]
                    )
                except (OSError, RuntimeError):
                    return  # the server went away (crash phase)

    return _threads(worker, concurrency, max_seconds), acked


def _threads(worker: Any, count: int, max_seconds: float) -> float:
    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max_seconds + 60)
    return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _url(backend: str, folder: Path, tag: str, pg: TemporaryPostgres | None) -> str:
    if backend.startswith("sqlite"):
        return f"sqlite:///{folder / f'{backend}-{tag}.sqlite3'}"
    assert pg is not None
    return pg.create_database(f"bench_{tag}".replace("-", "_"))


def _server(
    backend: str, url: str, folder: Path, tag: str, args: argparse.Namespace
) -> ServerProcess:
    return ServerProcess(
        folder / "bench.yaml",
        url,
        folder / f"{backend}-{tag}.log",
        links=args.participants,
        admin_token=ADMIN,
        workers=args.workers,
        extra=BACKEND_OPTIONS[backend],
    )


def load_round(
    backend: str, args: argparse.Namespace, folder: Path, pg: TemporaryPostgres | None, k: int
) -> dict[str, Any]:
    url = _url(backend, folder, f"load{k}", pg)
    server = _server(backend, url, folder, f"load{k}", args)
    try:
        elapsed, acked = run_load(
            server.base,
            server.links,
            folder / "bench.yaml",
            concurrency=args.concurrency,
            max_seconds=args.max_seconds,
        )
    finally:
        server.stop()
    latencies = [a.latency_s for a in acked]
    db = Database(url)
    with db.read() as conn:
        stored, _ = store.stored_and_done_slots(conn)
        quota = store.max_raters_per_item(conn, "bench")
    db.dispose()
    return {
        "pages": len(acked),
        "judgments": len(acked) * 2,
        "seconds": round(elapsed, 2),
        "judgments_per_s": round(len(acked) * 2 / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * percentile(latencies, 99), 1) if latencies else None,
        "lost": len({a.slot_id for a in acked} - stored),
        "max_raters_per_item": quota,
    }


def kill_round(
    backend: str, args: argparse.Namespace, folder: Path, pg: TemporaryPostgres | None
) -> dict[str, Any]:
    url = _url(backend, folder, "kill", pg)
    server = _server(backend, url, folder, "kill", args)
    reached = threading.Event()

    def kill_when_reached() -> None:
        reached.wait(timeout=args.max_seconds)
        server.kill()

    killer = threading.Thread(target=kill_when_reached)
    killer.start()
    _, acked = run_load(
        server.base,
        server.links,
        folder / "bench.yaml",
        concurrency=args.concurrency,
        max_seconds=args.max_seconds,
        stop_after=args.kill_after,
        on_stop=reached,
    )
    killer.join()
    server.stop()
    db = Database(url)
    with db.read() as conn:
        stored, done = store.stored_and_done_slots(conn)
        quota = store.max_raters_per_item(conn, "bench")
    db.dispose()
    acked_ids = {a.slot_id for a in acked}
    return {
        "kill_acknowledged_pages": len(acked_ids),
        "kill_stored_pages": len(stored),
        "kill_lost_acknowledged": len(acked_ids - stored),
        "kill_stored_but_unacknowledged": len(stored - acked_ids),
        "kill_consistent": stored == done and quota <= RATERS,
    }


def bench(
    backend: str, args: argparse.Namespace, folder: Path, pg: TemporaryPostgres | None
) -> dict[str, Any]:
    rounds = [load_round(backend, args, folder, pg, k) for k in range(args.rounds)]
    middle = sorted(rounds, key=lambda r: r["judgments_per_s"])[len(rounds) // 2]
    result: dict[str, Any] = {"backend": backend, "rounds": len(rounds), **middle}
    result["judgments_per_s_rounds"] = [r["judgments_per_s"] for r in rounds]
    result["p99_ms_rounds"] = [r["p99_ms"] for r in rounds]
    result["lost"] = sum(r["lost"] for r in rounds)
    result["max_raters_per_item"] = max(r["max_raters_per_item"] for r in rounds)
    result.update(kill_round(backend, args, folder, pg))
    return result


# ----------------------------------------------------------------------------- potato


def potato_round(potato: str, args: argparse.Namespace, folder: Path) -> dict[str, Any] | None:
    """The same load on potato; ``None`` when it does not start."""
    task = folder / "potato"
    shutil.rmtree(task, ignore_errors=True)
    task.mkdir()
    with (
        open(REPO / "examples" / "stories.jsonl", encoding="utf-8") as source,
        open(task / "data.jsonl", "w", encoding="utf-8") as target,
    ):
        for line in source:
            story = json.loads(line)
            text = (story.get("prompt", "") + "\n\n" + story["story"]).strip()
            target.write(json.dumps({"id": story["id"], "text": text}) + "\n")
    (task / "config.yaml").write_text(POTATO_CONFIG, encoding="utf-8")
    port = free_port()
    log = open(task / "potato.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [potato, "start", "config.yaml", "-p", str(port), "--host", "127.0.0.1"],
        cwd=task,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with KeepAliveClient(base, timeout=2) as probe:
                    if probe.get("/").status_code in (200, 302):
                        break
            except OSError:
                time.sleep(0.5)
        else:
            print(f"potato: did not start, see {task / 'potato.log'}")
            return None
        return _potato_load(base, args)
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)
        log.close()


def _potato_load(base: str, args: argparse.Namespace) -> dict[str, Any]:
    work: queue.Queue[int] = queue.Queue()
    for i in range(args.participants):
        work.put(i)
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + args.max_seconds
    instance = re.compile(r'name="instance_id" type="hidden" value="([^"]*)"')

    def worker(seed: int) -> None:
        while time.monotonic() < deadline:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            with KeepAliveClient(base, timeout=30) as client:
                page = client.get(f"/?PROLIFIC_PID=bench{i}", follow_redirects=True)
                for _ in range(PARTICIPANT_ITEMS + 2):
                    found = instance.search(page.text)
                    if found is None:
                        break
                    item = found.group(1)
                    started = time.perf_counter()
                    answers: dict[str, str] = {}
                    for schema, value in (("coherence", "3"), ("relevance", "4")):
                        answers[f"{schema}:{value}"] = value  # one autosave per click
                        client.post_json(
                            "/updateinstance",
                            {"instance_id": item, "annotations": dict(answers)},
                        )
                    client.post_json(
                        "/annotate",
                        {"action": "next_instance", "instance_id": item},
                        headers={"X-Potato-Navigation": "1"},
                    )
                    with lock:
                        latencies.append(time.perf_counter() - started)
                    page = client.get("/annotate", follow_redirects=True)

    elapsed = _threads(worker, args.concurrency, args.max_seconds)
    items = len(latencies)
    return {
        "items": items,
        "judgments": items * 2,
        "seconds": round(elapsed, 2),
        "judgments_per_s": round(items * 2 / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * percentile(latencies, 99), 1) if latencies else None,
    }


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,sqlite-normal,postgresql")
    parser.add_argument(
        "--participants", type=int, default=108, help="108 x 10 pages = every slot of the study"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--rounds", type=int, default=3, help="load rounds; the median is shown")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument(
        "--kill-after", type=int, default=150, help="acknowledged pages before SIGKILL"
    )
    parser.add_argument(
        "--potato",
        default=shutil.which("potato") or "",
        help="the potato command (pip install potato-annotation); '' skips the comparison",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="storyeval-bench-"))
    shutil.copy(REPO / "examples" / "stories.jsonl", folder / "stories.jsonl")
    (folder / "bench.yaml").write_text(STUDY, encoding="utf-8")
    study = load_study(folder / "bench.yaml")
    print(
        f"study: {len(study.items)} items x {study.raters_per_item} raters = "
        f"{len(study.items) * study.raters_per_item} pages, {len(study.criteria)} criteria each; "
        f"{args.participants} participants, {args.concurrency} at once; {args.workers} server "
        f"processes; {os.cpu_count()} CPU cores",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    pg: TemporaryPostgres | None = None
    failed = False
    try:
        for backend in args.backends.split(","):
            if backend == "postgresql" and pg is None:
                try:
                    pg = TemporaryPostgres(fsync=True).start()
                except PostgresUnavailable as exc:
                    print(f"postgresql: not run ({exc})")
                    failed = True
                    continue
            result = bench(backend, args, folder, pg)
            results[backend] = result
            _report(backend, result, args.json)
            failed |= bool(result["lost"]) or bool(result["kill_lost_acknowledged"])
            failed |= not result["kill_consistent"] or result["max_raters_per_item"] > RATERS
        if args.potato:
            potato = potato_round(args.potato, args, folder)
            if potato is not None:
                print(
                    f"potato: {potato['judgments']} judgments ({potato['items']} items) in "
                    f"{potato['seconds']} s = {potato['judgments_per_s']} judgments/s; item latency "
                    f"p50 {potato['p50_ms']} ms, p99 {potato['p99_ms']} ms"
                )
                for backend, result in results.items():
                    ratio = result["judgments_per_s"] / max(potato["judgments_per_s"], 1e-9)
                    print(f"storyeval ({backend}) / potato: {ratio:.2f}x judgments per second")
        else:
            print("potato: not installed (pip install potato-annotation; --potato PATH)")
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if failed else 0


def _report(backend: str, result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    print(
        f"{backend}: {result['judgments']} judgments ({result['pages']} pages) in "
        f"{result['seconds']} s = {result['judgments_per_s']} judgments/s (median of "
        f"{result['judgments_per_s_rounds']}); submit latency p50 {result['p50_ms']} ms, p99 "
        f"{result['p99_ms']} ms; max raters per item {result['max_raters_per_item']} (quota "
        f"{RATERS}); lost {result['lost']}",
        flush=True,
    )
    print(
        f"{backend} SIGKILL: {result['kill_acknowledged_pages']} pages acknowledged before the "
        f"kill, {result['kill_stored_pages']} in the database, {result['kill_lost_acknowledged']} "
        f"acknowledged pages lost, {result['kill_stored_but_unacknowledged']} stored but not "
        f"acknowledged (committed, the reply was cut); consistent: {result['kill_consistent']}",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
