"""A nats-server with a password, and the password: for tests that show it never reaches a screen or a log."""

from __future__ import annotations

from typing import Final

PASSWORD: Final = "hunter2-not-for-screens"  # noqa: S105 - a made-up one, to show it never reaches a screen
USER: Final = "app"
CONFIG: Final = f'authorization {{ user: {USER}, password: "{PASSWORD}" }}\n'
