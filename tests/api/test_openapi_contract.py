"""`/openapi.json` as a reference (API.md section 11, issue 13 point 5).

Every `/v1` operation has a short snake_case `operationId`, a description, a documented success body and
every error status it returns with the one error body (`ErrorBody`); a client that builds its requests
from the schema alone sends an OTP, reads it back and pages the message list; and schemathesis's
conformance checks hold for generated requests.

openapi-python-client is not used: 0.29.1 (the newest) requires typer<0.28 and wagate pins typer 0.29.2,
so it cannot live in the test extra; `SchemaClient` below is the minimal generic client instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from support.harness import ADMIN_TOKEN, Gateway, new_number

METHODS = ("get", "post", "put", "patch", "delete")
# `WAGATE_FUZZ_EXAMPLES=20` makes the schemathesis run twenty times as long (docs/reliability.md).
SCALE = int(os.environ.get("WAGATE_FUZZ_EXAMPLES", "1"))
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
ERROR_REF = "#/components/schemas/ErrorBody"


def spec_of(gateway: Gateway) -> dict[str, Any]:
    response = gateway.http.get(f"{gateway.url}/openapi.json")
    assert response.status_code == 200
    spec: dict[str, Any] = response.json()
    return spec


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def test_only_v1_operations_are_published(gateway: Gateway) -> None:
    spec = spec_of(gateway)
    assert spec["paths"], "no operations"
    assert all(path.startswith("/v1/") for path in spec["paths"]), sorted(spec["paths"])
    ids = sorted(op["operationId"] for _, _, op in operations(spec))
    assert ids == sorted(
        [
            "send_message",
            "get_message",
            "check_window",
            "list_messages",
            "list_message_deliveries",
            "send_bulk_messages",
            "get_bulk_message",
            "list_channels",
            "list_templates",
            "list_webhooks",
            "create_webhook",
            "update_webhook",
            "delete_webhook",
            "list_webhook_deliveries",
            "redeliver_webhook_delivery",
            "get_usage",
            "list_audit_log",
        ]
    )
    assert gateway.http.get(f"{gateway.url}/docs").status_code == 200


def test_every_operation_is_documented(gateway: Gateway) -> None:
    spec = spec_of(gateway)
    error_schema = spec["components"]["schemas"]["ErrorBody"]
    assert error_schema["required"] == ["error"]
    for path, method, op in operations(spec):
        where = f"{method.upper()} {path}"
        operation_id = op["operationId"]
        assert SNAKE.match(operation_id), where
        assert "v1" not in operation_id and "account" not in operation_id, where
        assert len(op.get("description", "")) > 40, where
        assert op.get("summary"), where
        responses = op["responses"]
        successes = [status for status in responses if status.startswith("2")]
        assert successes, where
        for status in successes:
            if status == "204":
                continue
            content = responses[status].get("content", {})
            media: dict[str, Any] = content.get("application/json") or next(iter(content.values()), {})
            assert "schema" in media or "example" in media, (where, status)
            model = spec["components"]["schemas"].get(
                media.get("schema", {}).get("$ref", "/").rsplit("/")[-1]
            )
            examples = [media, model or {}]
            assert any("example" in e or "examples" in e for e in examples), (where, status, "no example")
        expected = {"401", "422"}
        if "{account_id}" in path:
            expected.add("403")
        if "{" in path.replace("{account_id}", ""):
            expected.add("404")
        if "requestBody" in op:
            expected |= {"413"}
            body = op["requestBody"]["content"]["application/json"]
            assert "examples" in body or "example" in body, (where, "no request example")
        assert expected <= set(responses), (where, sorted(expected - set(responses)))
        assert "422" in responses  # FastAPI's own `HTTPValidationError` is replaced by ours
        for status, response in responses.items():
            if status[0] in "45":
                body = response["content"]["application/json"]
                assert body["schema"] == {"$ref": ERROR_REF}, (where, status)
                assert body["example"]["error"]["code"], (where, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_the_documented_404_codes_are_the_ones_answered(gateway: Gateway) -> None:
    spec = spec_of(gateway)
    op = spec["paths"]["/v1/accounts/{account_id}/whatsapp/messages/{message_id}"]["get"]
    documented = op["responses"]["404"]["content"]["application/json"]["example"]["error"]["code"]
    response = gateway.http.get(gateway.v1("/whatsapp/messages/msg_unknown"), headers=gateway.headers())
    assert response.status_code == 404
    assert response.json()["error"]["code"] == documented


class SchemaClient:
    """A client that knows nothing of wagate but `/openapi.json`: operations by `operationId`, requests
    built from their declared parameters (an undeclared one is a bug of the test or the schema), and
    answers checked against the documented statuses and required fields."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        self.spec: dict[str, Any] = self.http.get("/openapi.json").json()
        self.ops = {op["operationId"]: (path, method, op) for path, method, op in operations(self.spec)}

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            schema = self.spec["components"]["schemas"][name]
        return schema

    def call(self, operation_id: str, body: dict[str, Any] | None = None, **params: Any) -> httpx.Response:
        path, method, op = self.ops[operation_id]
        declared = {p["name"]: p for p in op.get("parameters", [])}
        assert set(params) <= set(declared), sorted(set(params) - set(declared))
        for name, parameter in declared.items():
            if parameter.get("required"):
                assert name in params, f"{operation_id} needs {name}"
        path_params = {k: v for k, v in params.items() if declared[k]["in"] == "path"}
        query = {k: v for k, v in params.items() if declared[k]["in"] == "query"}
        url = path.format(**path_params)
        if body is not None:
            schema = self.resolve(op["requestBody"]["content"]["application/json"]["schema"])
            assert set(body) <= set(schema["properties"]), sorted(set(body) - set(schema["properties"]))
        response = self.http.request(method.upper(), url, params=query, json=body)
        documented = op["responses"].get(str(response.status_code))
        assert documented is not None, (operation_id, response.status_code, response.text)
        schema = documented.get("content", {}).get("application/json", {}).get("schema")
        if schema is not None:
            resolved = self.resolve(schema)
            for field in resolved.get("required", []):
                assert field in response.json(), (operation_id, field)
        return response


