"""What a message costs: the price list in force when it was accepted, then what Meta's status webhooks
say it charged.

The list has effective dates (wagate/core/prices.py, API.md section 14): until 2026-09-30 a session message
and a utility template inside the customer's open window cost 0; from 2026-10-01 both are charged. A
message keeps the price of its day: it is stored with its cost, and a settlement prices it by the entry
of its acceptance, not of the day Meta's status comes. The `pricing` of a status webhook is
authoritative when it comes: `billable: false` means free, `service` is a session message (SESSION),
and a category other than the template's (Meta recategorises templates) is the price of that category.
"""

from __future__ import annotations

from wagate.core.prices import SESSION, PriceList, cost_category
from wagate.messages.models import Message, MessageRecord, SentAs
from wagate.whatsapp.payloads import StatusUpdate

Prices = PriceList


def message_cost_category(message: Message | MessageRecord) -> str | None:
    """The cost category of API.md section 5: the one Meta charged, else the template's, else SESSION
    for free text; None for a customer's message."""
    if message.cost_category or message.template_category:
        return message.cost_category or message.template_category
    return SESSION if message.sent_as is SentAs.session else None


def settle_cost(message: Message | MessageRecord, update: StatusUpdate, prices: Prices | None) -> None:
    """Apply the status's `pricing` to the message's cost (nothing when it has none)."""
    if update.billable is False:
        message.cost_micros = 0
        return
    if update.billable is None or update.pricing_category is None or prices is None:
        return
    charged = cost_category(update.pricing_category)
    if charged is None:
        return  # a category the list does not price: the price of acceptance stands
    message.cost_micros = prices.at(message.created_at).price_micros(charged)
    if charged != (message.template_category or SESSION).upper():
        message.cost_category = charged
