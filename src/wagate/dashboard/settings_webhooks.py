"""Settings > Workspace settings > Integrations > Webhook (issue 12, point 1; API.md section 12).

Administrators add, edit, enable, disable and delete the account's webhooks, send one a test event,
and read each one's deliveries with their attempts, re-delivering any of them. Every action calls the
same service function as the API (wagate.events.service), so the rules and the SSRF guard are one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from wagate.accounts.service import SessionUser
from wagate.api.deps import Gateway, GatewayDep
from wagate.core.errors import WagateError
from wagate.dashboard.views import PathId, error_words
from wagate.dashboard.web import current_administrator, error_page, posted_form, render
from wagate.events import service
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, EventKind, Webhook
from wagate.events.schemas import CreateWebhookRequest, UpdateWebhookRequest

router = APIRouter(include_in_schema=False)
Admin = Annotated[SessionUser, Depends(current_administrator)]
DeliveryId = Annotated[str, Path(min_length=1, max_length=40)]

BASE = "/settings/integrations/webhooks"
WEBHOOKS_PER_PAGE = 10
RECENT_DELIVERIES = 5  # under each webhook of the list
DELIVERIES_PER_PAGE = 20  # on a webhook's own page
# While a webhook waits for its first delivery or one is under way, its deliveries are fetched again.
POLL = "every 3s"

EVENT_LABELS: dict[str, str] = {
    EventKind.message_updated.value: "Message updated",
    EventKind.message_created.value: "Message created",
    EventKind.conversation_status_changed.value: "Conversation status changed",
    EventKind.batch_completed.value: "Batch completed",
    EventKind.template_updated.value: "Template updated",
}
STATE_LABELS = {
    DeliveryState.pending.value: "Pending",
    DeliveryState.delivered.value: "Delivered",
    DeliveryState.failed.value: "Failed",
}
# What a page says after an action (the redirect carries the key only, never text).
DONE = {
    "saved": "Saved. The change applies at once.",
    "enabled": "Enabled: new events go to this webhook again. Deliveries that failed meanwhile can be "
    "redelivered.",
    "disabled": "Disabled: the webhook gets no events until it is enabled again; its pending deliveries "
    "were given up.",
    "deleted": "The webhook was deleted, with its deliveries.",
    "test": "A test event is on its way; it shows in the deliveries below.",
    "redelivered": "Sent again, with the same webhook-id.",
}


# What the templates show, made from what the service returns.


@dataclass(frozen=True)
class AttemptItem:
    at: Any
    succeeded: bool
    status_code: int | None
    latency_ms: int
    error: str | None
    response: str | None


@dataclass(frozen=True)
class DeliveryItem:
    id: str
    event: str
    state: str
    state_label: str
    test: bool
    created_at: Any
    finished_at: Any
    attempts: list[AttemptItem]
    payload: str  # indented JSON

    @property
    def last(self) -> AttemptItem | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def finished(self) -> bool:
        return self.state != DeliveryState.pending.value


def delivery_item(delivery: Delivery, attempts: Sequence[DeliveryAttempt]) -> DeliveryItem:
    body = delivery.body if isinstance(delivery.body, dict) else {}
    return DeliveryItem(
        id=delivery.id,
        event=EVENT_LABELS.get(delivery.kind.value, delivery.kind.value),
        state=delivery.state.value,
        state_label=STATE_LABELS[delivery.state.value],
        test=body.get("test") is True,
        created_at=delivery.created_at,
        finished_at=delivery.finished_at,
        attempts=[
            AttemptItem(a.attempted_at, a.succeeded, a.status_code, a.latency_ms, a.error, a.response)
            for a in attempts
        ],
        payload=orjson.dumps(delivery.body, option=orjson.OPT_INDENT_2).decode(),
    )


@dataclass(frozen=True)
class DeliveryPage:
    webhook_id: int
    items: list[DeliveryItem]
    next_before: str | None  # the id to list older ones from, when there are more
    before: str | None  # this page's cursor (None: the newest)
    limit: int
    enabled: bool

    @property
    def poll(self) -> bool:
        """Fetch again while something may change soon: the newest page of an enabled webhook that
        has no delivery yet or one under way."""
        waiting = not self.items or any(not d.finished for d in self.items)
        return self.enabled and self.before is None and waiting


@dataclass(frozen=True)
class WebhookItem:
    id: int
    url: str
    events: list[str]  # labels
    event_values: list[str]
    enabled: bool
    disabled_reason: str | None
    consecutive_failures: int
    failing_since: Any
    created_at: Any


def webhook_item(webhook: Webhook) -> WebhookItem:
    values = [e for e in EVENT_LABELS if e in webhook.events]
    return WebhookItem(
        id=webhook.id,
        url=webhook.url,
        events=[EVENT_LABELS[e] for e in values],
        event_values=values,
        enabled=webhook.enabled,
        disabled_reason=webhook.disabled_reason,
        consecutive_failures=webhook.consecutive_failures or 0,
        failing_since=webhook.failing_since,
        created_at=webhook.created_at,
    )


@dataclass(frozen=True)
class WebhookForm:
    """What the administrator typed, shown again with the error when it is refused."""

    url: str = ""
    events: tuple[str, ...] = (EventKind.message_updated.value,)
    error: str | None = None
    field: str | None = None  # `url` or `events`: the input the error is about


def _posted_webhook(form: Mapping[str, str]) -> tuple[str, list[str]]:
    """The URL and the ticked events (`event:<kind>` checkboxes, since a form field keeps one value)."""
    events = [kind for kind in EVENT_LABELS if form.get(f"event:{kind}")]
    return form.get("url", "").strip(), events


def _refusal(exc: ValidationError) -> tuple[str, str]:
    """The first problem of a refused form, in the page's words, and the field it is about."""
    error = exc.errors()[0]
    field = str(error.get("loc", ("url",))[0])
    if field == "events":
        return "Choose at least one event.", "events"
    if error.get("type") == "string_too_short":
        return "Enter the URL the events are to be posted to.", "url"
    issue = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return f"The URL is not valid: {issue}.", "url"


