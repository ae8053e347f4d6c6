"""Any header value, on any operation (issue 14, point 1): generated `Authorization`, `Idempotency-Key`,
`Content-Type`, `Accept`, Meta's signature and made-up headers, sent with each `/v1` operation of the
running app's `/openapi.json` and to Meta's receiver, on both databases: never a 5xx, always the
contract's error body for a refusal. (schemathesis varies the bodies, paths and queries; the headers it
leaves mostly alone.)"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.harness import ADMIN_TOKEN, Gateway, new_number

SCALE = int(os.environ.get("WAGATE_FUZZ_EXAMPLES", "1"))
# What an HTTP client can put in a header value: visible Latin-1, spaces and tabs (no line breaks).
HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=300
)
ODD = st.sampled_from(
    [
        "",
        " ",
        "Bearer",
        "Bearer ",
        f"Bearer {ADMIN_TOKEN} extra",
        f"bearer {ADMIN_TOKEN}",
        "Basic YTpi",
        "x" * 8000,
        "application/json; charset=latin-1",
        "text/csv",
        "*/*;q=0",
        "multipart/form-data",
        "sha256=",
        "sha256=" + "0" * 64,
        "ü" * 40,
    ]
)
VALUE = HEADER_TEXT | ODD


def operations(gateway: Gateway) -> list[tuple[str, str]]:
    spec = gateway.http.get(f"{gateway.url}/openapi.json").json()
    return [(method.upper(), path) for path, item in spec["paths"].items() for method in item]


def test_no_header_value_gets_a_5xx(gateway: Gateway) -> None:
    ops = [*operations(gateway), ("POST", "/webhooks/whatsapp")]
    body = {
        "channel_id": gateway.ids["main"],
        "phone_number": new_number(),
        "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
    }

    @settings(
        max_examples=len(ops) * 10 * SCALE,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        op=st.sampled_from(ops),
        authorization=st.one_of(st.just(f"Bearer {ADMIN_TOKEN}"), VALUE, st.none()),
        others=st.dictionaries(
            st.sampled_from(
                [
                    "Idempotency-Key",
                    "Content-Type",
                    "Accept",
                    "X-Hub-Signature-256",
                    "Content-Encoding",
                    "Transfer-Encoding",
                    "Expect",
                    "X-Forwarded-For",
                    "Cookie",
                    "X-Anything",
                ]
            ),
            VALUE,
            max_size=4,
        ),
    )
    def request(op: tuple[str, str], authorization: str | None, others: dict[str, str]) -> None:
        method, template = op
        path = re.sub(r"{account_id}", str(gateway.ids["acme"]), template)
        path = re.sub(r"{\w+}", "1", path)
        headers: dict[str, Any] = {k: v.encode("latin-1") for k, v in others.items()}  # bytes as sent
        if authorization is not None:
            headers["Authorization"] = authorization.encode("latin-1")
        try:
            response = gateway.http.request(
                method,
                gateway.url + path,
                json=body if method in ("POST", "PATCH") else None,
                headers=headers,
                params={"phone_number": new_number(), "channel_id": gateway.ids["main"]},
            )
        except httpx.LocalProtocolError:
            return  # a header this client itself refuses to send (e.g. Transfer-Encoding with a body)
        assert response.status_code < 500, (method, path, headers, response.status_code, response.text[:300])
        if response.status_code >= 400 and response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            assert set(response.json()) == {"error"}, response.text[:300]

    request()
