"""The same tool allowlist in Portcullis and in a peer Python policy engine, side by side:
the Agent Control Specification's Python package (``agent-control-spec``, Rego run by
regorus), evaluated synchronously on a prebuilt context, in microseconds per call.

Portcullis runs the real OPA-built ``approved-tools`` bundle in process; the peer runs the same
rule written in Rego. Install both into one environment (``pip install ./bindings/python`` and
``pip install --pre agent-control-spec``), then ``python scripts/bench_peer.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from bench import FIXTURES, context, denied, per_call, settle_heap

from portcullis import PolicyEngine, PolicySet, RegoToolCallPolicy

PEER_MANIFEST = """\
agent_control_specification_version: 0.4.0-alpha.1
policies:
  tools:
    type: rego
    bundle: ./policy/tools.rego
    query: data.tools.verdict
intervention_points:
  pre_tool_call:
    policy_target: $.tool_call.args
    tool_name_from: $.tool_call.name
    policy:
      id: tools
tools:
  web_search: {type: Tool, id: web_search}
  read_file: {type: Tool, id: read_file}
  summarize: {type: Tool, id: summarize}
  delete_everything: {type: Tool, id: delete_everything}
"""

PEER_POLICY = """\
package tools

import rego.v1

approved := {"web_search", "read_file", "summarize"}

default verdict := {"decision": "deny", "reason": "Tool is not in the approved list."}

verdict := {"decision": "allow"} if input.tool.name in approved
"""


def peer_calls() -> "tuple[Callable[[], Any], Callable[[], Any], str]":
    from importlib.metadata import version

    from agent_control_spec import ActivatedPolicy
    from agent_hooks import AgentContextBuilder

    folder = Path(tempfile.mkdtemp())
    (folder / "policy").mkdir()
    (folder / "policy" / "tools.rego").write_text(PEER_POLICY)
    (folder / "acs.yaml").write_text(PEER_MANIFEST)
    policy = ActivatedPolicy(str(folder / "acs.yaml"))
    builder = AgentContextBuilder(agent_id="a", framework="bench", session_id="s")
    allowed = builder.pre_tool_call(call_id="c1", name="web_search", args={"query": "weather"})
    refused = builder.pre_tool_call(call_id="c2", name="delete_everything", args={"query": "weather"})
    assert policy.evaluate("pre_tool_call", allowed).to_wire()["decision"] == "allow"
    assert policy.evaluate("pre_tool_call", refused).to_wire()["decision"] == "deny"
    return (
        lambda: policy.evaluate("pre_tool_call", allowed),
        lambda: policy.evaluate("pre_tool_call", refused),
        f"agent-control-spec {version('agent-control-spec')}",
    )


def main() -> None:
    calls = 20_000
    engine = PolicyEngine(
        policy_set=PolicySet(
            tool_call=[RegoToolCallPolicy("approved-tools", FIXTURES / "rego-wasm" / "approved-tools.tar.gz")]
        )
    )
    allowed, refused = context("web_search"), context("delete_everything")
    peer_allow, peer_deny, peer = peer_calls()
    settle_heap()
    ours_allow = per_call(lambda: engine.evaluate_tool_call_sync(allowed), calls)
    ours_deny = per_call(denied(engine.evaluate_tool_call_sync, refused), calls)
    theirs_allow = per_call(peer_allow, calls // 10)
    theirs_deny = per_call(peer_deny, calls // 10)
    print(f"{'':34} {'allow':>12} {'deny':>12}")
    print(f"{'portcullis (approved-tools.tar.gz)':34} {ours_allow:9.2f} µs {ours_deny:9.2f} µs")
    print(f"{peer:34} {theirs_allow:9.2f} µs {theirs_deny:9.2f} µs")
    print(f"{'peer / portcullis':34} {theirs_allow / ours_allow:10.1f}x {theirs_deny / ours_deny:10.1f}x")


if __name__ == "__main__":
    main()
