"""The loopback server moved into the test kit (`fragbench.testing.loopback`), where plugin
authors get it too; this module re-exports it for the suite's existing imports."""

from fragbench.testing.loopback import (
    API_SHAPES,
    CHAT,
    MESSAGES,
    RESPONSES,
    SHAPES,
    Action,
    Handler,
    Server,
    Shape,
    answer_for,
    chat_body,
    default_usage,
    drop,
    http_error,
    json_body,
    message_body,
    ok,
    raw,
    redirect,
    response_body,
    sleep,
    supplied_lines,
    trickle,
    user_text,
)

__all__ = ["API_SHAPES", "CHAT", "MESSAGES", "RESPONSES", "SHAPES", "Action", "Handler",
           "Server", "Shape", "answer_for", "chat_body", "default_usage", "drop", "http_error",
           "json_body", "message_body", "ok", "raw", "redirect", "response_body", "sleep",
           "supplied_lines", "trickle", "user_text"]
