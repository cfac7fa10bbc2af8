"""The package as shipped: its public names documented, its type information present."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import portcullis

MODULES = ["portcullis", "portcullis.types", "portcullis.otel", "portcullis.observability", "portcullis.agents"]

NEEDS = {"portcullis.otel": "opentelemetry", "portcullis.agents": "agents"}
"""The optional package each optional module is built on."""


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_is_documented(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    module = importlib.import_module(name)
    assert module.__doc__
    for public in module.__all__:
        value = getattr(module, public)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{name}.{public} has no docstring"
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                if not attribute.startswith("_") and (inspect.isfunction(member) or isinstance(member, (classmethod, property))):
                    assert getattr(member, "__doc__", None), f"{name}.{public}.{attribute} has no docstring"


def test_type_information_ships_with_the_package():
    package = Path(portcullis.__file__).parent
    assert (package / "py.typed").exists()
    assert (package / "_native.pyi").exists()


def test_native_policies_have_a_class_per_point():
    for family in ("Dsl", "Rego", "RegoServer", "Http"):
        for point, suffix in (("input", "Input"), ("tool_call", "ToolCall"), ("tool_result", "ToolResult"), ("output", "Output")):
            cls = getattr(portcullis, f"{family}{suffix}Policy")
            assert cls.point == point
            assert issubclass(cls, portcullis.NativePolicy)
            assert cls.__doc__


def test_an_optional_module_without_its_package_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "agents", None)
    monkeypatch.delitem(sys.modules, "portcullis.agents", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'portcullis\[agents\]'"):
        importlib.import_module("portcullis.agents")
