"""``storyeval view``: a local read-only web app over storyeval's files, to read the stories
behind the numbers (see :mod:`storyeval.view.app`)."""

from collections.abc import Sequence

from storyeval.view.data import ViewData, load_view_data

__all__ = ["ViewData", "create_view_app", "load_view_data"]


def create_view_app(data: ViewData, *, allowed_hosts: Sequence[str] | None = None) -> object:
    """The web app over ``data`` (:func:`storyeval.view.app.create_view_app`), answering the
    loopback names unless ``allowed_hosts`` are given."""
    from storyeval.view.app import LOOPBACK_HOSTS
    from storyeval.view.app import create_view_app as create

    return create(data, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS)
