"""Dates, times, durations and time zones."""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from toolcat import tool

__toolcat__ = {
    "toolkit": "time",
    "version": "1.0.0",
    "description": "Dates, times, durations and time zones.",
    "tags": ["time"],
}


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris' "
            "(list_timezones finds them)"
        ) from None


def _parse(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 date or date-time") from None


def _offset(offset: timedelta | None) -> str | None:
    """A UTC offset as ``±HH:MM`` (``-05:00``, ``+01:00``, ``+05:45``), seconds if any."""
    if offset is None:
        return None
    sign = "-" if offset < timedelta(0) else "+"
    minutes, seconds = divmod(int(abs(offset).total_seconds()), 60)
    text = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def _describe(moment: datetime) -> dict[str, Any]:
    return {
        "datetime": moment.isoformat(timespec="seconds"),
        "weekday": calendar.day_name[moment.weekday()],
        "utc_offset": _offset(moment.utcoffset()),
        "zone": moment.tzname(),
    }


@tool(tags=["read-only"], examples=["what time is it in Tokyo", "today's date"])
def current_time(timezone: str = "UTC") -> dict[str, Any]:
    """The current date and time in a given IANA time zone, with its UTC offset.

    Args:
        timezone: IANA zone such as 'Europe/Paris'.
    """
    return _describe(datetime.now(_zone(timezone)))


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["9am in New York is what time in London", "convert meeting time to my zone"],
)
def convert_timezone(datetime: str, from_timezone: str, to_timezone: str) -> dict[str, Any]:
    """Convert a date and time from one time zone to another, handling daylight saving time.

    Args:
        datetime: ISO 8601 date-time, e.g. 2026-03-29T09:30.
        from_timezone: IANA zone of the given time.
        to_timezone: IANA zone to convert to.
    """
    moment = _parse(datetime)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_zone(from_timezone))
    return _describe(moment.astimezone(_zone(to_timezone)))


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["how many days until Christmas", "days between two dates"],
)
def date_diff(start: str, end: str) -> dict[str, Any]:
    """The time between two dates or date-times, in days, hours, minutes and business days.

    Args:
        start: ISO 8601 date or date-time.
        end: ISO 8601 date or date-time.
    """
    a, b = _parse(start), _parse(end)
    if (a.tzinfo is None) != (b.tzinfo is None):
        a, b = (
            a.replace(tzinfo=a.tzinfo or timezone.utc),
            b.replace(tzinfo=b.tzinfo or timezone.utc),
        )
    delta = b - a
    first, last = sorted([a.date(), b.date()])
    business = sum(
        1 for i in range((last - first).days) if (first + timedelta(days=i)).weekday() < 5
    )
    return {
        "days": delta.total_seconds() / 86400,
        "hours": delta.total_seconds() / 3600,
        "minutes": delta.total_seconds() / 60,
        "business_days": business if delta.total_seconds() >= 0 else -business,
    }


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["what date is 90 days from now", "deadline in three weeks"],
)
def add_duration(
    start: str,
    years: int = 0,
    months: int = 0,
    weeks: int = 0,
    days: int = 0,
    hours: int = 0,
    minutes: int = 0,
) -> str:
    """Add (or subtract, with negative numbers) days, hours, minutes, weeks, months or years to a date.

    Args:
        start: ISO 8601 date or date-time.
        years: Years to add.
        months: Months to add; the day is clamped to the month's length.
        weeks: Weeks to add.
        days: Days to add.
        hours: Hours to add.
        minutes: Minutes to add.
    """
    moment = _parse(start)
    month_index = moment.month - 1 + months + 12 * years
    year, month = moment.year + month_index // 12, month_index % 12 + 1
    day = min(moment.day, calendar.monthrange(year, month)[1])
    moment = moment.replace(year=year, month=month, day=day)
    moment += timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes)
    is_date_only = "T" not in start and " " not in start.strip() and not (hours or minutes)
    return moment.date().isoformat() if is_date_only else moment.isoformat()


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["what day of the week was 1 January 2000"],
)
def day_of_week(date: str) -> dict[str, Any]:
    """The weekday, ISO week number and day of the year of a date.

    Args:
        date: ISO 8601 date.
    """
    day = _parse(date).date()
    iso = day.isocalendar()
    return {
        "date": day.isoformat(),
        "weekday": calendar.day_name[day.weekday()],
        "iso_week": iso.week,
        "day_of_year": day.timetuple().tm_yday,
        "is_weekend": day.weekday() >= 5,
    }


@tool(
    tags=["read-only"],
    defer_loading=True,
    examples=["which time zones are in Australia"],
)
def list_timezones(contains: str = "") -> list[dict[str, str]]:
    """IANA time zone names matching a search string, with their current UTC offsets.

    Args:
        contains: Substring to match, e.g. 'America' or 'Berlin'.
    """
    now = datetime.now(timezone.utc)
    needle = contains.lower()
    return [
        {"zone": name, "utc_offset": _offset(now.astimezone(ZoneInfo(name)).utcoffset()) or ""}
        for name in sorted(available_timezones())
        if needle in name.lower()
    ][:500]
