"""What a message costs: the price list at acceptance, then what Meta's status webhooks say it charged.

Meta charges per message since July 2025 (API.md section 13): a utility template inside the customer's
open window is free, and the `pricing` of a status webhook is authoritative when it comes: `billable:
false` means free, and a category other than the template's (Meta recategorises templates) is the
price of that category.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from wagate.messages.models import Message, MessageRecord
from wagate.whatsapp.payloads import StatusUpdate

Prices = Mapping[str, Decimal]


def price_micros(prices: Prices, category: str | None) -> int:
    """The price of a template of this category in millionths (Meta's lower-case names too); session
    messages (no category) are free."""
    if category is None:
        return 0
    return int(prices.get(category.upper(), Decimal(0)) * 1_000_000)


def settle_cost(message: Message | MessageRecord, update: StatusUpdate, prices: Prices | None) -> None:
    """Apply the status's `pricing` to the message's cost (nothing when it has none)."""
    if update.billable is False:
        message.cost_micros = 0
        return
    category = update.pricing_category
    if update.billable is None or category is None or message.template_category is None or prices is None:
        return
    charged = category.upper()
    message.cost_micros = price_micros(prices, charged)
    if charged != message.template_category.upper():
        message.cost_category = charged