def test_a_client_built_from_the_schema_sends_reads_and_pages(gateway: Gateway) -> None:
    client = SchemaClient(gateway.url, ADMIN_TOKEN)
    account_id = gateway.ids["acme"]
    number = new_number()
    channels = client.call("list_channels", account_id=account_id).json()["data"]
    channel_id = next(c["channel_id"] for c in channels if c["channel_id"] == gateway.ids["main"])
    sent = []
    for code in ("111111", "222222", "333333"):
        otp = {"name": "otp_code", "language": "en", "parameters": [code]}
        response = client.call(
            "send_message",
            {"channel_id": channel_id, "phone_number": number, "template": otp},
            account_id=account_id,
        )
        assert response.status_code == 201, response.text
        sent.append(response.json()["id"])
    message = client.call("get_message", account_id=account_id, message_id=sent[0]).json()
    assert message["id"] == sent[0]
    assert message["template"]["parameters"] == ["111111"]

    seen: list[str] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"account_id": account_id, "phone_number": number, "limit": 2}
        if before is not None:
            params["before"] = before
        page = client.call("list_messages", **params).json()
        seen += [m["id"] for m in page["data"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == list(reversed(sent))

    error = client.call("get_message", account_id=account_id, message_id="msg_none")
    assert error.status_code == 404


def test_schemathesis_conformance(gateway: Gateway) -> None:
    """Generated requests (positive and negative) to every operation of `/openapi.json`: the status, the
    content type, the headers and the body of each answer conform to the schema, and no 5xx. Ids of
    the account's channels are mixed in so that requests reach past the account and channel checks."""
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.core.result import Ok
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    schema = schemathesis.openapi.from_dict(spec_of(gateway))
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    account_id = gateway.ids["acme"]
    channel_ids = st.sampled_from([gateway.ids["main"], gateway.ids["main"], 999_999])
    tried: list[str] = []
    answered: list[tuple[str, int]] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        tried.append(operation.label)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @settings(
                max_examples=12 * SCALE,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy, channel_id=channel_ids, ours=st.booleans())
            def conforms(case: Any, channel_id: int, ours: bool) -> None:
                if ours and isinstance(case.path_parameters, dict):
                    case.path_parameters["account_id"] = account_id
                if ours and isinstance(case.body, dict) and "channel_id" in case.body:
                    case.body["channel_id"] = channel_id
                response = case.call(base_url=gateway.url, headers=headers)
                case.validate_response(response, checks=checks, headers=headers)

            conforms()
        # The documented request examples too: random bodies seldom pass every rule of a send.
        request = (
            operation.definition.raw.get("requestBody", {}).get("content", {}).get("application/json", {})
        )
        for example in request.get("examples", {}).values():
            params = {name: 1 for name in re.findall(r"{(\w+)}", operation.path)} | {"account_id": account_id}
            case = operation.Case(
                path_parameters=params, body=example["value"], media_type="application/json"
            )
            response = case.call(base_url=gateway.url, headers=headers)
            answered.append((operation.label, response.status_code))
            case.validate_response(response, checks=checks, headers=headers)
    assert ("POST /v1/accounts/{account_id}/whatsapp/messages", 201) in answered, answered
    assert len(tried) == 17