def _error_field(error: WagateError) -> str:
    fields = {str(d.get("field")) for d in error.details or []}
    return "events" if "events" in fields else "url"


async def _deliveries(
    gateway: Gateway, user: SessionUser, webhook: WebhookItem, *, before: str | None, limit: int
) -> DeliveryPage:
    async with gateway.db.read() as session:
        found = await service.webhook_deliveries(
            session,
            account_id=user.principal.account_id,
            webhook_id=webhook.id,
            before=before,
            limit=limit + 1,
        )
    shown = found[:limit]
    return DeliveryPage(
        webhook_id=webhook.id,
        items=[delivery_item(d, a) for d, a in shown],
        next_before=shown[-1][0].id if len(found) > limit else None,
        before=before,
        limit=limit,
        enabled=webhook.enabled,
    )


async def _webhook(gateway: Gateway, user: SessionUser, webhook_id: int) -> WebhookItem:
    async with gateway.db.read() as session:
        found = await service.find_webhook(
            session, account_id=user.principal.account_id, webhook_id=webhook_id
        )
    return webhook_item(found)


def _back(form: Mapping[str, str], webhook_id: int | None = None) -> str:
    """Where an action returns to: the page its form was on (one of ours only)."""
    target = form.get("back", "")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(BASE) or "\\" in target:
        return f"{BASE}/{webhook_id}" if webhook_id is not None else BASE
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _done(target: str, done: str, webhook_id: int | None = None) -> RedirectResponse:
    """303 to `target` (a path of ours, see `_back`) saying what was done, at the webhook's card."""
    path, _, query = target.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("done=")]
    anchor = f"#webhook-{webhook_id}" if webhook_id is not None and path == BASE else ""
    return RedirectResponse(f"{path}?{'&'.join([*kept, f'done={done}'])}{anchor}", status_code=303)


