"""The emulator's API errors, in vLLM's body shape: ``{"error": {"message", "type", "param",
"code"}}`` (raised by the routes, sent mid-stream by an injected fault)."""

from __future__ import annotations

from typing import Any

__all__ = ["APIError"]


class APIError(Exception):
    def __init__(
        self, status: int, message: str, type_: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        }
