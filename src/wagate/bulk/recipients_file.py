"""A bulk send's recipients read from a CSV file or a pasted list (issue 46, point 5).

Files come as Excel saves them: separated by commas, by semicolons (its default where the decimal
separator is a comma: Azerbaijani, Russian, Turkish settings) or by tabs ("Unicode text"). The
separator is detected, every problem is reported by the line of the file it is on (counting the header,
from 1) in words, a number given twice is sent once and said so, and the service's per-recipient
rejection codes have their words here, in one place.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wagate.accounts.auth import Principal
from wagate.bulk.models import PreparedBatch
from wagate.bulk.schemas import BulkRecipient, SendBulkRequest
from wagate.bulk.service import REJECTED_INVALID_NUMBER, REJECTED_MARKETING_STOPPED, prepare_batch
from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.errors import (
    InvalidPhoneNumber,
    InvalidRequest,
    PhoneNumberRequired,
    TemplateParametersMismatch,
    WagateError,
)
from wagate.core.phones import normalize_phone_number
from wagate.core.security import SecretBox
from wagate.messages.schemas import TemplateRef

DELIMITERS = ",;\t"
DELIMITER_NAMES = {",": "commas", ";": "semicolons", "\t": "tabs"}
# The header names of the numbers' column (case ignored).
PHONE_COLUMNS = ("phone_number", "phone")
# Lines the delimiter is guessed from: enough to see a pattern, few enough to stay quick.
SNIFF_LINES = 20
# The words for each reason the service rejects a single recipient (the rest of the batch goes).
REJECTION_WORDS = {
    REJECTED_INVALID_NUMBER: "Not a phone number",
    REJECTED_MARKETING_STOPPED: "Stopped marketing messages from this business",
    PhoneNumberRequired.code: "A phone number is needed for this template",
}
_RECIPIENT_FIELD = re.compile(r"^recipients\[(\d+)\]")


def rejection_in_words(code: str | None) -> str:
    """A recipient's rejection code as a page says it; an unknown code is said as it is."""
    if code is None:
        return ""
    words = REJECTION_WORDS.get(code, code.replace("_", " "))
    return words[:1].upper() + words[1:]


@dataclass(frozen=True)
class BadLine:
    line: int
    issue: str

    def __str__(self) -> str:
        return f"Line {self.line}: {self.issue}"


@dataclass(frozen=True)
class RepeatedNumber:
    line: int
    number: str
    first_line: int

    def __str__(self) -> str:
        return f"Line {self.line} repeats {self.number} from line {self.first_line}; sent once"