def _here(request: Request) -> str:
    """This page's path and query without the notice: what the forms on it return to."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k == "page" or k == "before"]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


async def _list_page(
    request: Request,
    gateway: Gateway,
    user: SessionUser,
    *,
    page: int = 1,
    form: WebhookForm | None = None,
    created: service.CreatedWebhook | None = None,
    status_code: int = 200,
    replace_url: str | None = None,
) -> HTMLResponse:
    async with gateway.db.read() as session:
        webhooks = await service.list_webhooks(session, account_id=user.principal.account_id)
    pages = max(1, -(-len(webhooks) // WEBHOOKS_PER_PAGE))
    page = min(page, pages)
    if created is not None:  # the new one leads the list, secret and all
        page = pages
    shown = [webhook_item(w) for w in webhooks[(page - 1) * WEBHOOKS_PER_PAGE : page * WEBHOOKS_PER_PAGE]]
    deliveries = {
        w.id: await _deliveries(gateway, user, w, before=None, limit=RECENT_DELIVERIES) for w in shown
    }
    return render(
        request,
        "settings_webhooks.html",
        status_code=status_code,
        webhooks=shown,
        deliveries=deliveries,
        total=len(webhooks),
        page=page,
        pages=pages,
        form=form or WebhookForm(),
        created=created,
        event_labels=EVENT_LABELS,
        notice=DONE.get(request.query_params.get("done", "")),
        back=BASE + (f"?page={page}" if page > 1 else ""),
        replace_url=replace_url,
    )


async def _webhook_page(
    request: Request,
    gateway: Gateway,
    user: SessionUser,
    webhook_id: int,
    *,
    before: str | None = None,
    problem: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    webhook = await _webhook(gateway, user, webhook_id)
    page = await _deliveries(gateway, user, webhook, before=before, limit=DELIVERIES_PER_PAGE)
    return render(
        request,
        "settings_webhooks_detail.html",
        status_code=status_code,
        webhook=webhook,
        page=page,
        notice=DONE.get(request.query_params.get("done", "")),
        problem=problem,
        back=_here(request) if problem is None else f"{BASE}/{webhook_id}",
        # Answered to a POST: in history as the webhook's page, so a reload does not post again.
        replace_url=None if problem is None else f"{BASE}/{webhook_id}",
    )


# The pages.


@router.get(BASE)
async def webhooks_page(
    request: Request,
    gateway: GatewayDep,
    user: Admin,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    return await _list_page(request, gateway, user, page=page)


@router.post(BASE)
async def create_webhook(request: Request, gateway: GatewayDep, user: Admin) -> HTMLResponse:
    """`Create webhook`: the page again, with the new webhook's secret shown this once."""
    form = await posted_form(request, user)
    url, events = _posted_webhook(form)
    try:
        body = CreateWebhookRequest.model_validate({"url": url, "events": events})
        created = await service.add_webhook(
            gateway, account_id=user.principal.account_id, url=body.url, events=body.events, by=user.principal
        )
    except ValidationError as exc:
        message, field = _refusal(exc)
        refused = WebhookForm(url=url, events=tuple(events), error=message, field=field)
        return await _list_page(request, gateway, user, form=refused, status_code=422, replace_url=BASE)
    except WagateError as error:
        refused = WebhookForm(
            url=url, events=tuple(events), error=error_words(error), field=_error_field(error)
        )
        return await _list_page(
            request, gateway, user, form=refused, status_code=error.status_code, replace_url=BASE
        )
    # In history as the page's GET address: a reload neither shows the secret again nor posts again.
    return await _list_page(request, gateway, user, created=created, replace_url=BASE)


@router.get(BASE + "/{webhook_id}")
async def webhook_page(
    request: Request,
    gateway: GatewayDep,
    user: Admin,
    webhook_id: Annotated[int, PathId],
    before: Annotated[str | None, Query(max_length=40)] = None,
) -> HTMLResponse:
    """One webhook and all its deliveries, newest first, a page at a time."""
    try:
        return await _webhook_page(request, gateway, user, webhook_id, before=before)
    except WagateError as error:
        return error_page(request, error)


@router.get(BASE + "/{webhook_id}/deliveries")
async def deliveries_part(
    request: Request,
    gateway: GatewayDep,
    user: Admin,
    webhook_id: Annotated[int, PathId],
    limit: Annotated[int, Query(ge=1, le=DELIVERIES_PER_PAGE)] = RECENT_DELIVERIES,
    back: Annotated[str, Query(max_length=200)] = BASE,
) -> HTMLResponse:
    """The newest deliveries of a webhook: what a page fetches again while one is under way."""
    try:
        webhook = await _webhook(gateway, user, webhook_id)
        page = await _deliveries(gateway, user, webhook, before=None, limit=limit)
    except WagateError as error:
        return error_page(request, error)
    return render(
        request, "settings_webhooks_deliveries.html", page=page, back=_back({"back": back}), webhook=webhook
    )


