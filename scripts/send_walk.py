"""Follow one single send as it runs: the files of src/wagate it enters, in order, with their layers.

Runs the real app in this process on SQLite, the simulator as Meta on a thread of its own, sends an
OTP (the sandbox's `otp_code` template) over a socket to warm the caches and the channel's lane, then
profiles a second one (`sys.setprofile`, `threading.setprofile`; only frames of src/wagate count):
- walk 1, the request: its task (from the HTTP edge; `send_message_fast` marked), the server
  protocol's callbacks before it, and the group commit's run of its unit of work, up to the commit;
- walk 2, the outbox row to Meta: `FastClaim.started` and the task it starts, with the callbacks on
  that task's connection, until the call into wagate.whatsapp.client has returned.
A climb is a call from a function of file A into one of file B whose layer is above A's
(scripts/layer_order.py), each caller and callee pair once; "callback" means A does not import B. The
few climbs the design makes on purpose (`BY_DESIGN`, each with its reason) are listed apart.
Beside every file entered, each walk names the files a reader follows: those whose functions call into
another file of src/wagate on the walk (a leaf, such as core/ids.py, is entered but not followed).
And each walk's *path*, the chain of calls a reader follows from one end to the other, in order: the
files on the stack (src/wagate's frames) where the walk arrives. Walk 1 arrives twice: in the request's
task when it hands its unit of work to `Database.write`, then on the writer thread when that unit
calls `messages.repository.store_sends`, which inserts the outbox row. Walk 2 arrives in the lane's task
when the request is written to Meta's connection (`_Connection.exchange`), from `FastClaim.started`.

    .venv/bin/python scripts/send_walk.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import json
import logging
import sys
import tempfile
import threading
from collections.abc import Coroutine, Generator, Sequence
from contextvars import Context
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import grimp
import httpx
from cryptography.fernet import Fernet
from layer_order import SOURCE, Direction, LayerOrder, module_of

from wagate.api.app import create_app
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.migrate import migrate
from wagate.core.security import new_api_token
from wagate.http.serving import guarded_protocol
from wagate.messages.repository import store_sends
from wagate.messages.send_fast import send_message_fast
from wagate.ops.operations import run_provision
from wagate.ops.sandbox import DEMO_PHONE_NUMBER_ID, DEMO_WABA_ID, demo_account
from wagate.outbox.models import FastClaim
from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig
from wagate.simulator.server import base_url_of, serve_in_background, start_in_thread
from wagate.whatsapp.http1 import _Connection

PACKAGE = f"{SOURCE / 'wagate'}/"
SIMULATOR, WHATSAPP, CLIENT = f"{PACKAGE}simulator/", f"{PACKAGE}whatsapp/", f"{PACKAGE}whatsapp/client.py"
Ctx = object  # a task, "loop" (a callback of the event loop) or a writer thread's name

# Calls up a layer that are the design, not a shortcut: the caller's module and functions, and why.
# Kept short on purpose; anything else that climbs is reported as a climb.
BY_DESIGN: dict[str, tuple[frozenset[str], str]] = {
    "wagate.http.limits": (
        frozenset({"RequestGuard.__call__"}),
        "ASGI middleware calls the app it wraps (composed at start-up by wagate.api.app)",
    ),
    "wagate.core.units": (
        frozenset({"_run_alone", "_bound.<locals>.<lambda>", "Mergeable.__call__"}),
        "the group-commit writer runs the unit of work a service handed to Database.write",
    ),
    "wagate.outbox.fast_claims": (
        frozenset({"SendRoom.send_now"}),
        "the send stored claimed is handed to its channel's lane, which runs the call to Meta as a task",
    ),
}


@dataclass(frozen=True)
class Call:
    seq: int
    ctx: Ctx
    callee: CodeType
    caller: CodeType | None  # the nearest frame of src/wagate below it on its thread's stack
    batch: bool  # in the group commit's run of the request's unit of work (not another unit's)
    lane: bool  # in FastClaim.started, its task or a callback on that task's objects, before Meta answered


def _ours(code: CodeType) -> bool:
    return code.co_filename.startswith(PACKAGE) and not code.co_filename.startswith(SIMULATOR)


_first_resume: dict[CodeType, int] = {}


def _fresh(frame: FrameType) -> bool:
    """A call, not a coroutine resumed (which the profiler reports as a call too)."""
    code = frame.f_code
    if code not in _first_resume:
        _first_resume[code] = next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
    return frame.f_lasti <= _first_resume[code]


class Tracer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.loop_thread, self.armed = loop, threading.get_ident(), False
        self.calls: list[Call] = []
        self.request: Ctx | None = None
        self.units: list[object] = []  # what the request handed to Database.write, and their items
        self.marks: dict[Ctx, FrameType] = {}  # per context: the frame running the request's batch
        self.foreign: dict[Ctx, FrameType] = {}  # per context: the frame running another unit in it
        self.started: CodeType | None = None  # FastClaim.started's code, once the request got one
        self.started_frame: FrameType | None = None
        self.lane_tasks: set[asyncio.Task[Any]] = set()
        self.lane_objects: list[object] = []  # `self` of the lane task's frames (its connection...)
        self.lane_callback = self.client_reached = False
        self.lane_start: int | None = None
        self.lane_end: int | None = None
        # Each walk's path: the stacks where it arrives, outermost frame first (see the docstring).
        self.request_path: list[str] = []
        self.lane_path: list[str] = []

    def _context(self) -> Ctx | None:
        if threading.get_ident() == self.loop_thread:
            return asyncio.current_task(self.loop) or "loop"
        name = threading.current_thread().name
        return name if name.startswith("wagate-db") else None

    def _holds(self, value: object) -> bool:
        """Whether `value` is one of the request's units (or items), or a list holding one."""
        if isinstance(value, list):
            return any(self._holds(v) for v in value)
        return any(value is unit for unit in self.units)

    def _foreign(self, unit: object) -> bool:
        """A unit of the batch that is not the request's, nor closes over it (a merged run)."""
        cells = getattr(unit, "__closure__", None) or ()
        return not self._holds(unit) and not any(self._holds(cell.cell_contents) for cell in cells)

    def task_factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        context: Context | None = None,
    ) -> asyncio.Task[Any]:
        task, parent = asyncio.Task(coro, loop=loop, context=context), asyncio.current_task(loop)
        started = parent is self.request and self.started_frame is not None
        if self.armed and self.lane_end is None and (started or parent in self.lane_tasks):
            self.lane_tasks.add(task)
        return task

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.armed or event not in ("call", "return") or not _ours(frame.f_code):
            return
        ctx = self._context()
        if ctx is None:
            return
        if event == "return":
            for marks in (self.marks, self.foreign):
                if marks.get(ctx) is frame:
                    del marks[ctx]
            if frame is self.started_frame:
                self.started_frame = None
            if ctx is self.request and isinstance(arg, FastClaim):
                self.started = arg.started.__code__
            return
        code, names = frame.f_code, frame.f_code.co_varnames
        batch_runner = "units" in names and ctx not in self.marks and ctx is not self.request
        if batch_runner and self._holds(frame.f_locals.get("units")):
            self.marks[ctx] = frame
        unit_runner = "unit" in names[: code.co_argcount] and ctx in self.marks and ctx not in self.foreign
        if unit_runner and self._foreign(frame.f_locals.get("unit")):
            self.foreign[ctx] = frame
        if not _fresh(frame):
            return
        caller = frame.f_back
        while caller is not None and not _ours(caller.f_code):
            caller = caller.f_back
        seq = len(self.calls)
        if code is send_message_fast.__code__ and self.request is None:
            self.request = ctx
        if ctx is self.request and code is Database.write.__code__:
            unit = frame.f_locals["unit"]
            self.units += [unit, getattr(unit, "item", unit)]  # a Mergeable's item runs merged
        if ctx is self.request and code is self.started and self.lane_start is None:
            self.started_frame, self.lane_start = frame, seq
            self.lane_path = _stack_files(frame, innermost_only=True)
        if ctx is self.request and code is Database.write.__code__ and not self.request_path:
            self.request_path = _stack_files(frame)
        if ctx in self.marks and ctx not in self.foreign and code is store_sends.__code__:
            self.request_path += [f for f in _stack_files(frame) if f not in self.request_path]
        if ctx == "loop" and caller is None:  # a callback begins: on an object of the lane's task?
            this = frame.f_locals.get("self") if "self" in names else None
            lane = self.lane_start is not None and self.lane_end is None
            self.lane_callback = lane and any(this is o for o in self.lane_objects)
        in_lane = ctx in self.lane_tasks and self.lane_end is None
        if in_lane and code is _Connection.exchange.__code__:
            self.lane_path += [f for f in _stack_files(frame) if f not in self.lane_path]
        if in_lane and "self" in names:
            self.lane_objects.append(frame.f_locals["self"])
        if in_lane and code.co_filename == CLIENT:
            self.client_reached = True
        elif in_lane and self.client_reached and not code.co_filename.startswith(WHATSAPP):
            back_in_lane = not (caller and caller.f_code.co_filename.startswith(WHATSAPP))
            if back_in_lane:  # the first call after the client returned: Meta has answered, done
                self.lane_end, in_lane, self.armed = seq, False, False
        lane = in_lane or (ctx is self.request and self.started_frame is not None)
        lane = lane or (ctx == "loop" and self.lane_callback)
        batch = ctx in self.marks and ctx not in self.foreign
        self.calls.append(Call(seq, ctx, code, caller.f_code if caller else None, batch, lane))


