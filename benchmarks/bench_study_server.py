"""Load benchmark of the study server on loopback, then a crash test.

1. Throughput: ``storyeval serve`` (uvicorn, one process) on a fresh database; simulated
   participants (threads, plain HTTP like a browser without JavaScript) complete a Likert study
   as fast as they can. Prints judgments accepted per second and the latency of the submission
   requests (p50, p99), measured from the request to the server's acknowledgement (303).
2. Crash: the same load on another fresh database; after ``--kill-after`` acknowledged pages
   the server is killed with SIGKILL. Every acknowledged page must then be in the database.

Bounded: at most ``--participants`` participants and ``--max-seconds`` seconds per phase.

    python benchmarks/bench_study_server.py                      # SQLite and PostgreSQL
    python benchmarks/bench_study_server.py --backends sqlite --concurrency 8
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from storyeval.human.study import load_study
from storyeval.server import study_store as store
from storyeval.server.db import Database
from storyeval.server.pgtemp import PostgresUnavailable, TemporaryPostgres
from storyeval.server.simulate import Acknowledged, KeepAliveClient, ServerProcess, StudyBrowser

REPO = Path(__file__).resolve().parent.parent
ADMIN = "benchmark-admin-token-000000"
STUDY = """
name: bench
title: Benchmark
protocol: likert
stories: stories.jsonl
criteria:
  - {name: coherence, question: "How well do the sentences fit together?", scale: 5, labels: {1: lowest, 5: highest}}
  - {name: relevance, question: "How relevant is the story to the prompt?", scale: 5, labels: {1: lowest, 5: highest}}
assignment: {items_per_participant: 10, raters_per_item: 6, order: balanced}
"""


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

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max_seconds + 60)
    return acked, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def bench(
    backend: str, args: argparse.Namespace, folder: Path, pg: TemporaryPostgres | None
) -> dict[str, object]:
    study_path = folder / "bench.yaml"
    criteria = len(load_study(study_path).criteria)

    def fresh_url(tag: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{folder / f'{tag}.sqlite3'}"
        assert pg is not None
        return pg.create_database(f"bench_{tag}")

    # 1. throughput
    url = fresh_url("load")
    server = ServerProcess(
        study_path,
        url,
        folder / f"{backend}-load.log",
        links=args.participants,
        admin_token=ADMIN,
        workers=args.workers,
    )
    try:
        acked, elapsed = run_load(
            server.base,
            server.links,
            study_path,
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
    result: dict[str, object] = {
        "backend": backend,
        "pages": len(acked),
        "judgments": len(acked) * criteria,
        "seconds": round(elapsed, 2),
        "judgments_per_s": round(len(acked) * criteria / elapsed, 1),
        "pages_per_s": round(len(acked) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * percentile(latencies, 99), 1) if latencies else None,
        "lost_in_load": len({a.slot_id for a in acked} - stored),
        "max_raters_per_item": quota,
    }
    # 2. SIGKILL in the middle of the load
    url = fresh_url("kill")
    server = ServerProcess(
        study_path,
        url,
        folder / f"{backend}-kill.log",
        links=args.participants,
        admin_token=ADMIN,
        workers=args.workers,
    )
    reached = threading.Event()
    killer_acked: list[Acknowledged] = []

    def kill_when_reached() -> None:
        reached.wait(timeout=args.max_seconds)
        server.kill()

    killer = threading.Thread(target=kill_when_reached)
    killer.start()
    killer_acked, _ = run_load(
        server.base,
        server.links,
        study_path,
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
    db.dispose()
    acked_ids = {a.slot_id for a in killer_acked}
    result.update(
        {
            "kill_acknowledged_pages": len(acked_ids),
            "kill_stored_pages": len(stored),
            "kill_lost_acknowledged": len(acked_ids - stored),
            "kill_stored_but_unacknowledged": len(stored - acked_ids),
            "kill_consistent": stored == done,
        }
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--participants", type=int, default=108, help="108 x 10 pages = every slot of the study"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument(
        "--kill-after", type=int, default=150, help="acknowledged pages before SIGKILL"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="storyeval-bench-"))
    shutil.copy(REPO / "examples" / "stories.jsonl", folder / "stories.jsonl")
    (folder / "bench.yaml").write_text(STUDY, encoding="utf-8")
    study = load_study(folder / "bench.yaml")
    print(
        f"study: {len(study.items)} items x {study.raters_per_item} raters = {len(study.items) * study.raters_per_item} "
        f"pages, {len(study.criteria)} criteria each; {args.participants} participants, {args.concurrency} at once; "
        f"{os.cpu_count()} CPU cores",
        flush=True,
    )
    results = []
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
            results.append(result)
            if args.json:
                print(json.dumps(result))
            else:
                print(
                    f"{backend}: {result['judgments']} judgments ({result['pages']} pages) in {result['seconds']} s = "
                    f"{result['judgments_per_s']} judgments/s; submit latency p50 {result['p50_ms']} ms, "
                    f"p99 {result['p99_ms']} ms; max raters per item {result['max_raters_per_item']} (quota 6); "
                    f"lost {result['lost_in_load']}"
                )
                print(
                    f"{backend} SIGKILL: {result['kill_acknowledged_pages']} pages acknowledged before the kill, "
                    f"{result['kill_stored_pages']} in the database, {result['kill_lost_acknowledged']} acknowledged "
                    f"pages lost, {result['kill_stored_but_unacknowledged']} stored but not acknowledged "
                    f"(committed, the reply was cut); slots consistent: {result['kill_consistent']}"
                )
            failed |= (
                bool(result["lost_in_load"])
                or bool(result["kill_lost_acknowledged"])
                or not result["kill_consistent"]
            )
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
