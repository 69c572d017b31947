"""What the benchmark scripts share: running ``storyeval`` commands with their logs and times,
and recording a measured target (value, target, met)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class Runner:
    """Runs ``storyeval`` commands, each logged under ``OUT/logs`` with its time: each in its
    own process, or (``in_process``) all in this one, where models load once."""

    def __init__(self, out: Path, threads: int, *, in_process: bool = False) -> None:
        self.out, self.threads, self.in_process = out, threads, in_process
        self.commands: list[dict[str, Any]] = []
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str, *args: str) -> float:
        """Run ``storyeval ARGS``; the seconds it took (a failure stops the script)."""
        started = time.perf_counter()
        log_path = self.out / "logs" / f"{name}.log"
        with open(log_path, "w", encoding="utf-8") as log:
            code = self._here(args, log) if self.in_process else self._apart(args, log)
        seconds = time.perf_counter() - started
        self.commands.append({"name": name, "command": " ".join(args), "seconds": seconds})
        if code != 0:
            raise SystemExit(f"`storyeval {' '.join(args)}` failed: see {log_path}")
        return seconds

    @staticmethod
    def _apart(args: tuple[str, ...], log: Any) -> int:
        command = [sys.executable, "-m", "storyeval", *args]
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode

    @staticmethod
    def _here(args: tuple[str, ...], log: Any) -> int:
        import contextlib
        import traceback

        from storyeval.cli import app

        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                code = app(list(args), standalone_mode=False)  # typer.Exit's code, if any
            except SystemExit as exc:
                return int(exc.code or 0)
            except Exception:  # the command's error, in its log
                traceback.print_exc()
                return 1
        return code if isinstance(code, int) else 0


def target(value: float | None, goal: float, *, at_most: bool = False) -> dict[str, Any]:
    """One target: the value, the goal and whether it was met."""
    met = value is not None and (value <= goal if at_most else value >= goal)
    return {"value": value, "target": f"{'<=' if at_most else '>='} {goal}", "met": met}


def flag(value: bool) -> dict[str, Any]:
    """A yes-or-no target: met when it holds."""
    return {"value": value, "met": value}
