"""The message log's filters (`/messages` and its CSV, `/messages.csv`): the seven query parameters
read once for both (`log_form`), held as the form shows them, and turned into the service's filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Annotated
from urllib.parse import urlencode

from fastapi import Depends, Query

from wagate.accounts.service import SessionUser
from wagate.core.errors import InvalidRequest, WagateError
from wagate.dashboard import views
from wagate.http.limits import parse_id
from wagate.messages.models import MessageStatus
from wagate.messages.queries import MessageFilters
from wagate.runtime.gateway import Gateway

Text = Annotated[str | None, Query(max_length=100)]

# The service names fields as the API does; the page's labels are these.
FIELD_LABELS = {
    "created_after": "From",
    "created_before": "To",
    "channel_id": "Channel",
    "phone_number": "Number",
    "status": "Status",
    "template_name": "Template",
    "error_code": "Error code",
    "before": "Older",
}
STATUSES = [(s.value, s.value.capitalize()) for s in MessageStatus]


@dataclass(frozen=True)
class LogForm:
    """The filters as the form holds them (to fill it again and to carry them to other pages)."""

    date_from: str = ""
    date_to: str = ""
    channel: str = ""
    status: str = ""
    number: str = ""
    template: str = ""
    error_code: str = ""

    def query(self, **extra: str) -> str:
        pairs = {
            "from": self.date_from,
            "to": self.date_to,
            "channel": self.channel,
            "status": self.status,
            "number": self.number,
            "template": self.template,
            "error_code": self.error_code,
            **extra,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    @property
    def filtered(self) -> bool:
        return bool(self.query())

    def filters(self) -> MessageFilters:
        """The service's filters: the dates are whole UTC days, `to` included."""
        after = _day(self.date_from, "created_after")
        to = _day(self.date_to, "created_before")
        before = None
        if to is not None:
            try:
                before = to + timedelta(days=1)
            except OverflowError:
                before = None  # the last day there is: no end
        channel_id = None
        if self.channel:
            channel_id = parse_id(self.channel)
            if channel_id is None:
                raise _invalid("channel_id", "not a channel of yours")
        return MessageFilters(
            channel_id=channel_id,
            phone_number=self.number or None,
            status=self.status or None,
            template_name=self.template or None,
            error_code=self.error_code or None,
            created_after=after,
            created_before=before,
        )


def _invalid(field: str, issue: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {issue}", details=[{"field": field, "issue": issue}])


def _day(value: str, field: str) -> datetime | None:
    if not value:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise _invalid(field, "must be a date, YYYY-MM-DD") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def refusal_text(error: WagateError) -> str:
    """A refusal of the filters in the form's words ("Number: not a valid phone number")."""
    details = error.details or []
    if not details:
        return error.message
    return "; ".join(
        f"{views.field_words(str(d.get('field')), FIELD_LABELS)}: {d.get('issue')}" for d in details
    )


def log_form(
    date_from: Annotated[str | None, Query(alias="from", max_length=20)] = None,
    to: Annotated[str | None, Query(max_length=20)] = None,
    channel: Annotated[str | None, Query(max_length=20)] = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    number: Text = None,
    template: Annotated[str | None, Query(max_length=512)] = None,
    error_code: Text = None,
) -> LogForm:
    """The filters of the page and of its CSV, from the same query parameters."""
    return LogForm(
        *((value or "").strip() for value in (date_from, to, channel, status, number, template, error_code))
    )


LogFormQuery = Annotated[LogForm, Depends(log_form)]


async def channel_names(gateway: Gateway, user: SessionUser) -> tuple[list[views.Inbox], dict[int, str]]:
    """The user's inboxes for the channel filter, and their names by channel id for the rows."""
    inboxes = await views.inboxes_of(gateway, user)
    return inboxes, {inbox.id: inbox.name for inbox in inboxes}
