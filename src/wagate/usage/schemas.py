"""Usage as the API writes it: the JSON body of API.md section 11 and the same rows as CSV."""

from __future__ import annotations

import csv
import io
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from wagate.messages.schemas import format_amount
from wagate.usage.models import UsageReport

CSV_COLUMNS = ("date", "channel_id", "category", "messages", "failed", "amount")
CSV_MEDIA_TYPE = "text/csv"


class UsageRowOut(BaseModel):
    date: str = Field(description="The UTC day, YYYY-MM-DD.", examples=["2026-11-23"])
    channel_id: int
    category: Literal["AUTHENTICATION", "UTILITY", "MARKETING", "SESSION"]
    messages: int = Field(description="Outbound messages created that day (API, bulk and agent sends).")
    failed: int = Field(description="How many of them failed (they cost 0).")
    amount: str = Field(description="What they cost, a decimal string in `currency`.", examples=["0.072"])


class UsageTotalOut(BaseModel):
    messages: int
    failed: int
    amount: str


class UsageOut(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "example": {
                "currency": "AZN",
                "from": "2026-10-26",
                "to": "2026-11-24",
                "data": [
                    {
                        "date": "2026-11-23",
                        "channel_id": 1,
                        "category": "AUTHENTICATION",
                        "messages": 3,
                        "failed": 1,
                        "amount": "0.072",
                    },
                    {
                        "date": "2026-11-23",
                        "channel_id": 1,
                        "category": "SESSION",
                        "messages": 2,
                        "failed": 0,
                        "amount": "0",
                    },
                ],
                "total": {"messages": 5, "failed": 1, "amount": "0.072"},
            }
        },
    )

    currency: str
    from_: str = Field(alias="from", description="The first UTC day, YYYY-MM-DD.")
    to: str = Field(description="The last UTC day, YYYY-MM-DD (included).")
    data: list[UsageRowOut] = Field(description="Oldest day first; only rows with messages.")
    total: UsageTotalOut


def usage_view(report: UsageReport) -> dict[str, Any]:
    """The 200 body of `GET /v1/accounts/{account_id}/usage`."""
    return {
        "currency": report.currency,
        "from": report.period.first.isoformat(),
        "to": report.period.last.isoformat(),
        "data": [
            {
                "date": row.day.isoformat(),
                "channel_id": row.channel_id,
                "category": row.category.value,
                "messages": row.messages,
                "failed": row.failed,
                "amount": format_amount(row.amount_micros),
            }
            for row in report.rows
        ],
        "total": {
            "messages": report.messages,
            "failed": report.failed,
            "amount": format_amount(report.amount_micros),
        },
    }


def usage_csv(report: UsageReport) -> str:
    """The same rows as CSV (RFC 4180: CRLF line ends), a header line first."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.rows:
        writer.writerow(
            (
                row.day.isoformat(),
                row.channel_id,
                row.category.value,
                row.messages,
                row.failed,
                format_amount(row.amount_micros),
            )
        )
    return out.getvalue()


def csv_filename(report: UsageReport) -> str:
    channel = f"-channel-{report.channel_id}" if report.channel_id is not None else ""
    return f"usage-{report.period.first.isoformat()}-{report.period.last.isoformat()}{channel}.csv"
