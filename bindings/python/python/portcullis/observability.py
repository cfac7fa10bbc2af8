"""Audit records as traces on an LLM observability platform (Langfuse-compatible, OTLP/HTTP
with HTTP Basic auth), exported by the Rust handler on a thread of its own (§7.5)::

    from portcullis.observability import ObservabilityAuditHandler
    handler = ObservabilityAuditHandler()          # OBS_PUBLIC_KEY, OBS_SECRET_KEY, OBS_BASE_URL
    engine = PolicyEngine(policy_set=..., on_audit=handler)
    ...
    handler.flush()                                # before the process exits
"""

from __future__ import annotations

from typing import Any, Optional

from . import _native


class ObservabilityAuditHandler:
    """An audit handler exporting every record as a span to an observability platform, with
    ``session.id`` and ``user.id`` from the context's metadata.

    Without arguments it reads ``OBS_PUBLIC_KEY``, ``OBS_SECRET_KEY`` and ``OBS_BASE_URL``
    (default base: ``https://cloud.langfuse.com``). A missing key raises ``ValueError``. Give
    it to :class:`~portcullis.PolicyEngine` as ``on_audit``: the engine feeds it without a
    call into Python, and an export never blocks or fails an evaluation.
    """

    def __init__(
        self,
        public_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        base_url: Optional[str] = None,
    ) -> None:
        given = (public_key, secret_key, base_url)
        if any(value is not None and not isinstance(value, str) for value in given):
            raise TypeError("ObservabilityAuditHandler: keys and base_url must be strings")
        if any(value is not None for value in given) and (not public_key or not secret_key):
            raise ValueError(
                "ObservabilityAuditHandler: give both public_key and secret_key (or neither, to "
                "read OBS_PUBLIC_KEY, OBS_SECRET_KEY and OBS_BASE_URL)"
            )
        self._portcullis_sink = _native.observability_sink(public_key, secret_key, base_url)

    @property
    def endpoint(self) -> str:
        """Where spans are posted."""
        return self._portcullis_sink.endpoint

    def flush(self) -> None:
        """Exports every span buffered so far (without holding the GIL); raises
        ``RuntimeError`` with why an export failed."""
        self._portcullis_sink.flush()

    def __call__(self, record: Any) -> None:
        raise TypeError(
            "the observability audit handler is fed by the engine: give it to PolicyEngine as on_audit"
        )


__all__ = ["ObservabilityAuditHandler"]
