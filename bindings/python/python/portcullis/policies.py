"""Policies: functions decorated with ``@input_policy`` (and the other points), and the native
policies evaluated by the Rust backends: DSL rules, Rego bundles, an OPA server, a remote HTTP
endpoint.

Any object with an ``id`` and an ``evaluate(ctx)`` method (plain or ``async def``) is a policy
too; it may set ``deadline`` (seconds) to bound one evaluation (default 30).
"""

from __future__ import annotations

import os
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar, Union, overload

from . import _native

PathLike = Union[str, "os.PathLike[str]"]
"""A file or folder: a ``str`` or a ``pathlib.Path``."""

POINTS = ("input", "tool_call", "tool_result", "output")
"""The interception points, by their wire names."""

_F = TypeVar("_F", bound=Callable[..., Any])


class FunctionPolicy:
    """A function turned into a policy of one point by ``@input_policy`` (or another point's
    decorator). Calling it calls the function."""

    def __init__(
        self, point: str, function: Callable[..., Any], id: str, deadline: Optional[float]
    ) -> None:
        self.id = id
        """The policy's id (the function's name unless ``id=`` was given)."""
        self.point = point
        """The point it decides at."""
        self.function = function
        """The decorated function."""
        self.deadline = deadline
        """How long one evaluation may take, in seconds (``None``: 30)."""
        self.__wrapped__ = function
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", id)

    def evaluate(self, ctx: Dict[str, Any]) -> Any:
        """Decides on ``ctx``: the function's decision (or its coroutine)."""
        return self.function(ctx)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.point} policy {self.id!r}>"


def _decorator(point: str) -> Any:
    @overload
    def decorate(function: _F) -> FunctionPolicy: ...

    @overload
    def decorate(
        *, id: Optional[str] = None, deadline: Optional[float] = None
    ) -> Callable[[_F], FunctionPolicy]: ...

    def decorate(
        function: Optional[Callable[..., Any]] = None,
        *,
        id: Optional[str] = None,
        deadline: Optional[float] = None,
    ) -> Any:
        def wrap(function: Callable[..., Any]) -> FunctionPolicy:
            if not callable(function):
                raise TypeError(f"@{point}_policy decorates a function, not {function!r}")
            policy_id = id if id is not None else getattr(function, "__name__", None)
            if not isinstance(policy_id, str) or not policy_id:
                raise TypeError(f"@{point}_policy: give the policy an id with id=\"...\"")
            return FunctionPolicy(point, function, policy_id, deadline)

        return wrap if function is None else wrap(function)

    decorate.__name__ = f"{point}_policy"
    decorate.__doc__ = (
        f"Turns a function ``f(ctx) -> decision`` (plain or ``async def``) into a {point} "
        f"policy; its id is the function's name unless ``id=`` is given, ``deadline=`` bounds "
        f"one evaluation (seconds). Use as ``@{point}_policy`` or ``@{point}_policy(id=...)``."
    )
    return decorate


input_policy = _decorator("input")
tool_call_policy = _decorator("tool_call")
tool_result_policy = _decorator("tool_result")
output_policy = _decorator("output")


def _check_id(id: Any, what: str) -> str:
    if not isinstance(id, str) or not id:
        raise TypeError(f"{what}: id must be a non-empty string, not {id!r}")
    return id


def _path(path: Any, what: str) -> str:
    try:
        text = os.fspath(path)
    except TypeError:
        raise TypeError(f"{what} must be a str or a pathlib.Path, not {type(path).__name__}") from None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return text


class NativePolicy:
    """The base of the native policies: evaluated by the Rust engine, never by Python."""

    point: str = ""
    """The point the policy decides at."""

    def __init__(self, native: "_native.NativePolicy") -> None:
        self._native = native

    @property
    def id(self) -> str:
        """The policy's id."""
        return self._native.id

    @property
    def problems(self) -> List[str]:
        """Why the policy could not be loaded (empty when it loaded): each evaluation fails
        with these."""
        return self._native.problems

    @property
    def warnings(self) -> List[str]:
        """What the rule checker warns about in a rule that loaded."""
        return self._native.warnings

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r}>"


class _Dsl(NativePolicy):
    def __init__(self, id: str, dir: PathLike) -> None:
        name = type(self).__name__
        super().__init__(
            _native.dsl_policy(self.point, _check_id(id, name), _path(dir, f"{name}: dir"))
        )


