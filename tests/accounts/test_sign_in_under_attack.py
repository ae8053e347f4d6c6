"""Sign-in under attack (issue 45, points 2 and 3; API.md section 12): attempts counted before the password
is checked, in the database (so every process holds the same limit), per email and address together hard and
per email alone softly; argon2 on a bounded pool, so a burst never takes the process past DESIGN.md's
memory target. Over HTTP against real `wagate serve` processes, on SQLite and PostgreSQL.

A client's address is chosen by binding its socket to another loopback address (127.0.0.2, ...): the
gateway sees a different person, no proxy header involved."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import gateway_process
from support.gateway_process import GatewayProcess, Provisioned, free_port
from support.harness import post_login
from wagate.accounts.sign_in_limits import EMAIL_LIMIT, PAIR_LIMIT

pytestmark = pytest.mark.alone  # measures a process's peak memory

provisioned = gateway_process.provisioned

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
# DESIGN.md: memory of `wagate serve` under load.
MEMORY_TARGET_MB = 300


def client_from(url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=address), timeout=30)


@pytest.fixture(scope="module")
def two_gateways(
    provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two `wagate serve` processes on one database (the API's processes of a scaled deployment), one
    pair per database for the tests that count attempts: the counts are in the database, which the
    module's tests share anyway, and each test uses emails or addresses of its own."""
    log_dir = tmp_path_factory.mktemp("gateways")
    first = GatewayProcess(provisioned.env, free_port(), log_dir, name="first")
    second = GatewayProcess(provisioned.env, free_port(), log_dir, args=("--no-dispatcher",), name="second")
    try:
        first.start()
        second.start()
        yield first, second
    finally:
        first.stop()
        second.stop()


@pytest.fixture
def fresh_gateway(provisioned: Provisioned, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A `wagate serve` of its own for the memory test: its peak (VmHWM) is since the process started,
    so no other test's burst may have run there."""
    gateway = GatewayProcess(provisioned.env, free_port(), tmp_path, name="fresh")
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()


async def burst(
    url: str, attempts: list[tuple[str, str]], address: str = "127.0.0.1"
) -> list[httpx.Response]:
    """Every (email, password) posted at the same moment, each with the sign-in form's token."""
    transport = httpx.AsyncHTTPTransport(local_address=address, limits=httpx.Limits(max_connections=200))
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=60) as client:
        form = await client.get("/login")
        match = CSRF_FIELD.search(form.text)
        assert match is not None
        token = match.group(1)

        async def attempt(email: str, password: str) -> httpx.Response:
            data = {"email": email, "password": password, "csrf_token": token, "next": "/"}
            return await client.post("/login", data=data)

        return await asyncio.gather(*(attempt(email, password) for email, password in attempts))


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory since it started (VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) / 1024


def test_a_burst_of_guesses_gets_no_more_tries_than_the_limit_across_processes(
    two_gateways: tuple[GatewayProcess, GatewayProcess],
) -> None:
    first, second = two_gateways
    email = "agent@acme.test"
    guesses = [(email, f"guess-{n}") for n in range(20)]

    async def both() -> list[httpx.Response]:
        answers = await asyncio.gather(burst(first.url, guesses), burst(second.url, guesses))
        return [response for answered in answers for response in answered]

    answers = asyncio.run(both())
    statuses = [response.status_code for response in answers]
    assert set(statuses) <= {401, 429}, statuses
    # 40 guesses at once over two processes: the password was checked only as often as the limit allows.
    assert statuses.count(401) <= PAIR_LIMIT, statuses
    throttled = [response for response in answers if response.status_code == 429]
    assert throttled and all(int(response.headers["retry-after"]) > 0 for response in throttled)
    assert "Too many failed sign-ins" in throttled[0].text
    # The right password waits too: the pair of this email and this address is locked, on both processes.
    for process in (first, second):
        with httpx.Client(base_url=process.url) as client:
            locked = post_login(client, email, "pw-agent")
            assert locked.status_code == 429 and 0 < int(locked.headers["retry-after"]) <= 15 * 60


def test_a_burst_of_unknown_emails_stays_within_the_memory_target(fresh_gateway: GatewayProcess) -> None:
    first = fresh_gateway
    pid = first.pid()
    assert pid is not None
    # Sixty different emails nobody has, at once, from one address: each would take argon2's 64 MiB if
    # all were checked together.
    attempts = [(f"nobody-{n}@example.test", "guess") for n in range(60)]
    answers = asyncio.run(burst(first.url, attempts, address="127.0.0.3"))
    statuses = [response.status_code for response in answers]
    assert set(statuses) <= {401, 429}, statuses
    assert all(response.headers.get("retry-after") for response in answers if response.status_code == 429)
    peak = peak_rss_mb(pid)
    print(f"peak RSS after the burst: {peak:.0f} MB; answers {Counter(statuses)}")
    assert peak < MEMORY_TARGET_MB
    # The attempts the full queue turned away were never checked and count against no limit: past the
    # address's 50 if they did, a real user at that address still signs in.
    with client_from(first.url, "127.0.0.3") as client:
        assert post_login(client, "admin@acme.test", "pw-admin").status_code == 303


def test_guesses_from_elsewhere_never_lock_the_owner_out(
    two_gateways: tuple[GatewayProcess, GatewayProcess],
) -> None:
    first, second = two_gateways
    email = "admin@acme.test"
    # The owner signs in from their usual place once: the address is known for this email from then on.
    with client_from(first.url, "127.0.0.10") as owner:
        assert post_login(owner, email, "pw-admin").status_code == 303
    # An attacker at one address: five guesses, then 429, on either process.
    with client_from(second.url, "127.0.0.20") as attacker:
        answers = [post_login(attacker, email, f"guess-{n}").status_code for n in range(PAIR_LIMIT + 1)]
        assert answers == [401] * PAIR_LIMIT + [429]
    with client_from(first.url, "127.0.0.20") as attacker:
        assert post_login(attacker, email, "pw-admin").status_code == 429
    # The owner, elsewhere, is not held by the attacker's lock.
    with client_from(first.url, "127.0.0.11") as owner_on_the_road:
        assert post_login(owner_on_the_road, email, "pw-admin").status_code == 303
    # Guesses spread over many addresses, each under the pair's limit: the email's own limit ends them...
    wrong = PAIR_LIMIT
    refused = None
    for n in range(1, EMAIL_LIMIT):
        with client_from(second.url, f"127.0.1.{n}") as attacker:
            for guess in range(PAIR_LIMIT):
                answer = post_login(attacker, email, f"guess-{n}-{guess}")
                if answer.status_code != 401:
                    refused = answer
                    break
                wrong += 1
        if refused is not None:
            break
    assert refused is not None and refused.status_code == 429
    assert wrong <= EMAIL_LIMIT
    # ...and a new address waits, even with the right password...
    with client_from(first.url, "127.0.2.1") as stranger:
        answer = post_login(stranger, email, "pw-admin")
        assert answer.status_code == 429 and int(answer.headers["retry-after"]) > 0
    # ...while the addresses the owner signed in from still let them in.
    for address in ("127.0.0.10", "127.0.0.11"):
        with client_from(second.url, address) as owner:
            assert post_login(owner, email, "pw-admin").status_code == 303
