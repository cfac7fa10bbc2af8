"""The shapes of contexts, decisions and audit records, as ``TypedDict``s (§1, §2, §5).

At run time they are plain ``dict``s: use these to annotate policies and callers.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Union

if sys.version_info >= (3, 11):
    from typing import Literal, NotRequired, TypedDict
else:  # pragma: no cover - older interpreters
    from typing_extensions import Literal, NotRequired, TypedDict

Role = Literal["system", "user", "assistant"]
"""Who wrote a message."""

InterceptionPoint = Literal["input", "tool_call", "tool_result", "output"]
"""The interception points, by their wire names."""


class Message(TypedDict):
    """One message of a conversation."""

    role: Role
    content: str


class Metadata(TypedDict, total=False):
    """Who is calling, in which session, when (RFC 3339); extra keys are kept."""

    agent_id: str
    session_id: str
    timestamp: str


class InputContext(TypedDict):
    """What an input policy sees: the messages about to be sent to the model."""

    messages: List[Message]
    metadata: Metadata


class ToolCallContext(TypedDict):
    """What a tool-call policy sees: the tool the model wants to run, before it runs."""

    tool_name: str
    arguments: Dict[str, Any]
    calling_message: Message
    metadata: Metadata


class ToolResultContext(TypedDict):
    """What a tool-result policy sees: what a tool returned, before the model reads it."""

    tool_name: str
    arguments: Dict[str, Any]
    content: str
    structured: NotRequired[Any]
    is_error: bool
    metadata: Metadata


class OutputContext(TypedDict):
    """What an output policy sees: the model's answer."""

    response: Message
    metadata: Metadata


Context = Union[InputContext, ToolCallContext, ToolResultContext, OutputContext]
"""A context of any point."""


class Redaction(TypedDict):
    """One redaction: ``mask`` the field, ``remove`` it, or ``replace`` what ``pattern``
    matches in it (a dotted path; ``messages[0].content`` works too)."""

    field: str
    strategy: Literal["mask", "remove", "replace"]
    replacement: NotRequired[str]
    pattern: NotRequired[str]


class TransformOperation(TypedDict):
    """One change: ``set`` a field, or ``prepend``/``append`` to a string field."""

    op: Literal["set", "prepend", "append"]
    field: str
    value: Any


class AuditRecord(TypedDict):
    """What one policy decided about one context (§5)."""

    policy_id: str
    decision: str
    interception_point: InterceptionPoint
    reason: NotRequired[str]
    context: Dict[str, Any]
    timestamp: str
    enforced: bool


__all__ = [
    "Role",
    "InterceptionPoint",
    "Message",
    "Metadata",
    "InputContext",
    "ToolCallContext",
    "ToolResultContext",
    "OutputContext",
    "Context",
    "Redaction",
    "TransformOperation",
    "AuditRecord",
]