@dataclass(frozen=True)
class RecipientsFile:
    """What a file gives: the recipients to send to, each with its line, and what was left out."""

    recipients: list[BulkRecipient]
    lines: list[int]  # lines[i] is the line of recipients[i]
    columns: list[str]  # the header's columns as written; empty for a list of numbers
    delimiter: str
    bad: list[BadLine] = field(default_factory=list)
    repeated: list[RepeatedNumber] = field(default_factory=list)

    @property
    def separated_by(self) -> str:
        return DELIMITER_NAMES[self.delimiter]

    @functools.cached_property
    def _line_by_number(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for recipient, line in zip(self.recipients, self.lines, strict=True):
            given = str(recipient.phone_number)
            found.setdefault(given, line)
            found.setdefault(_normalized(given), line)
        return found

    def line_of(self, number: str) -> int | None:
        """The line a number (as given, or as the service normalised it) is on."""
        return self._line_by_number.get(number)

    def without(self, dropped: dict[int, str]) -> RecipientsFile:
        """The file without the recipients at the given indexes, each reported as a bad line."""
        keep = [i for i in range(len(self.recipients)) if i not in dropped]
        bad = [*self.bad, *(BadLine(self.lines[i], issue) for i, issue in dropped.items())]
        return dataclasses.replace(
            self,
            recipients=[self.recipients[i] for i in keep],
            lines=[self.lines[i] for i in keep],
            bad=sorted(bad, key=lambda b: b.line),
        )

    def in_words(self, error: WagateError) -> list[str]:
        """The problems an error's details name, by line for a recipient's (`recipients[50]` is line
        52 of a file with a header), never by the API's field names."""
        said = []
        for detail in error.details or []:
            issue = str(detail.get("issue", ""))
            if found := _RECIPIENT_FIELD.match(str(detail.get("field", ""))):
                index = int(found.group(1))
                if index < len(self.lines):
                    said.append(str(BadLine(self.lines[index], issue)))
        return said


class BadLines(InvalidRequest):
    """Lines of a file that cannot be sent, with the choice to skip them not taken."""

    def __init__(self, bad: Sequence[BadLine]) -> None:
        count = f"{len(bad)} line{'s' if len(bad) != 1 else ''}"
        super().__init__(
            f"{count} of the list cannot be sent. Correct {'them' if len(bad) != 1 else 'it'}, or tick"
            ' "Skip the bad rows" to send the others.',
            details=[{"line": b.line, "issue": b.issue} for b in bad],
        )
        self.lines = [str(b) for b in bad]


def _normalized(given: str) -> str:
    try:
        return normalize_phone_number(given)
    except InvalidPhoneNumber:
        return given


def detect_delimiter(text: str) -> str:
    """The separator of a CSV: csv.Sniffer on its first lines, among comma, semicolon and tab; else
    the one the first line holds most of; else a comma (a list of one number per line)."""
    lines = [line for line in text.splitlines() if line.strip()][:SNIFF_LINES]
    if not lines:
        return ","
    first = lines[0]
    try:
        found = csv.Sniffer().sniff("\n".join(lines), delimiters=DELIMITERS).delimiter
    except csv.Error:
        found = ""
    # The sniffer may settle on a character the header does not even hold (a comma inside values).
    if found and found in first:
        return found
    counts = {d: first.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _rows(text: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """Each non-blank row with the line it starts on (1-based; a quoted value may span lines)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows, after = [], 0
    for row in reader:
        line, after = after + 1, reader.line_num
        cells = [cell.strip() for cell in row]
        while cells and not cells[-1]:  # Excel pads a short row with separators: not values
            cells.pop()
        if cells:
            rows.append((line, cells))
    return rows


def read_recipients(
    text: str,
    *,
    variables: list[str],
    columns_known: list[str],
    shared: dict[str, str],
    parameters: Callable[[dict[str, str]], Any],
) -> RecipientsFile:
    """The recipients of a CSV with a header (a `phone_number` or `phone` column, and one column per
    template variable, named as in `columns_known`), or of one number per line that all take the
    `shared` values. `parameters` turns a row's values into the request's `parameters`.

    Refused as a whole (InvalidRequest): nothing given, columns the template does not take, a first
    line that is neither a header nor a number. Reported by line: a row without a number, a row with
    more values than the header names, a row missing a variable's value, a number given twice."""
    delimiter = detect_delimiter(text)
    rows = _rows(text, delimiter)
    if not rows:
        raise InvalidRequest("Give at least one phone number.", details=[{"issue": "empty"}])
    header_line, header = rows[0]
    names = [cell.lower() for cell in header]
    phone_at = next((i for i, name in enumerate(names) if name in PHONE_COLUMNS), None)
    if phone_at is None:
        if len(header) > 1 and not any(ch.isdigit() for ch in header[0]):
            raise InvalidRequest(
                f"Line {header_line} ({', '.join(header)}) names no column phone_number: name the numbers'"
                " column phone_number and each other column by the template's variable.",
                details=[{"line": header_line, "issue": "no phone_number column"}],
            )
        return _list_of_numbers(rows, delimiter, variables, shared, parameters)
    columns = [cell for i, cell in enumerate(header) if i != phone_at]
    unknown = [c for c in columns if c not in columns_known]
    if unknown:
        raise InvalidRequest(
            f"The list has columns the template does not take: {', '.join(unknown)}"
            f" (its variables: {', '.join(variables) or 'none'}).",
            details=[{"line": header_line, "issue": "unknown columns"}],
        )
    found = _Collector()
    for line, cells in rows[1:]:
        if len(cells) > len(header):
            found.bad.append(
                BadLine(line, f"{len(cells)} values, but the header names {len(header)} columns")
            )
            continue
        number = cells[phone_at] if phone_at < len(cells) else ""
        if not number:
            found.bad.append(BadLine(line, "no phone number"))
            continue
        given = {c: v for c, v in zip(columns, cells[:phone_at] + cells[phone_at + 1 :], strict=False) if v}
        values = {**shared, **given}
        missing = [v for v in variables if v not in values]
        if missing:
            given_count = len(variables) - len(missing)
            found.bad.append(
                BadLine(
                    line,
                    f"{given_count} value{'s' if given_count != 1 else ''} for the template's"
                    f" {len(variables)} variables (none for {', '.join(missing)})",
                )
            )
            continue
        found.add(line, number, parameters(values) if variables else None)
    return found.file(header, delimiter)


def _list_of_numbers(
    rows: list[tuple[int, list[str]]],
    delimiter: str,
    variables: list[str],
    shared: dict[str, str],
    parameters: Callable[[dict[str, str]], Any],
) -> RecipientsFile:
    missing = [v for v in variables if v not in shared]
    if missing:
        raise InvalidRequest(
            f"The template needs a value for {', '.join(missing)}: type it in the form (the same for every"
            " number), or give a CSV whose header names a column for each.",
            details=[{"issue": "missing values"}],
        )
    found = _Collector()
    for line, cells in rows:
        if len([c for c in cells if c]) > 1:
            found.bad.append(
                BadLine(line, f"{len(cells)} values, but the list has no header naming its columns")
            )
            continue
        found.add(line, next(c for c in cells if c), parameters(shared) if variables else None)
    return found.file([], delimiter)


class _Collector:
    def __init__(self) -> None:
        self.recipients: list[BulkRecipient] = []
        self.lines: list[int] = []
        self.bad: list[BadLine] = []
        self.repeated: list[RepeatedNumber] = []
        self.seen: dict[str, int] = {}

    def add(self, line: int, number: str, parameters: Any) -> None:
        key = _normalized(number)
        if key in self.seen:  # the service would send it once too: said here, with both lines
            self.repeated.append(RepeatedNumber(line, key, self.seen[key]))
            return
        self.seen[key] = line
        self.recipients.append(BulkRecipient(phone_number=number, parameters=parameters))
        self.lines.append(line)

    def file(self, header: list[str], delimiter: str) -> RecipientsFile:
        return RecipientsFile(self.recipients, self.lines, header, delimiter, self.bad, self.repeated)


async def prepare_file_batch(
    caches: Caches,
    *,
    principal: Principal,
    channel_id: int,
    template: TemplateRef,
    recipients: RecipientsFile,
    skip_bad: bool,
    settings: Settings,
    secret_box: SecretBox,
) -> tuple[PreparedBatch, RecipientsFile]:
    """Every check of `prepare_batch` (the API's) for a file's recipients, and the file as sent: bad
    lines refuse it unless `skip_bad`, which leaves them out, with those whose values the service
    refuses (a value too long, a header link that is not public)."""
    if recipients.bad and not skip_bad:
        raise BadLines(recipients.bad)
    while True:  # each pass leaves out the recipients the service refused for their values
        if not recipients.recipients:
            raise InvalidRequest("No line of the list can be sent.", details=[{"issue": "no recipients"}])
        request = SendBulkRequest(channel_id=channel_id, template=template, recipients=recipients.recipients)
        try:
            batch = await prepare_batch(
                caches, principal=principal, request=request, settings=settings, secret_box=secret_box
            )
        except TemplateParametersMismatch as error:
            refused = {
                int(m.group(1)): str(d.get("issue", ""))
                for d in error.details or []
                if (m := _RECIPIENT_FIELD.match(str(d.get("field", ""))))
            }
            if not refused or len(refused) < len(error.details or []):
                raise  # the form's shared values: no line to leave out
            if not skip_bad:
                raise BadLines(
                    [BadLine(recipients.lines[i], issue) for i, issue in refused.items()]
                ) from None
            recipients = recipients.without(refused)
            continue
        return batch, recipients
