"""Types of the native module ``portcullis._native`` (the Rust engine's building blocks; the
package's Python layer is the public API)."""

from typing import Any, Awaitable, Dict, List, Optional, Tuple, Union

Outcome = Tuple[int, Any, Optional[List[Dict[str, Any]]]]

class NativePolicy:
    @property
    def id(self) -> str: ...
    @property
    def point(self) -> str: ...
    @property
    def problems(self) -> List[str]: ...
    @property
    def warnings(self) -> List[str]: ...

class NativePolicySet:
    def __init__(self, on_error: str) -> None: ...
    def add_python(
        self, point: str, id: str, evaluate: Any, deadline: Optional[float] = None
    ) -> None: ...
    def add_native(self, point: str, policy: NativePolicy) -> None: ...

class NativeAuditSink:
    @property
    def endpoint(self) -> str: ...
    def flush(self) -> None: ...

class NativeEngine:
    def evaluate_sync(self, point: str, context: Any) -> Outcome:
        """The outcome; raises the PolicyDenialError of a denial when no records are kept."""
    def evaluate_async(self, point: str, context: Any) -> Union[Outcome, Awaitable[Outcome]]: ...
    def grant(self, digest: str, by: str, ttl: float) -> None: ...

def dsl_policy(point: str, id: str, dir: str) -> NativePolicy: ...
def rego_policy(point: str, id: str, bundle: str) -> NativePolicy: ...
def rego_server_policy(
    point: str,
    id: str,
    base_url: str,
    package: str,
    timeout: Optional[float] = None,
    headers: Optional[Dict[str, str]] = None,
) -> NativePolicy: ...
def http_policy(
    point: str,
    id: str,
    base_url: str,
    timeout: Optional[float] = None,
    headers: Optional[Dict[str, str]] = None,
) -> NativePolicy: ...
def create_engine(
    set: NativePolicySet, audit: bool, sink: Optional[NativeAuditSink] = None
) -> NativeEngine: ...
def engine_from_manifest(
    path: str, audit: bool, sink: Optional[NativeAuditSink] = None
) -> NativeEngine: ...
def observability_sink(
    public_key: Optional[str] = None,
    secret_key: Optional[str] = None,
    base_url: Optional[str] = None,
) -> NativeAuditSink: ...
