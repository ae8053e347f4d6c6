"""The Cloud API simulator (a fake of Meta's WhatsApp Cloud API) and helpers to run ASGI apps in tests."""

from wagate.simulator.app import create_simulator_app, main, run_simulator
from wagate.simulator.config import ChannelInfo, SimulatorConfig, StatusDelays
from wagate.simulator.faults import ConnectionFault
from wagate.simulator.magic import (
    MAGIC_FAILED_THEN_DELIVERED,
    MAGIC_HANG,
    MAGIC_NUMBERS,
    MAGIC_RATE_LIMITED,
    MAGIC_REENGAGEMENT,
    MAGIC_RESET,
    MAGIC_RESET_AFTER_ACCEPT,
    MAGIC_SENT_ONLY,
    MAGIC_SERVER_ERROR,
    MAGIC_SLOW,
    MAGIC_UNDELIVERABLE,
    Fault,
    fault_for,
)
from wagate.simulator.server import RunningServer, run_in_thread, serve_in_background, start_in_thread

__all__ = [
    "MAGIC_FAILED_THEN_DELIVERED",
    "MAGIC_HANG",
    "MAGIC_NUMBERS",
    "MAGIC_RATE_LIMITED",
    "MAGIC_REENGAGEMENT",
    "MAGIC_RESET",
    "MAGIC_RESET_AFTER_ACCEPT",
    "MAGIC_SENT_ONLY",
    "MAGIC_SERVER_ERROR",
    "MAGIC_SLOW",
    "MAGIC_UNDELIVERABLE",
    "ChannelInfo",
    "ConnectionFault",
    "Fault",
    "RunningServer",
    "SimulatorConfig",
    "StatusDelays",
    "create_simulator_app",
    "fault_for",
    "main",
    "run_in_thread",
    "run_simulator",
    "serve_in_background",
    "start_in_thread",
]
