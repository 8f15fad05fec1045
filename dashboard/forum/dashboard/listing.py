"""The Jobs page's search: its form, read from the query string, and one page
of the jobs it finds.

=============  ==============================================================
parameter      what
=============  ==============================================================
``app``        the app (its prefix, forum.tasks.registry); default: the only one
``prefix``     a prefix of the job's key
``task``       the task's name
``state``      one of the job states
``text``       a piece of the job's arguments (case-insensitive)
``since``      from this time (UTC, ``YYYY-MM-DDTHH:MM``: a browser's
               ``datetime-local``), on when the job last changed state
``until``      up to this time, likewise
``order``      ``newest`` (the default) or ``oldest`` first
``limit``      jobs a page shows, 1 to 500 (50)
``cursor``     where the page starts: the previous page's ``next`` (opaque)
=============  ==============================================================

A value no search can take (no such state, a time that is not one, a limit
out of range) is a :class:`ValueError` in one line, which the page shows
with a 400. The search itself is the task layer's (``App.search``), on the
server, a page at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from forum.tasks import App, JobState, JobStatus

__all__ = ["DEFAULT_LIMIT", "LIMITS", "Found", "JobSearch"]

#: A page's jobs unless the form says otherwise, and the choices it offers.
DEFAULT_LIMIT = 50
LIMITS = (20, 50, 100, 200, 500)
#: The states a search may ask for, in the order of the form's menu.
STATES = tuple(state.value for state in JobState)
#: How a browser's ``datetime-local`` field sends a time (minutes, or seconds).
TIME_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True, slots=True)
class JobSearch:
    """One search of the Jobs page, as its form gave it (see the module docstring)."""

    app: str = ""
    prefix: str = ""
    task: str = ""
    state: str = ""
    text: str = ""
    since: str = ""
    until: str = ""
    order: str = "newest"
    limit: int = DEFAULT_LIMIT
    cursor: str = ""

    def __post_init__(self) -> None:
        if self.state and self.state not in STATES:
            raise ValueError(f"no job state {self.state!r}: one of {', '.join(STATES)}")
        if self.order not in ("newest", "oldest"):
            raise ValueError(f"order: newest or oldest, not {self.order!r}")
        if not 1 <= self.limit <= max(LIMITS):
            raise ValueError(f"limit: 1 to {max(LIMITS)} jobs a page, not {self.limit}")
        since, until = self.since_time, self.until_time  # a time that is none: ValueError
        if since is not None and until is not None and since > until:
            raise ValueError(f"since ({self.since}) is after until ({self.until})")

    @classmethod
    def of(cls, query: Mapping[str, str]) -> JobSearch:
        """The search a query string asks for; ``ValueError`` for a value none can take."""
        raw_limit = query.get("limit", "") or str(DEFAULT_LIMIT)
        try:
            limit = int(raw_limit)
        except ValueError:
            raise ValueError(f"limit: a whole number of jobs, not {raw_limit!r}") from None
        text = {name: query.get(name, "").strip() for name in _TEXT}
        return cls(**text, order=query.get("order", "") or "newest", limit=limit)

    @property
    def since_time(self) -> float | None:
        return _time("since", self.since)

    @property
    def until_time(self) -> float | None:
        return _time("until", self.until)

    @property
    def job_state(self) -> JobState | None:
        return JobState(self.state) if self.state else None

    @property
    def narrowed(self) -> bool:
        """Whether anything but the app, order and page size narrows it."""
        return any((self.prefix, self.task, self.state, self.text, self.since, self.until))

    def query(self, **changed: Any) -> dict[str, str]:
        """The query string of this search with ``changed`` (empty values left out)."""
        values = {name: str(getattr(self, name)) for name in (*_TEXT, "order", "limit", "cursor")}
        values |= {name: str(value) for name, value in changed.items()}
        return {name: value for name, value in values.items() if value}

    async def run(self, app: App) -> Found:
        """This search's page of ``app``'s jobs."""
        return await _search(app, self)


#: The form's text fields, as the query string names them.
_TEXT = ("app", "prefix", "task", "state", "text", "since", "until", "cursor")


@dataclass(frozen=True, slots=True)
class Found:
    """A page of jobs: ``total`` matching when known, ``next_cursor`` of
    the next page (``None`` at the end), ``searched`` entries looked at and
    ``complete`` ``False`` when a key or text search stopped at its budget."""

    jobs: list[JobStatus]
    total: int | None
    next_cursor: str | None
    searched: int = 0
    complete: bool = True


def _time(name: str, text: str) -> float | None:
    if not text:
        return None
    for form in TIME_FORMATS:
        try:
            return datetime.strptime(text, form).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise ValueError(f"{name}: a time as YYYY-MM-DDTHH:MM (UTC), not {text!r}")


async def _search(app: App, search: JobSearch) -> Found:
    """The task layer's search (``App.search``) of ``search``: the job
    index's, a page at a time (forum.coordinator.jobindex)."""
    page = await app.search(
        state=search.job_state,
        task=search.task or None,
        key=search.prefix or None,
        text=search.text or None,
        since=search.since_time,
        until=search.until_time,
        newest_first=search.order == "newest",
        limit=search.limit,
        cursor=search.cursor or None,
    )
    return Found(page.jobs, page.total, page.next_cursor, page.searched, page.complete)
