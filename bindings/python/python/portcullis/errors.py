"""The exceptions an engine raises."""

from __future__ import annotations

from typing import Any, Dict, Optional


class PortcullisError(Exception):
    """The base of every exception Portcullis raises for an evaluation."""


class PolicyDenialError(PortcullisError):
    """A policy denied the call.

    ``str(error)`` is the policy's reason, or a fixed text when it gave none.
    """

    # Every denied call makes one: its fields in slots, not in a dict made for each.
    __slots__ = ("policy_id", "interception_point", "reason")

    policy_id: str
    """The policy that denied (the decision's own ``policy_id`` when it set one)."""
    interception_point: str
    """Where: ``input``, ``tool_call``, ``tool_result`` or ``output``."""
    reason: Optional[str]
    """The policy's reason, if it gave one."""

    def __init__(
        self,
        message: str,
        *,
        policy_id: str,
        interception_point: str,
        reason: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.policy_id = policy_id
        self.interception_point = interception_point
        self.reason = reason


class PolicyEvaluationError(PortcullisError):
    """A policy could not be evaluated (it raised, returned something that is not a decision,
    timed out, or its backend failed), and the policy set's ``on_error`` is ``"deny"``.

    When a Python policy raised, that exception is ``__cause__``.
    """

    policy_id: str
    """The policy that failed."""
    interception_point: str
    """Where: ``input``, ``tool_call``, ``tool_result`` or ``output``."""
    cause: str
    """Why it failed, with the chain of causes."""

    def __init__(self, *, policy_id: str, interception_point: str, cause: str) -> None:
        super().__init__(
            f"Policy evaluation failed for '{policy_id}' at '{interception_point}': {cause}"
        )
        self.policy_id = policy_id
        self.interception_point = interception_point
        self.cause = cause


class ApprovalRequired(PortcullisError):
    """A policy escalated: the call may proceed only once a person approves ``request``.

    ``request`` is the approval request as a dict: ``id``, ``interception_point``,
    ``policy_ids``, ``reasons``, ``context`` (what would be forwarded) and ``action_digest``.
    """

    request: Dict[str, Any]
    """The approval request."""
    policy_id: str
    """The first policy that escalated."""
    interception_point: str
    """Where: ``input``, ``tool_call``, ``tool_result`` or ``output``."""

    def __init__(self, request: Dict[str, Any]) -> None:
        policy_ids = request.get("policy_ids") or [""]
        point = request.get("interception_point", "")
        super().__init__(
            "Approval required for '" + "', '".join(policy_ids) + f"' at '{point}'."
        )
        self.request = request
        self.policy_id = policy_ids[0]
        self.interception_point = point


__all__ = ["PortcullisError", "PolicyDenialError", "PolicyEvaluationError", "ApprovalRequired"]
