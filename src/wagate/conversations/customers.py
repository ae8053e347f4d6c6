"""Customers as Meta shows them since 2026 (API.md section 13): a number, business-scoped user ids, or both.

Every status and customer message may name a customer by number (`wa_id`), by user id, or by both. The
gateway learns the pair wherever Meta shows it, so that a customer who later hides their number behind
a username is still the number's customer: the same conversation, the same window.

The rules, in one place:
- a user id seen with a number belongs to that number's contact (made when new);
- a user id never seen before, without a number, starts a contact of its own (no number);
- such a contact that later shows its number takes the number, unless the number already has a
  contact: then the user id moves to that one, and what was said before stays where it was;
- names and usernames are kept as Meta last showed them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session

from wagate.conversations.models import (
    CONTACT_NAME_LENGTH,
    PHONE_NUMBER_LENGTH,
    USER_ID_LENGTH,
    USERNAME_LENGTH,
    Contact,
    CustomerId,
)
from wagate.conversations.repository.writes import (
    contacts_of_numbers,
    insert_customer_id,
    insert_customer_ids,
)
from wagate.conversations.search import contact_key
from wagate.core.db import dialect_name, utcnow
from wagate.core.tables import for_each_value, table_of
from wagate.whatsapp.payloads import CustomerRef


def phone_of_wa_id(wa_id: str) -> str:
    """The E.164 number of Meta's `wa_id` (the number's digits, which Meta has already normalised).
    Not parsed again: this runs for every status, and a customer's message is stored even when their
    number is one `phonenumbers` does not know yet. Cut to what the column holds: no number of Meta's
    is this long, and a row that does not fit would fail the whole batch of webhooks with it."""
    return ("+" + wa_id.lstrip("+"))[:PHONE_NUMBER_LENGTH]


@dataclass
class Customers:
    """The contacts of the customers one round of webhooks named, by user id and by number."""

    by_user_id: dict[str, int] = field(default_factory=dict)
    by_phone: dict[str, int] = field(default_factory=dict)
    phone_of: dict[int, str | None] = field(default_factory=dict)

    def contact_of(self, *, phone_number: str | None, user_id: str | None) -> int | None:
        if user_id is not None and user_id in self.by_user_id:
            return self.by_user_id[user_id]
        return self.by_phone.get(phone_number) if phone_number else None


def _clip(value: str | None, length: int) -> str | None:
    return value[:length] if value else None


def learn_customers(
    session: Session,
    *,
    account_id: int,
    refs: Iterable[CustomerRef],
    known_only: Iterable[CustomerRef] = (),
) -> Customers:
    """Record what `refs` show about the account's customers (see the module's rules) and return their
    contacts. `known_only`: sightings that teach about customers the account already has (statuses:
    another tool sending from the same number must not fill the account with strangers). A handful
    of statements for any number of them; none is written when nothing is new."""
    sightings: dict[str, CustomerRef] = {}
    may_create: set[str] = set()
    for ref, creates in [(ref, True) for ref in refs] + [(ref, False) for ref in known_only]:
        if ref.user_id is not None and len(ref.user_id) > USER_ID_LENGTH:
            ref = CustomerRef(ref.wa_id, None, None, ref.name, ref.username)  # not a user id of Meta's
        key = ref.user_id or ref.wa_id
        if key is None:
            continue
        if creates:
            may_create.add(key)
        phone = phone_of_wa_id(ref.wa_id) if ref.wa_id else None
        seen = sightings.get(key)
        # Several items about one customer in a batch: keep the most each one showed.
        sightings[key] = CustomerRef(
            phone or (seen.wa_id if seen else None),
            ref.user_id,
            _clip(ref.parent_user_id, USER_ID_LENGTH) or (seen.parent_user_id if seen else None),
            _clip(ref.name, CONTACT_NAME_LENGTH) or (seen.name if seen else None),
            _clip(ref.username, USERNAME_LENGTH) or (seen.username if seen else None),
        )
    customers = Customers()
    if not sightings:
        return customers
    user_ids = {s.user_id for s in sightings.values() if s.user_id}
    phones = {s.wa_id for s in sightings.values() if s.wa_id}
    # Core rows, not ORM objects (see _contacts_of_user_ids).
    dialect = dialect_name(session)
    contacts: dict[int, _ContactRow] = {}
    known: dict[str, int] = {}
    if user_ids:
        for user_id, found_id, phone_number, name, username in session.connection().execute(
            _contacts_of_user_ids(dialect), {"account_id": account_id, "user_ids": list(user_ids)}
        ):
            contact = _ContactRow(found_id, phone_number, name, username)
            known[user_id] = contact.id
            contacts[contact.id] = contact
    missing_phones = phones - {c.phone_number for c in contacts.values()}
    if missing_phones:
        for row in session.connection().execute(
            _contacts_of_numbers(dialect), {"account_id": account_id, "phones": list(missing_phones)}
        ):
            contacts[row[0]] = _ContactRow(row[0], row[1], row[2], row[3])
    by_phone = {c.phone_number: c.id for c in contacts.values() if c.phone_number}
    new_numbers = [
        s.wa_id
        for key, s in sightings.items()
        if key in may_create
        and s.wa_id
        and s.wa_id not in by_phone
        and not (s.user_id in known and contacts[known[s.user_id]].phone_number is None)
    ]
    if new_numbers:
        for number, new_contact in contacts_of_numbers(
            session, account_id=account_id, phone_numbers=list(dict.fromkeys(new_numbers))
        ).items():
            by_phone[number] = new_contact
            contacts[new_contact] = _ContactRow(new_contact, number, None, None)
    bindings: dict[str, tuple[int, str | None]] = {}  # new user id -> (contact, parent user id)
    for key, sighting in sightings.items():
        if key not in may_create and sighting.user_id not in known and sighting.wa_id not in by_phone:
            continue
        contact_id = known.get(sighting.user_id) if sighting.user_id else None
        phone = sighting.wa_id
        number_contact = by_phone.get(phone) if phone else None
        # A customer known by user id alone shows their number: it is theirs (new_numbers left it out
        # for this). A status naming another number for a customer who has one makes nothing of it.
        if (
            phone
            and number_contact is None
            and contact_id is not None
            and contacts[contact_id].phone_number is None
        ):
            session.execute(update(Contact).where(Contact.id == contact_id).values(phone_number=phone))
            contacts[contact_id] = contacts[contact_id]._replace(phone_number=phone)
            by_phone[phone] = number_contact = contact_id
        if number_contact is not None:
            if sighting.user_id is not None and contact_id != number_contact:
                if contact_id is None:
                    bindings[sighting.user_id] = (number_contact, sighting.parent_user_id)
                else:
                    _move_user_id(session, account_id, sighting.user_id, number_contact)
            contact_id = number_contact
        elif contact_id is None:
            assert sighting.user_id is not None  # keyed by user id or by number
            contact_id = _contact_of_new_user_id(session, account_id, sighting)
            contacts[contact_id] = _ContactRow(contact_id, None, None, None)
        if sighting.user_id is not None:
            known[sighting.user_id] = contact_id
        _update_profile(session, contacts, contact_id, sighting)
    if bindings:
        _bind_user_ids(session, account_id, bindings)
    customers.by_user_id = known
    customers.by_phone = by_phone
    customers.phone_of = {contact_id: contacts[contact_id].phone_number for contact_id in known.values()}
    customers.phone_of |= {contact_id: phone for phone, contact_id in by_phone.items()}
    return customers


class _ContactRow(NamedTuple):
    id: int
    phone_number: str | None
    name: str | None
    username: str | None


_CONTACT_COLUMNS = (Contact.id, Contact.phone_number, Contact.name, Contact.username)


# Built once per dialect, with the values bound at execution: these run for every batch of Meta's statuses.
@cache
def _contacts_of_user_ids(dialect: str) -> Select[*tuple[Any, ...]]:
    query = (
        select(CustomerId.user_id, *_CONTACT_COLUMNS)
        .join(Contact, Contact.id == CustomerId.contact_id)
        .where(CustomerId.account_id == bindparam("account_id"))
    )
    if dialect == "postgresql":  # one lookup per user id (account, user id is unique)
        return for_each_value(query, table_of(CustomerId).c.user_id, "user_ids")
    return query.where(CustomerId.user_id.in_(bindparam("user_ids", expanding=True)))


@cache
def _contacts_of_numbers(dialect: str) -> Select[*tuple[Any, ...]]:
    query = select(*_CONTACT_COLUMNS).where(Contact.account_id == bindparam("account_id"))
    if dialect == "postgresql":  # one lookup per number (account, number is unique)
        return for_each_value(query, table_of(Contact).c.phone_number, "phones")
    return query.where(Contact.phone_number.in_(bindparam("phones", expanding=True)))


def _update_profile(
    session: Session, contacts: dict[int, _ContactRow], contact_id: int, sighting: CustomerRef
) -> None:
    """The name and username as Meta shows them now (one statement, only when they changed)."""
    contact = contacts[contact_id]
    name = sighting.name or contact.name
    username = sighting.username or contact.username
    if (name, username) != (contact.name, contact.username):
        # The search key with them, in the same statement (conversations/search.py).
        session.execute(
            update(Contact)
            .where(Contact.id == contact_id)
            .values(name=name, username=username, search_key=contact_key(name, username))
        )
        contacts[contact_id] = contact._replace(name=name, username=username)


def _bind_user_ids(session: Session, account_id: int, bindings: dict[str, tuple[int, str | None]]) -> None:
    """Bind new user ids to their contacts, one statement; a user id another writer bound meanwhile
    (PostgreSQL, two workers) moves to the contact the number decides."""
    inserted = insert_customer_ids(
        session,
        [
            {"account_id": account_id, "user_id": user_id, "parent_user_id": parent, "contact_id": contact_id}
            for user_id, (contact_id, parent) in bindings.items()
        ],
    )
    for user_id in bindings.keys() - inserted:
        _move_user_id(session, account_id, user_id, bindings[user_id][0])


def _move_user_id(session: Session, account_id: int, user_id: str, contact_id: int) -> None:
    session.execute(
        update(CustomerId)
        .where(CustomerId.account_id == account_id, CustomerId.user_id == user_id)
        .values(contact_id=contact_id)
    )


def _contact_of_new_user_id(session: Session, account_id: int, sighting: CustomerRef) -> int:
    """A contact without a number for a user id never seen; the one another writer made meanwhile
    when it won the race."""
    assert sighting.user_id is not None
    contact = Contact(account_id=account_id, phone_number=None, created_at=utcnow())
    session.add(contact)
    session.flush()
    if insert_customer_id(
        session,
        account_id=account_id,
        user_id=sighting.user_id,
        parent_user_id=sighting.parent_user_id,
        contact_id=contact.id,
    ):
        return contact.id
    session.delete(contact)
    session.flush()
    winner = session.scalar(
        select(CustomerId.contact_id).where(
            CustomerId.account_id == account_id, CustomerId.user_id == sighting.user_id
        )
    )
    assert winner is not None
    return winner
