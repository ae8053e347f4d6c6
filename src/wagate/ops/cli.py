"""The `wagate` command: serve, worker, migrate, provision, templates sync, dead-letters, secrets, users
sign-out, simulator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn

from wagate.core.config import Settings, get_settings
from wagate.core.errors import UserNotFound

app = typer.Typer(add_completion=False, no_args_is_help=True, help="wagate: outbound WhatsApp gateway.")
templates_app = typer.Typer(no_args_is_help=True, help="Message templates.")
app.add_typer(templates_app, name="templates")
secrets_app = typer.Typer(
    no_args_is_help=True,
    help="The keys that encrypt channel tokens and webhook/callback secrets at rest (docs/operations.md).",
)
app.add_typer(secrets_app, name="secrets")
users_app = typer.Typer(no_args_is_help=True, help="Dashboard users.")
app.add_typer(users_app, name="users")


def _logging(settings: Settings) -> None:
    from wagate.observability.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)


MetricsPort = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        help="Serve /metrics, /healthz and /readyz on this port too, on WAGATE_METRICS_HOST (default "
        "127.0.0.1); the same as WAGATE_METRICS_PORT.",
    ),
]


def _with_metrics_port(settings: Settings, port: int | None) -> Settings:
    return settings if port is None else settings.model_copy(update={"metrics_port": port})


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    from wagate.core.migrate import migrate as run_migrations

    run_migrations(get_settings().database_url)
    typer.echo("database is up to date", err=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    sandbox: Annotated[
        bool, typer.Option(help="Run the built-in Cloud API simulator with a demo account.")
    ] = False,
    dispatcher: Annotated[bool, typer.Option(help="Run the outbox dispatcher in this process.")] = True,
    metrics_port: MetricsPort = None,
) -> None:
    """Run the API, the dashboard and the dispatcher."""
    settings = _with_metrics_port(get_settings(), metrics_port)
    _logging(settings)
    if sandbox:
        from wagate.ops.sandbox import run_sandbox

        asyncio.run(run_sandbox(settings, host=host, port=port))
        return
    if settings.is_sqlite:
        from wagate.core.migrate import migrate as run_migrations

        run_migrations(settings.database_url)
    from wagate.api.app import create_app
    from wagate.http.serving import DrainingServer, uvicorn_options

    app = create_app(settings, run_dispatcher=dispatcher)
    DrainingServer(uvicorn.Config(app, host=host, port=port, **uvicorn_options(settings))).run()


@app.command()
def worker(metrics_port: MetricsPort = None) -> None:
    """Run the dispatcher alone (deployments with several processes on PostgreSQL)."""
    settings = _with_metrics_port(get_settings(), metrics_port)
    _logging(settings)
    from wagate.ops.worker import run_worker

    asyncio.run(run_worker(settings))


@app.command("provision")
def provision_command(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
) -> None:
    """Create or update accounts, users, API keys and channels from FILE.json; prints JSON."""
    from pydantic import ValidationError

    from wagate.ops.operations import run_provision
    from wagate.ops.provisioning import ProvisionFile

    settings = get_settings()
    _logging(settings)
    try:
        spec = ProvisionFile.model_validate_json(file.read_bytes())
    except ValidationError as exc:
        typer.echo(f"{file}: not a valid provisioning file:\n{exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        result = asyncio.run(run_provision(settings, spec))
    except ValueError as exc:
        typer.echo(f"{file}: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(result, indent=2))


@templates_app.command("sync")
def templates_sync(
    channel_id: Annotated[int | None, typer.Option(help="Only this channel.")] = None,
) -> None:
    """Fetch templates from the Cloud API now; prints how many each channel has."""
    from wagate.ops.operations import run_template_sync

    settings = get_settings()
    _logging(settings)
    result: dict[str, Any] = asyncio.run(run_template_sync(settings, channel_id=channel_id))
    typer.echo(json.dumps(result, indent=2))
    if any("error" in c for c in result["channels"]):
        raise typer.Exit(1)


@app.command("dead-letters")
def dead_letters(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many to show.")] = 50,
    before: Annotated[int | None, typer.Option(help="Only older ones: the last id of a page.")] = None,
) -> None:
    """What could not be applied after its attempts (e.g. a Meta webhook body): JSON lines, newest first."""
    from wagate.outbox.dead_letters import read_dead_letters

    settings = get_settings()
    _logging(settings)
    for letter in asyncio.run(read_dead_letters(settings.database_url, limit=limit, before=before)):
        typer.echo(json.dumps(letter, ensure_ascii=False))


@secrets_app.command("new-key")
def secrets_new_key() -> None:
    """Print a new secret key (Fernet), to put first in WAGATE_SECRET_KEY before `secrets rotate`."""
    from wagate.core.security import new_secret_key

    typer.echo(new_secret_key())


@secrets_app.command("rotate")
def secrets_rotate(
    batch_size: Annotated[int, typer.Option(min=1, max=10_000, help="Rows per transaction.")] = 500,
) -> None:
    """Encrypt every stored token and secret again with the first key of WAGATE_SECRET_KEY (or of the key
    file); safe while the gateway runs, and a second run changes nothing. Prints the counts as JSON;
    exits 1 when rows are left under a key no longer first (unreadable, or changing all the time)."""
    from wagate.core.db import Database
    from wagate.core.security import SecretKeyError, secret_box_for
    from wagate.ops.rotation import rotate_secrets

    settings = get_settings()
    _logging(settings)
    try:
        box = secret_box_for(settings)
    except SecretKeyError as exc:
        typer.echo(f"WAGATE_SECRET_KEY: {exc}", err=True)
        raise typer.Exit(2) from exc

    async def run() -> dict[str, Any]:
        db = Database(settings.database_url, pool_size=2)
        try:
            return (await rotate_secrets(db, box, batch_size=batch_size)).as_dict()
        finally:
            await db.dispose()

    result = asyncio.run(run())
    typer.echo(json.dumps(result, indent=2))
    if box.key_count == 1:
        typer.echo("Only one key is configured: put the new key first, the old one after it.", err=True)
    if result["left_behind"]:
        raise typer.Exit(1)


@users_app.command("sign-out")
def users_sign_out(email: Annotated[str, typer.Argument(help="The user's email.")]) -> None:
    """End every dashboard session of the user (a lost laptop, a leaked cookie): their open pages must
    sign in again, in every process. Prints how many sessions ended; exits 1 for an unknown email."""
    from wagate.accounts.service import sign_out_everywhere
    from wagate.core.db import Database

    settings = get_settings()
    _logging(settings)

    async def run() -> int:
        db = Database(settings.database_url, pool_size=2)
        try:
            return await sign_out_everywhere(db, email=email)
        finally:
            await db.dispose()

    try:
        ended = asyncio.run(run())
    except UserNotFound:
        typer.echo(f"No user has the email {email}.", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps({"email": email.strip().lower(), "sessions_ended": ended}))


@app.command()
def simulator(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8100,
    webhook_url: Annotated[str | None, typer.Option(help="The gateway's /webhooks/whatsapp URL.")] = None,
    app_secret: Annotated[
        str, typer.Option(help="Signs the webhooks (the gateway's WAGATE_META_APP_SECRET).")
    ] = "",
) -> None:
    """Run the Cloud API simulator alone (base URL http://HOST:PORT/v23.0)."""
    from wagate.simulator.app import run_simulator

    settings = get_settings()
    run_simulator(
        host=host,
        port=port,
        webhook_url=webhook_url,
        app_secret=app_secret or settings.meta_app_secret,
        log_level=settings.log_level,  # WAGATE_LOG_LEVEL=warning drops the line per request
    )


def main() -> None:
    from pydantic import ValidationError

    try:
        app()
    except ValidationError as exc:
        if exc.title != Settings.__name__:
            raise
        # A WAGATE_ variable the settings refuse: what is wrong, not a traceback.
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            if error["loc"] and not message.startswith("WAGATE_"):
                message = f"WAGATE_{str(error['loc'][0]).upper()}: {message}"
            typer.echo(message, err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
