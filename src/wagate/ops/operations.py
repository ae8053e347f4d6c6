"""Operations the CLI runs against the database and the Cloud API outside the server."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from wagate.channels.models import Channel
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.security import secret_box_for
from wagate.dispatch.jobs import sync_channel_templates
from wagate.ops.provisioning import ProvisionFile, provision
from wagate.whatsapp.client import CloudApiClient

log = logging.getLogger(__name__)


async def _sync(db: Database, settings: Settings, channel_ids: list[int]) -> dict[int, dict[str, Any]]:
    client = CloudApiClient(settings.graph_api_url, timeout=settings.upstream_timeout_seconds)
    box = secret_box_for(settings)
    results: dict[int, dict[str, Any]] = {}
    try:
        for channel_id in channel_ids:
            try:
                count = await sync_channel_templates(db, channel_id=channel_id, client=client, secret_box=box)
                results[channel_id] = {"templates": count}
            except Exception as exc:  # reported per channel; the periodic sync tries again
                log.warning("template sync of channel %s failed: %s", channel_id, exc)
                results[channel_id] = {"templates_error": str(exc) or type(exc).__name__}
    finally:
        await client.close()
    return results


async def run_provision(settings: Settings, spec: ProvisionFile) -> dict[str, Any]:
    db = Database(settings.database_url, pool_size=2)
    try:
        box = secret_box_for(settings)
        result: dict[str, Any] = await db.write(lambda s: provision(s, spec, box=box))
        channel_ids = [c["channel_id"] for a in result["accounts"] for c in a["channels"]]
        synced = await _sync(db, settings, channel_ids)
        for account in result["accounts"]:
            for channel in account["channels"]:
                channel.update(synced[channel["channel_id"]])
        return result
    finally:
        await db.dispose()


async def run_template_sync(settings: Settings, *, channel_id: int | None) -> dict[str, Any]:
    db = Database(settings.database_url, pool_size=2)
    try:
        async with db.read() as session:
            query = select(Channel.id).order_by(Channel.id)
            if channel_id is not None:
                query = query.where(Channel.id == channel_id)
            ids = list(await session.scalars(query))
        synced = await _sync(db, settings, ids)
        return {"channels": [{"channel_id": i, **synced[i]} for i in ids]}
    finally:
        await db.dispose()
