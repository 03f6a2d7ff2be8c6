"""What every test module shares: where the repository is, the experiments it ships, how
long a step may take, the canary key."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository: this file is tests/support/suite.py."""


PATIENCE = 300.0
"""How long a step may take on a loaded machine before a test gives up: a bound on a failure,
never a timing a passing run must meet."""


CANARY_KEY = "sk-proj-CANARYcanary0123456789abcdefXYZ"


COMMITTED_EXPERIMENTS = ("protocol-1.0", "protocol-1.0-anthropic", "protocol-1.0-openai-chat",
                         "protocol-1.0-token-window")
"""The experiments the repository ships, by name: a test copies and counts only these, never
what a user added under experiments/ (as the worked examples in docs/ have them do)."""