class _Rego(NativePolicy):
    def __init__(self, id: str, bundle: PathLike) -> None:
        name = type(self).__name__
        super().__init__(
            _native.rego_policy(self.point, _check_id(id, name), _path(bundle, f"{name}: bundle"))
        )


class _RegoServer(NativePolicy):
    def __init__(
        self,
        id: str,
        base_url: str,
        package: str,
        *,
        timeout: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        name = type(self).__name__
        super().__init__(
            _native.rego_server_policy(
                self.point, _check_id(id, name), base_url, package, timeout, headers
            )
        )


class _Http(NativePolicy):
    def __init__(
        self,
        id: str,
        base_url: str,
        *,
        timeout: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        name = type(self).__name__
        super().__init__(
            _native.http_policy(self.point, _check_id(id, name), base_url, timeout, headers)
        )


_DOCS = {
    _Dsl: "The DSL rule ``<dir>/<id>.json`` (§6) as a {point} policy. A rule that cannot be "
    "loaded does not raise: ``problems`` says why, and each evaluation fails with it.",
    _Rego: "The OPA WebAssembly bundle (``.tar.gz`` or ``.wasm``) at ``bundle``, evaluated in "
    "process, as a {point} policy. Raises ``ValueError`` when the bundle cannot be opened.",
    _RegoServer: "The document at ``package`` on an OPA server at ``base_url`` as a {point} "
    "policy (``timeout`` in seconds, ``headers`` sent with every request). No request is made "
    "until the first evaluation.",
    _Http: "A remote endpoint (``POST {{base_url}}/engine/evaluate``) as a {point} policy "
    "(``timeout`` in seconds, ``headers`` sent with every request). No request is made until "
    "the first evaluation.",
}


def _twin(base: type, prefix: str, point: str) -> type:
    suffix = "".join(part.capitalize() for part in point.split("_"))
    doc = _DOCS[base].format(point=point.replace("_", "-"))
    return type(f"{prefix}{suffix}Policy", (base,), {"point": point, "__doc__": doc, "__module__": __name__})


DslInputPolicy = _twin(_Dsl, "Dsl", "input")
DslToolCallPolicy = _twin(_Dsl, "Dsl", "tool_call")
DslToolResultPolicy = _twin(_Dsl, "Dsl", "tool_result")
DslOutputPolicy = _twin(_Dsl, "Dsl", "output")
RegoInputPolicy = _twin(_Rego, "Rego", "input")
RegoToolCallPolicy = _twin(_Rego, "Rego", "tool_call")
RegoToolResultPolicy = _twin(_Rego, "Rego", "tool_result")
RegoOutputPolicy = _twin(_Rego, "Rego", "output")
RegoServerInputPolicy = _twin(_RegoServer, "RegoServer", "input")
RegoServerToolCallPolicy = _twin(_RegoServer, "RegoServer", "tool_call")
RegoServerToolResultPolicy = _twin(_RegoServer, "RegoServer", "tool_result")
RegoServerOutputPolicy = _twin(_RegoServer, "RegoServer", "output")
HttpInputPolicy = _twin(_Http, "Http", "input")
HttpToolCallPolicy = _twin(_Http, "Http", "tool_call")
HttpToolResultPolicy = _twin(_Http, "Http", "tool_result")
HttpOutputPolicy = _twin(_Http, "Http", "output")

Policy = Any
"""A policy: an object with ``id`` and ``evaluate(ctx)`` (plain or ``async def``), a
decorated function, or a native policy."""

EvaluateResult = Union[Dict[str, Any], Awaitable[Dict[str, Any]]]
"""What ``evaluate(ctx)`` returns: a decision, or an awaitable of one."""

__all__ = [
    "FunctionPolicy",
    "NativePolicy",
    "input_policy",
    "tool_call_policy",
    "tool_result_policy",
    "output_policy",
    "DslInputPolicy",
    "DslToolCallPolicy",
    "DslToolResultPolicy",
    "DslOutputPolicy",
    "RegoInputPolicy",
    "RegoToolCallPolicy",
    "RegoToolResultPolicy",
    "RegoOutputPolicy",
    "RegoServerInputPolicy",
    "RegoServerToolCallPolicy",
    "RegoServerToolResultPolicy",
    "RegoServerOutputPolicy",
    "HttpInputPolicy",
    "HttpToolCallPolicy",
    "HttpToolResultPolicy",
    "HttpOutputPolicy",
]
