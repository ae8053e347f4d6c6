"""The dashboard's live stream (`GET /live`): the changes of the conversations of the user's inboxes,
as server-sent events, for as long as the session holds.

The session and the user's inboxes are read when the stream opens, and again every
LIVE_RECHECK_SECONDS (one query per stream) and when the session's time runs out, so that an open
stream closes within 30 s of its session ending (signed out here or everywhere, expired) or its user
leaving an inbox (API.md section 12):

- the session ended: a last `signed_out` event (the page reloads, and lands on the sign-in form), and
  the stream ends;
- the user's inboxes changed: from then on only the changes of the inboxes they are in now are sent,
  after one `reset` change (the page reloads what it shows, and is refused what it may no longer see);
- the check itself failed (the database is away): the stream ends; the browser reconnects, and the
  new stream is let in or refused as any request is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from wagate.accounts.service import SessionUser
from wagate.channels.service import SessionInboxes, session_inboxes
from wagate.core.db import utcnow
from wagate.core.live import LiveKind, reset_for
from wagate.dashboard import views
from wagate.dashboard.web import SignInRequired
from wagate.runtime.gateway import Gateway

log = logging.getLogger(__name__)

# How often an open stream asks again (API.md pins 30 s at most). Read when a stream opens: tests set
# it lower.
LIVE_RECHECK_SECONDS = 15.0


async def live_events(gateway: Gateway, user: SessionUser, token: str) -> AsyncIterator[dict[str, str]]:
    """The events of a new stream for the signed-in `user` (whose session cookie is `token`), or
    SignInRequired when the session ended since the request was let in."""
    access = await session_inboxes(gateway, token)
    if access is None or access.user_id != user.principal.user_id:
        raise SignInRequired()
    return _events(gateway, user.principal.account_id, token, access, LIVE_RECHECK_SECONDS)


async def _events(
    gateway: Gateway, account_id: int, token: str, access: SessionInboxes, every: float
) -> AsyncIterator[dict[str, str]]:
    loop = asyncio.get_running_loop()
    async with gateway.live.subscribe(account_id) as stream:
        yield {"event": "ready", "data": "{}"}
        check_at = loop.time() + every
        while True:
            left = (access.expires_at - utcnow()).total_seconds()
            if left <= 0:
                yield {"event": "signed_out", "data": "{}"}
                return
            wait = min(check_at - loop.time(), left)
            if wait <= 0:
                try:
                    again = await session_inboxes(gateway, token)
                except Exception:
                    log.warning("a live stream could not check its session: closed", exc_info=True)
                    return
                check_at = loop.time() + every
                if again is None or again.user_id != access.user_id:
                    yield {"event": "signed_out", "data": "{}"}
                    return
                if again.inbox_ids != access.inbox_ids:
                    # What the page shows may belong to an inbox left, or miss one joined: reload it.
                    yield {"event": "change", "data": views.live_event(reset_for(account_id))}
                access = again
                continue
            try:
                change = await stream.next_within(wait)
            except StopAsyncIteration:  # the hub stopped: the process is shutting down
                return
            if change is None:
                continue
            # `reset`: changes may have been missed (a slow page, a lost LISTEN): reload all.
            if change.kind == LiveKind.reset or change.channel_id in access.inbox_ids:
                yield {"event": "change", "data": views.live_event(change)}
