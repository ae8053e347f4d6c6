"""Where a process's CPU goes, layer by layer, from a py-spy profile (issue 18 point 1).

Reads the collapsed stacks that `--py-spy DIR` of bench/send_path.py, bench/bulk.py or
bench/statuses.py writes (`py-spy record --format raw --gil`: one sample per line group, only the
thread holding the GIL, so a sample is Python at work, not a thread waiting on the database). Each
sample goes to one layer: the innermost frame on its stack that belongs to a known step of the
gateway (an API key's lookup inside a send counts as the lookup, not as the send), else the library
of its innermost frame (uvicorn, the event loop). Within a step, the samples that are in SQLAlchemy's
statement compiler, in the database driver, or in a commit are counted apart, so "the SQL", "the
driver" and "the commit" of each step can be read off.

    .venv/bin/python bench/layers.py PROFILE.txt [PROFILE.txt ...] [--min 0.5] [--json F]

Prints a table: layer, share of all samples, and of that share how much was SQL building, driver
and commit. Several files are summed (for example both API processes of one run).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

# (layer, needles): a frame belongs to the layer when one of the needles is in it. Order matters only
# between rules that could match the same frame; the innermost matching frame decides the sample.
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "request log line and metrics",
        ("wagate/observability/logs.py", "wagate/observability/metrics.py", "prometheus_client", "structlog"),
    ),
    # http/serving.py's transport proxy writes the response (uvloop's write is C: its syscall shows here).
    ("HTTP server: uvicorn (parsing, transport)", ("_HeadWithBody.",)),
    ("guard (query, body and rate limits)", ("wagate/http/limits.py", "wagate/http/serving.py")),
    (
        "auth and caches",
        (
            "accounts/callers.py",
            "accounts/access.py",
            "wagate/core/cache.py",
            "accounts/auth.py",
            "wagate/core/security.py",
        ),
    ),
    ("phone number checks", ("wagate/core/phones.py", "phonenumbers/")),
    ("template binding and rendering", ("wagate/templates/", "bind_template")),
    ("idempotency key", ("wagate/idempotency/",)),
    ("events written", ("wagate/events/", "messages/events.py")),
    ("dispatcher: claim", ("_claim_ahead", "claim_sends", "claim_rows", "outbox/models.py")),
    ("dispatcher: pacing", ("outbox/limiter.py",)),
    ("dispatcher: leases", ("renew_leases", "_keep_leases")),
    ("dispatcher: record the outcome", ("record_outcomes", "ChannelLane._record", "outbox/recorder.py")),
    (
        "dispatcher: build the request",
        (
            "whatsapp/client.py",
            "send_payload",
            # outbound.py's request builders (Meta's webhooks are parsed below)
            "_base_message (",
            "text_message (",
            "template_message (",
            "text_parameter (",
            "_component (",
            "authentication_components (",
            "SendResult.",
        ),
    ),
    ("status webhooks: parse Meta's JSON", ("whatsapp/payloads.py", "whatsapp/webhook_body.py")),
    (
        "dispatcher: HTTP client",
        ("whatsapp/http1.py", "aiohttp/", "httpx/", "httpcore/", "h11/", "yarl/", "multidict/"),
    ),
    (
        "dispatcher: lane and rounds",
        ("dispatch/send_lane.py", "dispatch/send_queue.py", "dispatch/dispatcher.py", "dispatch/releases.py"),
    ),
    ("status webhooks: receive and store", ("whatsapp/receiver.py", "whatsapp/signature.py")),
    (
        "status webhooks: apply",
        (
            "messages/meta_updates.py",
            "messages/meta_statuses.py",
            "messages/customer_messages.py",
            "messages/status.py",
            "messages/parked.py",
            "dispatch/jobs.py",
            "dispatch/webhook_jobs.py",
        ),
    ),
    (
        "send: check and build (service)",
        ("messages/service.py", "messages/schemas.py", "messages/pricing.py"),
    ),
    ("send: store rows (repository)", ("messages/repository.py", "messages/send_rows.py")),
    # A send's contact and conversation upserts, and the customers a status teaches: both paths.
    ("contacts and conversations", ("conversations/",)),
    (
        "send: endpoint and response",
        ("messages/endpoints.py", "messages/send_fast.py", "wagate/http/responses.py"),
    ),
    (
        "units of work: batching and commit",
        ("wagate/core/db.py", "wagate/core/units.py", "wagate/core/group_commit.py", "outbox/isolation.py"),
    ),
)
# Below its step, where a sample is: the statement compiler, the driver, the commit.
MECHANISMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commit", ("commit (sqlalchemy", "do_commit", "Connection.commit (psycopg", "_commit_impl")),
    # pysqlite is C: its time shows in the SQLAlchemy frame that called it.
    ("driver", ("psycopg/", "psycopg_c", "sqlite3", "aiosqlite/", "do_execute (", "do_executemany (")),
    ("SQL building", ("sql/compiler.py", "sql/_compiler", "compile (sqlalchemy", "_compiler_dispatch")),
)
# For samples under no step: the library of the innermost frame.
LIBRARIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HTTP server: uvicorn (parsing, transport)", ("uvicorn/", "httptools")),
    # api/app.py's own router (`_fast_route`) stands in for Starlette's on the hot routes.
    ("HTTP: FastAPI/Starlette and pydantic", ("fastapi/", "starlette/", "pydantic", "wagate/api/app.py")),
    ("SQLAlchemy outside any step", ("sqlalchemy/", "greenlet")),
    ("database driver outside any step", ("psycopg", "sqlite3", "aiosqlite")),
    ("JSON (orjson)", ("orjson",)),
    ("event loop (asyncio)", ("asyncio/", "selectors.py", "uvloop")),
    ("threads (hand-offs to the writer)", ("threading.py", "concurrent/futures")),
)


def _match(frame: str, rules: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    for name, needles in rules:
        if any(needle in frame for needle in needles):
            return name
    return None


# Steps that wrap everything a request or a round does: a sample below one counts as the step only
# in the step's own code; below that, as the library it is in (FastAPI under the guard is FastAPI).
WRAPPERS = {
    "request log line and metrics",
    "guard (query, body and rate limits)",
    "units of work: batching and commit",
    "dispatcher: lane and rounds",
}


def classify(frames: list[str]) -> tuple[str, str]:
    """(layer, mechanism) of one sample; `frames` from the root to the innermost."""
    for depth in range(len(frames) - 1, -1, -1):
        step = _match(frames[depth], STEPS)
        if step in WRAPPERS and depth < len(frames) - 1:
            library = _match(frames[-1], LIBRARIES)
            if library is not None and _match(frames[-1], STEPS) is None:
                if "commit" in frames[-1] or any("commit (" in f for f in frames[depth + 1 :]):
                    return step, "commit"
                return library, "Python"
        if step is not None:
            below = frames[depth + 1 :]
            for mechanism, needles in MECHANISMS:
                if any(needle in frame for frame in below for needle in needles):
                    return step, mechanism
            return step, "Python"
    return _match(frames[-1], LIBRARIES) or "other", "Python"


def tally(paths: list[Path]) -> tuple[Counter[tuple[str, str]], int]:
    counts: Counter[tuple[str, str]] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            counts[classify(stack.split(";"))] += int(count_text)
            total += int(count_text)
    return counts, total


def show(paths: list[Path], layer: str, top: int = 8) -> None:
    """The stacks (their innermost 12 frames) that make up most of `layer`: to check a rule."""
    stacks: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if stack and count_text.isdigit() and classify(stack.split(";"))[0] == layer:
                stacks[" <- ".join(reversed(stack.split(";")[-12:]))] += int(count_text)
    for stack, n in stacks.most_common(top):
        print(f"{n:5d}  {stack}\n")


def table(counts: Counter[tuple[str, str]], total: int, minimum: float) -> list[dict[str, object]]:
    layers: Counter[str] = Counter()
    for (layer, _), n in counts.items():
        layers[layer] += n
    rows = []
    for layer, n in layers.most_common():
        share = 100 * n / max(total, 1)
        if share < minimum:
            continue
        split = {m: 100 * counts[(layer, m)] / max(total, 1) for m in ("SQL building", "driver", "commit")}
        rows.append({"layer": layer, "pct": round(share, 1), **{k: round(v, 1) for k, v in split.items()}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", type=Path, nargs="+", help="py-spy raw (collapsed) files")
    parser.add_argument("--min", type=float, default=0.5, help="leave out layers under this %% of samples")
    parser.add_argument("--json", type=Path, default=None, help="write the rows to this file")
    parser.add_argument("--show", default=None, metavar="LAYER", help="print the top stacks of a layer")
    args = parser.parse_args()
    if args.show:
        show(args.profiles, args.show)
        return
    counts, total = tally(args.profiles)
    rows = table(counts, total, args.min)
    print(f"{total} samples")
    print("| layer | share | of it: SQL building | driver | commit |\n|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['layer']} | {row['pct']:.1f} % | {row['SQL building']:.1f} % | {row['driver']:.1f} %"
            f" | {row['commit']:.1f} % |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": total, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
