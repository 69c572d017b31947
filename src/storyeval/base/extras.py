"""Optional dependency groups, and the message that names the one to install.

``pip install storyeval`` gives the statistics (meta-evaluation, agreement, study analysis,
n-gram metrics); the groups below add the rest. ``make setup`` installs them all.
"""

from __future__ import annotations

from storyeval.base.errors import StoryevalError

#: top-level module -> the extra that installs it
EXTRA_OF_MODULE: dict[str, str] = {
    "torch": "models",
    "transformers": "models",
    "safetensors": "models",
    "gguf": "models",
    "accelerate": "models",
    "spacy": "models",
    "ot": "models",
    "lemminflect": "models",
    "names": "models",
    "sqlalchemy": "server",
    "fastapi": "server",
    "uvicorn": "server",
    "jinja2": "server",
    "multipart": "server",
    "python_multipart": "server",
    "matplotlib": "report",
    "psycopg": "postgres",
    "openai": "judge",
}


class MissingExtraError(StoryevalError, ImportError):
    """A command needs an optional dependency group that is not installed."""


def missing_extra(error: ModuleNotFoundError) -> MissingExtraError | None:
    """The error to show for a missing module that an extra provides (None for any other).

    >>> print(missing_extra(ModuleNotFoundError("No module named 'fastapi'", name="fastapi")))
    this needs the optional dependencies of storyeval[server] (fastapi is missing): pip install 'storyeval[server]'
    """
    module = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return MissingExtraError(
        f"this needs the optional dependencies of storyeval[{extra}] ({module} is missing): "
        f"pip install 'storyeval[{extra}]'"
    )