def _stack_files(frame: FrameType, *, innermost_only: bool = False) -> list[str]:
    """The files of src/wagate on the stack down to `frame`, outermost first, each once (relative to
    src/); with `innermost_only`, only `frame`'s."""
    files: list[str] = []
    at: FrameType | None = frame
    while at is not None and not (innermost_only and at is not frame):
        if _ours(at.f_code):
            files.append(str(Path(at.f_code.co_filename).relative_to(SOURCE)))
        at = at.f_back
    return list(dict.fromkeys(reversed(files)))


def _report(name: str, calls: list[Call], order: LayerOrder, graph: grimp.ImportGraph) -> dict[str, Any]:
    files: dict[str, int] = {}
    followed: set[str] = set()  # files with a function that calls into another file of the walk
    climbs: dict[tuple[CodeType, CodeType], dict[str, str]] = {}
    by_design: dict[tuple[CodeType, CodeType], dict[str, str]] = {}
    for call in calls:
        files.setdefault(call.callee.co_filename, call.seq)
        if call.caller is None:
            continue
        if call.caller.co_filename != call.callee.co_filename:
            followed.add(call.caller.co_filename)
        source, target = module_of(call.caller.co_filename), module_of(call.callee.co_filename)
        below, above = order.place(source), order.place(target)
        if below and above and order.direction(below, above) is Direction.UP:
            imports = graph.direct_import_exists(importer=source, imported=target)
            climb = {
                "from": f"{source}.{call.caller.co_qualname} [{below.label}]",
                "to": f"{target}.{call.callee.co_qualname} [{above.label}]",
                "kind": "import" if imports else "callback",
            }
            callers, why = BY_DESIGN.get(source, (frozenset(), ""))
            if call.caller.co_qualname in callers:
                by_design[(call.caller, call.callee)] = {**climb, "why": why}
            else:
                climbs[(call.caller, call.callee)] = climb
    rows: list[dict[str, Any]] = []
    for path, seq in files.items():
        place = order.place(module_of(path))
        file = str(Path(path).relative_to(SOURCE))
        row = {"file": file, "layer": place.label if place else "-", "first_call": seq}
        rows.append({**row, "followed": path in followed})
    return {
        "walk": name,
        "files": rows,
        "followed": [row["file"] for row in rows if row["followed"]],
        "climbs": list(climbs.values()),
        "by_design": list(by_design.values()),
    }


