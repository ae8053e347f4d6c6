"""The customers of each WABA: phone number, business-scoped user id (BSUID) and username.

Since April 2026 Meta identifies each WhatsApp user to a business by a BSUID in ``user_id``: the
ISO country code of the user's number, a dot and alphanumerics (``AZ.13491208655302741918``;
parent ids of linked portfolios have ``ENT`` between, ``AZ.ENT.11815799212886844830``). A user may
also adopt a username, which hides the phone number from businesses.

Here every phone number gets a user id that is stable per WABA: derived from a hash of the WABA id
and the number, so a restarted or reset simulator gives the same number the same id again. A user id
that was never derived from a number here (``POST /_sim/inbound`` with ``user_id``, a send by
``recipient`` to an unseen id) is a customer known only by that id: a username-only user.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import phonenumbers

# Country code, optionally ENT (a parent id), then alphanumerics: the shape Meta documents.
USER_ID_PATTERN = re.compile(r"[A-Z]{2}(?:\.ENT)?\.[A-Za-z0-9]{1,64}")
_USER_ID_DIGITS = 20  # Meta's examples carry 20 digits after the country code
_SHORTEST_NATIONAL = 2  # digits after the calling code


def is_user_id(value: str) -> bool:
    return USER_ID_PATTERN.fullmatch(value) is not None


def digits_of(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def country_of(wa_id: str) -> str:
    """ISO 3166 alpha-2 code of the number's calling code (+994 -> AZ, +1 -> US); ZZ when unknown."""
    # Calling codes are 1-3 digits and none is the start of another, so the first known prefix is the
    # number's: a dict lookup instead of parsing the whole number (every new customer, in benchmarks
    # hundreds a second).
    if not wa_id.isdigit() or wa_id.startswith("0"):
        return "ZZ"
    for length in (1, 2, 3):
        regions = phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(int(wa_id[:length]))
        if regions:
            region = regions[0]  # the main country of a shared code (+1: US, +7: RU)
            national_digits = len(wa_id) - length  # phonenumbers parses nothing shorter
            well_formed = national_digits >= _SHORTEST_NATIONAL and len(region) == 2 and region.isalpha()
            return region if well_formed else "ZZ"
    return "ZZ"


def user_id_for(waba_id: str, wa_id: str) -> str:
    """The number's BSUID for this WABA: always the same for the same pair, different across WABAs."""
    digest = hashlib.sha256(f"bsuid/{waba_id}/{wa_id}".encode()).digest()
    number = int.from_bytes(digest[:16], "big") % (9 * 10 ** (_USER_ID_DIGITS - 1))
    return f"{country_of(wa_id)}.{10 ** (_USER_ID_DIGITS - 1) + number}"


@dataclass
class Customer:
    """One WhatsApp user as one WABA sees them."""

    waba_id: str
    user_id: str
    wa_id: str | None  # the phone number's digits; None for a customer known only by user id
    username: str | None = None

    @property
    def phone_visible(self) -> bool:
        """Whether Meta shows this customer's number: it knows one and no username hides it."""
        return self.wa_id is not None and self.username is None

    def to_json(self) -> dict[str, str | None]:
        return {
            "phone_number": "+" + self.wa_id if self.wa_id else None,
            "wa_id": self.wa_id,
            "user_id": self.user_id,
            "username": self.username,
        }


class CustomerConflict(ValueError):
    """A phone number and a user id that belong to different customers."""


class CustomerBook:
    """Customers by (WABA, number) and (WABA, user id); touched only from the simulator's loop."""

    def __init__(self) -> None:
        self._by_number: dict[tuple[str, str], Customer] = {}
        self._by_user_id: dict[tuple[str, str], Customer] = {}

    def clear(self) -> None:
        """Forget usernames and the customers known only by a user id. The numbers seen keep their
        (derived) user ids, so a user id learned before a reset still leads to its number; one a
        number moved to (`change_user_id`) goes back to the derived one."""
        for customer in self._by_number.values():
            customer.username = None
            customer.user_id = user_id_for(customer.waba_id, customer.wa_id or "")
        self._by_user_id = {(c.waba_id, c.user_id): c for c in self._by_number.values()}

    def change_user_id(self, customer: Customer, new_user_id: str) -> str:
        """Meta gives the customer a new user id (`user_changed_user_id`); returns the old one, which
        names nobody from now on. A new id another customer has is a CustomerConflict."""
        holder = self._by_user_id.get((customer.waba_id, new_user_id))
        if holder is not None and holder is not customer:
            raise CustomerConflict(f"{new_user_id} is another customer's user id")
        previous = customer.user_id
        self._by_user_id.pop((customer.waba_id, previous), None)
        customer.user_id = new_user_id
        self._by_user_id[(customer.waba_id, new_user_id)] = customer
        return previous

    def for_number(self, waba_id: str, wa_id: str) -> Customer:
        customer = self._by_number.get((waba_id, wa_id))
        if customer is None:
            customer = Customer(waba_id=waba_id, user_id=user_id_for(waba_id, wa_id), wa_id=wa_id)
            self._by_number[(waba_id, wa_id)] = customer
            self._by_user_id[(waba_id, customer.user_id)] = customer
        return customer

    def find_user_id(self, waba_id: str, user_id: str) -> Customer | None:
        return self._by_user_id.get((waba_id, user_id))

    def for_user_id(self, waba_id: str, user_id: str) -> Customer:
        """The customer with this user id; one never seen is a customer known only by it."""
        customer = self._by_user_id.get((waba_id, user_id))
        if customer is None:
            customer = Customer(waba_id=waba_id, user_id=user_id, wa_id=None)
            self._by_user_id[(waba_id, user_id)] = customer
        return customer

    def resolve(self, waba_id: str, wa_id: str | None, user_id: str | None) -> Customer:
        """The customer named by a number, a user id or both (then they must be the same customer)."""
        if wa_id is None and user_id is None:
            raise ValueError("a phone number or a user id is required")
        if wa_id is None:
            assert user_id is not None  # for mypy: checked above
            return self.for_user_id(waba_id, user_id)
        customer = self.for_number(waba_id, wa_id)
        if user_id is not None and user_id != customer.user_id:
            raise CustomerConflict(f"+{wa_id} has the user id {customer.user_id}, not {user_id}")
        return customer
