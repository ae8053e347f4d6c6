"""The Cloud API simulator in its own process, for benchmarks.

Like `wagate simulator`, but without uvicorn's access log: that command serves at log level "info",
so every send and every status webhook would print a line, and on a 2-core machine the simulator's
CPU is taken from the gateway under test.

    python bench/sim_server.py --port 8100 --webhook-url http://127.0.0.1:8000/webhooks/whatsapp \
        --app-secret S
"""

from __future__ import annotations

import argparse

import uvicorn

from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--webhook-url", default=None)
    parser.add_argument("--app-secret", required=True)
    args = parser.parse_args()
    config = SimulatorConfig(webhook_url=args.webhook_url, app_secret=args.app_secret)
    uvicorn.run(
        create_simulator_app(config),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,  # as `wagate simulator`
    )


if __name__ == "__main__":
    main()
