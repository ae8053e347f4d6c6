"""`/usage` (API.md section 12, issue 12 point 5): messages and cost per day and category as a chart
(`charts.usage_chart`), a table, a channel filter, a date range and `Download CSV`, which is
exactly the CSV of `GET /v1/accounts/{id}/usage` (the same service and the same writer)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.core.errors import InvalidRequest, WagateError
from wagate.dashboard.charts import CATEGORY_LABELS, USAGE_NARROW, USAGE_WIDE, usage_chart
from wagate.dashboard.web import current_user, error_page, render
from wagate.http.limits import parse_id
from wagate.messages.schemas import format_amount
from wagate.usage.models import UsageCategory, UsageReport
from wagate.usage.schemas import CSV_MEDIA_TYPE, csv_filename, usage_csv
from wagate.usage.service import usage_channels, usage_period, usage_report

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
TextQuery = Annotated[str | None, Query()]
FromQuery = Annotated[str | None, Query(alias="from")]
DIGITS = re.compile(r"[0-9]{1,19}")
PAGE_SIZE = 100


@dataclass(frozen=True)
class Filters:
    first: str
    last: str
    channel_id: int | None

    def query(self, **extra: str | int) -> str:
        values: dict[str, str | int] = {"from": self.first, "to": self.last}
        if self.channel_id is not None:
            values["channel_id"] = self.channel_id
        return urlencode({**values, **extra})


def _channel_id(text: str | None) -> int | None:
    """The channel filter: empty for all channels."""
    if not text:
        return None
    channel_id = parse_id(text)
    if channel_id is None:
        raise InvalidRequest(
            "The request is not valid: channel_id: must be a channel's id.",
            details=[{"field": "channel_id", "issue": "must be a channel's id"}],
        )
    return channel_id


def _page_number(text: str | None) -> int:
    return int(text) if text and DIGITS.fullmatch(text) and 0 < int(text) < 100_000 else 1


async def _report(
    gateway: GatewayDep, user: SessionUser, first: str | None, last: str | None, channel: str | None
) -> UsageReport:
    period = usage_period(first, last)
    async with gateway.db.read() as session:
        return await usage_report(
            session,
            principal=user.principal,
            period=period,
            currency=gateway.settings.currency,
            channel_id=_channel_id(channel),
        )


async def _channels(gateway: GatewayDep, user: SessionUser) -> Sequence[tuple[int, str, str]]:
    async with gateway.db.read() as session:
        return [
            (c.id, c.name, c.phone_number) for c in await usage_channels(session, principal=user.principal)
        ]


@router.get("/usage")
async def usage_page(
    request: Request,
    gateway: GatewayDep,
    user: User,
    first: FromQuery = None,
    to: TextQuery = None,
    channel_id: TextQuery = None,
    page: TextQuery = None,
) -> HTMLResponse:
    channels = await _channels(gateway, user)
    form = {"from": first or "", "to": to or "", "channel_id": channel_id or ""}
    try:
        report = await _report(gateway, user, first, to, channel_id)
    except InvalidRequest as error:
        return render(
            request, "usage.html", status_code=error.status_code, channels=channels, form=form, error=error
        )
    except WagateError as error:
        return error_page(request, error)
    filters = Filters(report.period.first.isoformat(), report.period.last.isoformat(), report.channel_id)
    number = _page_number(page)
    pages = max(1, math.ceil(len(report.rows) / PAGE_SIZE))
    number = min(number, pages)
    shown = report.rows[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
    names = {channel_id: name for channel_id, name, _ in channels}
    return render(
        request,
        "usage.html",
        channels=channels,
        form={"from": filters.first, "to": filters.last, "channel_id": str(report.channel_id or "")},
        report=report,
        charts=[usage_chart(report, size) for size in (USAGE_WIDE, USAGE_NARROW)],
        categories=[(category.value, CATEGORY_LABELS[category]) for category in UsageCategory],
        rows=shown,
        first_row=(number - 1) * PAGE_SIZE + 1,
        page=number,
        pages=pages,
        names=names,
        amount=format_amount,
        filters=filters,
    )


@router.get("/usage/csv")
async def usage_csv_download(
    request: Request,
    gateway: GatewayDep,
    user: User,
    first: FromQuery = None,
    to: TextQuery = None,
    channel_id: TextQuery = None,
) -> Response:
    """The API's CSV of the same filters (`Accept: text/csv` on `GET /v1/accounts/{id}/usage`)."""
    try:
        report = await _report(gateway, user, first, to, channel_id)
    except WagateError as error:
        return error_page(request, error)
    return Response(
        usage_csv(report),
        media_type=CSV_MEDIA_TYPE,
        headers={
            "Content-Disposition": f'attachment; filename="{csv_filename(report)}"',
            "Cache-Control": "no-store",
        },
    )