async def _send(http: httpx.AsyncClient, base: str, account: int, body: dict[str, Any]) -> str:
    """The message's id once it was handed to Meta."""
    path = f"{base}/v1/accounts/{account}/whatsapp/messages"
    message_id: str = (await http.post(path, json=body)).raise_for_status().json()["id"]
    for _ in range(500):
        message = (await http.get(f"{path}/{message_id}")).json()
        if message["upstream_message_id"] or message["status"] == "failed":
            return message_id
        await asyncio.sleep(0.01)
    raise RuntimeError(f"send {message_id} never left: {message}")


async def trace_one_send(tmp: str) -> Tracer:
    secret = Fernet.generate_key().decode()  # the simulator's app secret and the gateway's key alike
    sim_url, stop_sim = start_in_thread(create_simulator_app(SimulatorConfig(app_secret=secret)))
    loop = asyncio.get_running_loop()
    tracer = Tracer(loop)
    threading.setprofile(tracer.hook)  # the writer threads start later and carry it
    loop.set_task_factory(tracer.task_factory)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            ids = {"phone_number_id": DEMO_PHONE_NUMBER_ID, "waba_id": DEMO_WABA_ID}
            await http.post(f"{sim_url}/_sim/channels", json={**ids, "display_phone_number": "15550001111"})
            settings = Settings(
                database_url=f"sqlite+aiosqlite:///{tmp}/wagate.db",
                graph_api_url=f"{sim_url}/v23.0",
                meta_app_secret=secret,
                secret_key=secret,
            )
            migrate(settings.database_url)
            token = new_api_token()
            provisioned = (await run_provision(settings, demo_account(token, secret)))["accounts"][0]
            account, channel = provisioned["account_id"], provisioned["channels"][0]["channel_id"]
            server, served = await serve_in_background(create_app(settings), http=guarded_protocol(settings))
            http.headers["Authorization"] = f"Bearer {token}"
            template = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
            for number, armed in (("+994555000001", False), ("+994555000002", True)):
                sys.setprofile(tracer.hook if armed else None)
                tracer.armed = armed
                body = {"channel_id": channel, "phone_number": number, "template": template}
                await _send(http, base_url_of(server), account, body)
            tracer.armed = False
            sys.setprofile(None)
            server.should_exit = True
            await served
    finally:
        threading.setprofile(None)
        stop_sim()
    return tracer


