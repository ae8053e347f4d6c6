"""A client generated from the app's own /openapi.json by openapi-python-client (issue 13, point 5)
works: it sends an OTP, reads it back and pages the message list, as a user's code would.

The generator lives in `.venv-tools` (its pinned typer clashes with ours; `make test` installs it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support.harness import ADMIN_TOKEN, Gateway, new_number

GENERATOR = Path(__file__).resolve().parents[2] / ".venv-tools" / "bin" / "openapi-python-client"


@pytest.fixture
def generated(gateway: Gateway, tmp_path: Path) -> Iterator[ModuleType]:
    """The package openapi-python-client makes of the running app's schema, importable as
    `wagate_client`."""
    if not GENERATOR.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{GENERATOR} is missing: `make install` makes it")
        pytest.skip("openapi-python-client is not installed (`make install`)")
    spec = tmp_path / "openapi.json"
    spec.write_text(gateway.http.get(f"{gateway.url}/openapi.json").text)
    package = tmp_path / "wagate_client"
    subprocess.run(
        [str(GENERATOR), "generate", "--path", str(spec), "--meta", "none", "--output-path", str(package)],
        check=True,
        capture_output=True,
        text=True,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("wagate_client")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "wagate_client" or m.startswith("wagate_client.")]:
            del sys.modules[name]


def api(client_package: ModuleType, operation: str) -> Any:
    return importlib.import_module(f"wagate_client.api.default.{operation}")


def model(client_package: ModuleType, name: str) -> Any:
    return getattr(importlib.import_module("wagate_client.models"), name)


def test_a_generated_client_sends_reads_back_and_pages(gateway: Gateway, generated: ModuleType) -> None:
    client = generated.AuthenticatedClient(base_url=gateway.url, token=ADMIN_TOKEN)
    account = gateway.ids["acme"]
    request_model, template_model = model(generated, "SendMessageRequest"), model(generated, "TemplateRef")
    sent_ids = []
    for code in ("111111", "222222", "333333"):
        body = request_model(
            channel_id=gateway.ids["main"],
            phone_number=new_number(),
            template=template_model(name="otp_code", language="en", parameters=[code]),
        )
        answer = api(generated, "send_message").sync_detailed(account, client=client, body=body)
        assert answer.status_code == 201, answer.content
        sent_ids.append(answer.parsed.id)

    read = api(generated, "get_message").sync_detailed(account, sent_ids[-1], client=client)
    assert read.status_code == 200
    assert read.parsed.to_dict()["id"] == sent_ids[-1]

    # The list pages newest first, two at a time, through `next_before`.
    seen: list[str] = []
    before = None
    pages = 0
    while True:
        page = api(generated, "list_messages").sync_detailed(
            account,
            client=client,
            channel_id=gateway.ids["main"],
            limit=2,
            **({"before": before} if before else {}),
        )
        assert page.status_code == 200, page.content
        seen += [item.to_dict()["id"] for item in page.parsed.data]
        pages += 1
        before = page.parsed.next_before
        if not before:
            break
    assert pages == 2 and seen == sent_ids[::-1]  # this module's gateway has only these three

    missing = api(generated, "get_message").sync_detailed(
        account, "msg_00000000000000000000000000", client=client
    )
    assert missing.status_code == 404
    assert missing.parsed.error.code == "message_not_found"