@router.get(BASE + "/{webhook_id}/edit")
async def edit_page(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> HTMLResponse:
    try:
        webhook = await _webhook(gateway, user, webhook_id)
    except WagateError as error:
        return error_page(request, error)
    form = WebhookForm(url=webhook.url, events=tuple(webhook.event_values))
    return render(
        request, "settings_webhooks_edit.html", webhook=webhook, form=form, event_labels=EVENT_LABELS
    )


@router.post(BASE + "/{webhook_id}/edit")
async def edit_webhook(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> Response:
    form = await posted_form(request, user)
    url, events = _posted_webhook(form)
    try:
        webhook = await _webhook(gateway, user, webhook_id)
    except WagateError as error:
        return error_page(request, error)
    try:
        body = UpdateWebhookRequest.model_validate({"url": url, "events": events})
        await service.change_webhook(
            gateway,
            account_id=user.principal.account_id,
            webhook_id=webhook_id,
            url=body.url,
            events=body.events,
            by=user.principal,
        )
    except ValidationError as exc:
        message, field = _refusal(exc)
        refused = WebhookForm(url=url, events=tuple(events), error=message, field=field)
        status_code = 422
    except WagateError as error:
        if error.status_code == 404:
            return error_page(request, error)
        refused = WebhookForm(
            url=url, events=tuple(events), error=error_words(error), field=_error_field(error)
        )
        status_code = error.status_code
    else:
        return _done(f"{BASE}/{webhook_id}", "saved")
    return render(
        request,
        "settings_webhooks_edit.html",
        status_code=status_code,
        webhook=webhook,
        form=refused,
        event_labels=EVENT_LABELS,
        replace_url=f"{BASE}/{webhook_id}/edit",
    )


async def _action(
    request: Request,
    gateway: Gateway,
    user: SessionUser,
    webhook_id: int,
    form: Mapping[str, str],
    done: str,
    act: Any,
) -> Response:
    """Run one action on a webhook; back to the page it was taken on, or its refusal shown on the
    webhook's page (a missing webhook: the error page)."""
    try:
        await act()
    except WagateError as error:
        if error.status_code == 404:
            return error_page(request, error)
        try:
            return await _webhook_page(
                request, gateway, user, webhook_id, problem=error.message, status_code=error.status_code
            )
        except WagateError as gone:
            return error_page(request, gone)
    return _done(_back(form, webhook_id), done, webhook_id)


@router.post(BASE + "/{webhook_id}/enabled")
async def set_enabled(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> Response:
    form = await posted_form(request, user)
    enabled = form.get("enabled") == "true"

    async def act() -> None:
        await service.change_webhook(
            gateway,
            account_id=user.principal.account_id,
            webhook_id=webhook_id,
            enabled=enabled,
            by=user.principal,
        )

    return await _action(request, gateway, user, webhook_id, form, "enabled" if enabled else "disabled", act)


@router.post(BASE + "/{webhook_id}/delete")
async def delete_webhook(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> Response:
    form = await posted_form(request, user)
    try:
        await service.remove_webhook(
            gateway, account_id=user.principal.account_id, webhook_id=webhook_id, by=user.principal
        )
    except WagateError as error:
        return error_page(request, error)
    target = _back(form)
    return _done(BASE if target.startswith(f"{BASE}/") else target, "deleted")


@router.post(BASE + "/{webhook_id}/test")
async def send_test_event(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> Response:
    form = await posted_form(request, user)

    async def act() -> None:
        await service.send_test_event(gateway, account_id=user.principal.account_id, webhook_id=webhook_id)

    return await _action(request, gateway, user, webhook_id, form, "test", act)


@router.post(BASE + "/{webhook_id}/deliveries/{delivery_id}/redeliver")
async def redeliver(
    request: Request,
    gateway: GatewayDep,
    user: Admin,
    webhook_id: Annotated[int, PathId],
    delivery_id: DeliveryId,
) -> Response:
    form = await posted_form(request, user)

    async def act() -> None:
        await service.redeliver_now(
            gateway, account_id=user.principal.account_id, webhook_id=webhook_id, delivery_id=delivery_id
        )

    return await _action(request, gateway, user, webhook_id, form, "redelivered", act)
