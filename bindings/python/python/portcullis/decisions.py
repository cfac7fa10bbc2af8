"""Decisions (§2), built by name: ``Decision.allow()``, ``Decision.deny("reason")``, ...

A ``Decision`` is a ``dict`` of the wire shape, so a policy may return one or a plain dict
such as ``{"decision": "deny", "reason": "no"}``; the engine reads both the same way.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from .types import Redaction, TransformOperation

def _labelled(decision: "Decision", labels: Optional[Sequence[str]]) -> "Decision":
    if labels is not None:
        decision["labels"] = list(labels)
    return decision

class Decision(dict):  # type: ignore[type-arg]
    """A policy's decision: a ``dict`` of the wire shape (``{"decision": "allow"}``).

    Every kind but ``deny`` may carry ``labels`` added to the session's state when the call
    proceeds.
    """

    @property
    def kind(self) -> str:
        """The decision's name: ``allow``, ``deny``, ``audit``, ``redact``, ``transform`` or
        ``escalate``."""
        return str(self["decision"])

    @property
    def reason(self) -> Optional[str]:
        """The decision's reason, if it has one."""
        return self.get("reason")

    @classmethod
    def allow(cls, *, audit: bool = False, labels: Optional[Sequence[str]] = None) -> "Decision":
        """Proceed (``audit=True`` marks the record as worth reading)."""
        decision = cls(decision="allow")
        if audit:
            decision["audit"] = True
        return _labelled(decision, labels)

    @classmethod
    def deny(cls, reason: Optional[str] = None, *, policy_id: Optional[str] = None) -> "Decision":
        """Stop the call: the engine raises :class:`~portcullis.PolicyDenialError`."""
        decision = cls(decision="deny")
        if reason is not None:
            decision["reason"] = reason
        if policy_id is not None:
            decision["policy_id"] = policy_id
        return decision

    @classmethod
    def audit(
        cls, reason: Optional[str] = None, *, labels: Optional[Sequence[str]] = None
    ) -> "Decision":
        """Proceed; the audit record is the point."""
        decision = cls(decision="audit")
        if reason is not None:
            decision["reason"] = reason
        return _labelled(decision, labels)

    @classmethod
    def redact(
        cls,
        redactions: Iterable[Redaction],
        *,
        labels: Optional[Sequence[str]] = None,
    ) -> "Decision":
        """Apply ``redactions`` (at least one) to the context, then proceed."""
        return _labelled(cls(decision="redact", redactions=list(redactions)), labels)

    @classmethod
    def transform(
        cls,
        operations: Iterable[TransformOperation],
        *,
        labels: Optional[Sequence[str]] = None,
    ) -> "Decision":
        """Apply ``operations`` to the context, then proceed."""
        return _labelled(
            cls(decision="transform", transformation={"operations": list(operations)}), labels
        )

    @classmethod
    def escalate(
        cls, reason: Optional[str] = None, *, labels: Optional[Sequence[str]] = None
    ) -> "Decision":
        """Proceed only with a person's approval of this exact action (the engine raises
        :class:`~portcullis.ApprovalRequired` until one is granted)."""
        decision = cls(decision="escalate")
        if reason is not None:
            decision["reason"] = reason
        return _labelled(decision, labels)

def mask(field: str, replacement: Optional[str] = None) -> Redaction:
    """A redaction replacing the whole ``field`` by ``replacement`` (``[REDACTED]``)."""
    redaction: Redaction = {"field": field, "strategy": "mask"}
    if replacement is not None:
        redaction["replacement"] = replacement
    return redaction

def replace(field: str, pattern: str, replacement: Optional[str] = None) -> Redaction:
    """A redaction replacing every match of the regex ``pattern`` inside ``field``."""
    redaction: Redaction = {"field": field, "strategy": "replace", "pattern": pattern}
    if replacement is not None:
        redaction["replacement"] = replacement
    return redaction

def remove(field: str) -> Redaction:
    """A redaction removing ``field`` (an object key, or a list element)."""
    return {"field": field, "strategy": "remove"}

def set_field(field: str, value: Any) -> TransformOperation:
    """An operation setting ``field`` to ``value``."""
    return {"op": "set", "field": field, "value": value}

def prepend(field: str, text: str) -> TransformOperation:
    """An operation putting ``text`` before the string ``field``."""
    return {"op": "prepend", "field": field, "value": text}

def append(field: str, text: str) -> TransformOperation:
    """An operation putting ``text`` after the string ``field``."""
    return {"op": "append", "field": field, "value": text}


__all__ = ["Decision", "mask", "replace", "remove", "set_field", "prepend", "append"]
