"""How the conversation list's search compares text: one folding, applied to what is stored and to
what an agent types, so that `ŞƏHLA`, `sehla` and `Şəhla` are one word, as are `elcin` and `Elçin`.

Agents here type names as their keyboard lets them: without Azerbaijani or Turkish letters, in any
case, with or without `ё`. The folding therefore
- folds case the Unicode way (`casefold`: Cyrillic, Greek and Latin alike; `İ` becomes `i` + a dot);
- maps the letters that carry no mark to drop but are typed as another one: `ə` -> `e`, the dotless i
  (U+0131) -> `i`;
- decomposes (NFKD) and drops the combining marks: `ç ş ğ ö ü` -> `c s g o u`, the dots of `ё`, the dot of
  `İ`, and compatibility forms (full-width letters, ligatures) become plain ones;
- keeps `й` (a letter of its own in Russian, not `и` with a mark).

Stored keys are folded by the same function (`contacts.search_key`, `conversations.last_message_key`),
so a search is a plain LIKE on them, on both databases.
"""

from __future__ import annotations

import re
import unicodedata

# Letters typed as another one that NFKD would not turn into it.
_LETTERS = {"ə": "e", "\u0131": "i"}  # the schwa, the dotless i
# Letters NFKD would take apart though they are letters of their own.
_KEPT = frozenset("й")
# Longest key kept for a contact: name and username, each at most a few hundred characters.
CONTACT_KEY_LENGTH = 400
# A query longer than this is cut: no name or message preview needs more to be found.
QUERY_LENGTH = 100


def fold(text: str) -> str:
    """The form search compares: no case, no diacritics (see the module)."""
    out: list[str] = []
    for char in text.casefold():
        char = _LETTERS.get(char, char)
        if char.isascii() or char in _KEPT:
            out.append(char)
            continue
        out.extend(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
    return "".join(out)


def contact_key(name: str | None, username: str | None) -> str | None:
    """A contact's stored key: its profile name and username folded, one per line (a search never
    matches across the two). None when it has neither."""
    parts = [fold(part) for part in (name, username) if part]
    return "\n".join(parts)[:CONTACT_KEY_LENGTH] if parts else None


_PHONE_LIKE = re.compile(r"[+\d\s().-]+")
_USER_ID_LIKE = re.compile(r"[A-Za-z]{2}\.[A-Za-z0-9.]*")


def phone_digits(query: str) -> str | None:
    """The digits of a query typed as a phone number (`+994 50 123`, `050-123-45-67`), when it is
    one with at least 3 digits; numbers are searched by their digits in the stored E.164 form."""
    if not _PHONE_LIKE.fullmatch(query):
        return None
    digits = "".join(c for c in query if c.isdigit())
    return digits if len(digits) >= 3 else None


def user_id_prefix(query: str) -> str | None:
    """A query that is the start of a business-scoped user id (`AZ.1349...`), as Meta writes them."""
    query = query.strip()
    return query.upper() if _USER_ID_LIKE.fullmatch(query) else None


def like_pattern(text: str) -> str:
    """`%text%` with LIKE's wildcards in `text` escaped (escape character `\\`)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
