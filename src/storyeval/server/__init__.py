"""The study server: a FastAPI app factory, server-rendered pages, SQLAlchemy persistence
(SQLite by default, PostgreSQL by URL).

>>> from storyeval.server import Settings
>>> Settings(database_url="sqlite:///x.sqlite3").database_url
'sqlite:///x.sqlite3'
"""

from storyeval.server.settings import Settings

__all__ = ["Settings"]