def walks(tracer: Tracer) -> list[dict[str, Any]]:
    order, graph = LayerOrder.from_pyproject(), grimp.build_graph("wagate")
    started = tracer.lane_start if tracer.lane_start is not None else len(tracer.calls)
    begun = next((c.seq for c in tracer.calls if c.ctx is tracer.request), 0)
    request = [
        c
        for c in tracer.calls
        if c.batch or (c.ctx is tracer.request and c.seq < started) or (c.ctx == "loop" and c.seq < begun)
    ]
    first = _report("request -> stored outbox row", request, order, graph)
    second = _report("claimed outbox row -> Cloud API", [c for c in tracer.calls if c.lane], order, graph)
    entry = next((c.seq for c in request if c.callee is send_message_fast.__code__), 0)
    first["note"] = f"{sum(1 for f in first['files'] if f['first_call'] >= entry)} from send_message_fast"
    seen = {f["file"] for f in first["files"]}
    second["note"] = f"{sum(1 for f in second['files'] if f['file'] not in seen)} not in walk 1"
    first["path"] = _path(tracer.request_path, order)
    second["path"] = _path(tracer.lane_path, order, before=tracer.request_path)
    return [first, second]


def _path(files: list[str], order: LayerOrder, before: Sequence[str] = ()) -> dict[str, Any]:
    """A walk's path with each file's layer, the steps up a layer on it (by design or not) and how
    many of its files a reader had not met on the path `before`."""
    places = [order.place(module_of(str(SOURCE / file))) for file in files]
    steps: list[dict[str, str]] = []
    for (file, place), (next_file, next_place) in pairwise(zip(files, places, strict=True)):
        if place and next_place and order.direction(place, next_place) is Direction.UP:
            source = module_of(str(SOURCE / file))
            why = BY_DESIGN[source][1] if source in BY_DESIGN else ""
            steps.append({"from": file, "to": next_file, "why": why})
    return {
        "files": [{"file": f, "layer": p.label if p else "-"} for f, p in zip(files, places, strict=True)],
        "new": sum(1 for file in files if file not in before),
        "climbs": [step for step in steps if not step["why"]],
        "by_design": [step for step in steps if step["why"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the walks as JSON")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tracer = asyncio.run(trace_one_send(tmp))
    result = walks(tracer)
    if args.json:
        print(json.dumps({"walks": result}, indent=2))
    for number, walk in enumerate(result if not args.json else [], 1):
        files, climbs, by_design = walk["files"], walk["climbs"], walk["by_design"]
        print(
            f"walk {number}: {walk['walk']}: {len(files)} files entered ({walk['note']}), "
            f"{len(walk['followed'])} followed (*), {len(climbs)} climbs, {len(by_design)} by design"
        )
        for index, row in enumerate(files, 1):
            print(f"  {index:2} {'*' if row['followed'] else ' '} {row['layer']:34} {row['file']}")
        for climb in climbs:
            print(f"  climb ({climb['kind']}): {climb['from']}\n      -> {climb['to']}")
        for climb in by_design:
            print(f"  by design ({climb['why']}): {climb['from']}\n      -> {climb['to']}")
        path = walk["path"]
        print(
            f"  path: {len(path['files'])} files ({path['new']} new), {len(path['climbs'])} climbs,"
            f" {len(path['by_design'])} by design"
        )
        for index, row in enumerate(path["files"], 1):
            print(f"    {index:2} {row['layer']:34} {row['file']}")
        for step in path["climbs"]:
            print(f"    climb: {step['from']} -> {step['to']}")
        for step in path["by_design"]:
            print(f"    by design ({step['why']}): {step['from']} -> {step['to']}")
    if tracer.lane_start is None:
        print("the send did not take the fast path (no FastClaim.started): walk 2 is empty", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
