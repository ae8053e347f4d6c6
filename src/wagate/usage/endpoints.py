from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Query
from fastapi.responses import Response

from wagate.accounts.access import GatewayDep, Member
from wagate.http.limits import Id
from wagate.http.openapi import CHANNEL_NOT_FOUND, errors
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.usage import service
from wagate.usage.schemas import (
    CSV_MEDIA_TYPE,
    UsageOut,
    csv_filename,
    usage_csv,
    usage_view,
)

router = APIRouter()

CSV_EXAMPLE = (
    "date,channel_id,category,messages,failed,amount\r\n"
    "2026-11-23,1,AUTHENTICATION,3,1,0.072\r\n"
    "2026-11-23,1,SESSION,2,0,0\r\n"
)
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Usage per UTC day, channel and category; as CSV with `Accept: text/csv`.",
        "content": {
            "application/json": {
                "example": cast(dict[str, Any], UsageOut.model_config["json_schema_extra"])["example"]
            },
            CSV_MEDIA_TYPE: {"schema": {"type": "string"}, "example": CSV_EXAMPLE},
        },
    },
    **errors(
        401,
        403,
        404,
        422,
        503,
        codes={404: CHANNEL_NOT_FOUND},
        _401="Missing, unknown or revoked API key (`unauthorized`)",
        _403="Another account (`forbidden`), or `channel_id` of an inbox the agent is not a member of",
        _404="`channel_id` names no channel of the account (`channel_not_found`)",
        _422="`from`, `to` or `channel_id` is not valid, or the period is longer than 366 days"
        " (`invalid_request`, the field in `details`)",
    ),
}
DESCRIPTION = """\
Outbound messages (API, bulk and agent sends), how many of them failed, and what they cost, per UTC
day, channel and category, for `from` to `to` (dates `YYYY-MM-DD`, both included, UTC; by default the
last 30 days up to today; at most 366 days). Only rows with messages are listed, oldest day first.

The category is the one Meta charged when it recategorised the message, else the template's, else
`SESSION` (free text in the customer's 24-hour window). Amounts are exactly the sums of the messages'
`cost.amount` (a failed message costs 0), in `currency`.

Administrators see every channel of the account, agents the channels of their inboxes. With
`Accept: text/csv` the same rows come as CSV with a header line
(`date,channel_id,category,messages,failed,amount`).
"""


def wants_csv(accept: str | None) -> bool:
    """Whether `Accept` prefers text/csv to JSON (JSON when it does not say, or names both alike)."""
    quality: dict[str, float] = {}
    for part in (accept or "").split(","):
        media, *params = (piece.strip() for piece in part.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        quality[media.lower()] = max(q, quality.get(media.lower(), 0.0))
    csv = quality.get(CSV_MEDIA_TYPE, 0.0)
    if csv <= 0:
        return False
    if "application/json" in quality:
        return csv > quality["application/json"]
    # JSON only through a wildcard: the type named outright wins a tie.
    return csv >= max(quality.get("application/*", 0.0), quality.get("*/*", 0.0))


@router.get(
    "/accounts/{account_id}/usage",
    operation_id="get_usage",
    summary="Usage and cost per day, channel and category",
    description=DESCRIPTION,
    response_model=UsageOut,
    responses=RESPONSES,
)
async def get_usage(
    gateway: GatewayDep,
    principal: Member,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=10,
            description="First UTC day, YYYY-MM-DD (default: 29 days before `to`)",
        ),
    ] = None,
    to: Annotated[
        str | None, Query(max_length=10, description="Last UTC day, YYYY-MM-DD, included (default: today)")
    ] = None,
    channel_id: Id | None = None,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    period = service.usage_period(from_, to)
    async with gateway.db.read() as session:
        report = await service.usage_report(
            session,
            principal=principal,
            period=period,
            currency=gateway.settings.currency,
            channel_id=channel_id,
        )
    if wants_csv(accept):
        return Response(
            usage_csv(report),
            media_type=CSV_MEDIA_TYPE,
            headers={
                "Content-Disposition": f'attachment; filename="{csv_filename(report)}"',
                "Vary": "Accept",
            },
        )
    return JSONResponse(usage_view(report), headers={"Vary": "Accept"})
