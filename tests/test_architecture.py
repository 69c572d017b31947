"""The architecture page draws the package as it is: every part of the package stands in one
layer of ``scripts/check_import_cycles.py`` and on docs/architecture.md, and the layering
holds (no part imports from a higher layer, no loop of parts)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_import_cycles", ROOT / "scripts" / "check_import_cycles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_part_is_in_one_layer_and_on_the_architecture_page() -> None:
    checker = _checker()
    package = ROOT / "src" / "storyeval"
    parts = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "_version")}
    layered = [name for _, names in checker.LAYERS for name in names]
    assert len(layered) == len(set(layered)), "a part in two layers"
    assert set(layered) == parts
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawing = page.split("```text", 1)[1].split("```", 1)[0]
    for layer, names in checker.LAYERS:
        assert layer in drawing
        for name in names:
            assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", drawing), name


def test_the_layering_holds() -> None:
    checker = _checker()
    known = checker.module_names(checker.SOURCE)
    graph: dict[str, set[str]] = {m: checker.imports(m, p, known) for m, p in known.items()}
    parts = checker.part_graph(graph)
    assert checker.layer_breaches(parts) == []
    assert checker.cycles(parts) == []
    assert checker.layer_breaches({"storyeval.corpus": {"storyeval.meta"}})  # it can fail


def test_the_package_face_names_what_users_import_and_stays_light() -> None:
    """``import storyeval`` loads no model library; each public name resolves to the object its
    part defines."""
    import subprocess
    import sys

    code = (
        "import sys, storyeval as se\n"
        "assert not {'torch', 'transformers', 'spacy'} & set(sys.modules), 'heavy import'\n"
        "import storyeval.corpus, storyeval.metrics.pipeline\n"
        "assert se.read_stories is storyeval.corpus.read_stories\n"
        "assert se.score_stories is storyeval.metrics.pipeline.score_stories\n"
        "missing = [n for n in se.__all__ if not hasattr(se, n)]\n"
        "assert not missing, missing\n"
        "print(len(se.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 20
