"""Settings > Workspace settings > Integrations > Webhook (issue 12, point 1; API.md section 12).

Administrators add, edit, enable, disable and delete the account's webhooks, send one a test event,
and read each one's deliveries with their attempts, re-delivering any of them. Every action calls the
same service function as the API (wagate.events.service), so the rules and the SSRF guard are one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.core.errors import WagateError
from wagate.dashboard.settings_webhook_views import (
    EVENT_LABELS,
    WebhookForm,
    deliveries_of,
    error_field,
    form_refusal,
    posted_webhook,
    webhook_item,
    webhook_of,
)
from wagate.dashboard.views import PathId, error_words
from wagate.dashboard.web import current_administrator, error_page, posted_form, render
from wagate.events import service
from wagate.events.schemas import CreateWebhookRequest, UpdateWebhookRequest
from wagate.runtime.gateway import Gateway

router = APIRouter(include_in_schema=False)
Admin = Annotated[SessionUser, Depends(current_administrator)]
DeliveryId = Annotated[str, Path(min_length=1, max_length=40)]

BASE = "/settings/integrations/webhooks"
WEBHOOKS_PER_PAGE = 10
RECENT_DELIVERIES = 5  # under each webhook of the list
DELIVERIES_PER_PAGE = 20  # on a webhook's own page
# While a webhook waits for its first delivery or one is under way, its deliveries are fetched again.
POLL = "every 3s"

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
        w.id: await deliveries_of(gateway, user, w, before=None, limit=RECENT_DELIVERIES) for w in shown
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
    webhook = await webhook_of(gateway, user, webhook_id)
    page = await deliveries_of(gateway, user, webhook, before=before, limit=DELIVERIES_PER_PAGE)
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
    url, events = posted_webhook(form)
    try:
        body = CreateWebhookRequest.model_validate({"url": url, "events": events})
        created = await service.add_webhook(
            gateway, account_id=user.principal.account_id, url=body.url, events=body.events, by=user.principal
        )
    except ValidationError as exc:
        message, field = form_refusal(exc)
        refused = WebhookForm(url=url, events=tuple(events), error=message, field=field)
        return await _list_page(request, gateway, user, form=refused, status_code=422, replace_url=BASE)
    except WagateError as error:
        refused = WebhookForm(
            url=url, events=tuple(events), error=error_words(error), field=error_field(error)
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
        webhook = await webhook_of(gateway, user, webhook_id)
        page = await deliveries_of(gateway, user, webhook, before=None, limit=limit)
    except WagateError as error:
        return error_page(request, error)
    return render(
        request, "_settings_webhooks_deliveries.html", page=page, back=_back({"back": back}), webhook=webhook
    )


@router.get(BASE + "/{webhook_id}/edit")
async def edit_page(
    request: Request, gateway: GatewayDep, user: Admin, webhook_id: Annotated[int, PathId]
) -> HTMLResponse:
    try:
        webhook = await webhook_of(gateway, user, webhook_id)
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
    url, events = posted_webhook(form)
    try:
        webhook = await webhook_of(gateway, user, webhook_id)
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
        message, field = form_refusal(exc)
        refused = WebhookForm(url=url, events=tuple(events), error=message, field=field)
        status_code = 422
    except WagateError as error:
        if error.status_code == 404:
            return error_page(request, error)
        refused = WebhookForm(
            url=url, events=tuple(events), error=error_words(error), field=error_field(error)
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
