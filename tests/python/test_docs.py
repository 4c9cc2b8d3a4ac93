"""Runs the Python snippets of docs/bindings.md (## Python), in order, in one namespace."""
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "bindings.md")


def _snippets():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_python_quick_start_snippets_run():
    pytest.importorskip("torch")
    snippets = _snippets()
    assert len(snippets) >= 4
    ns = {}
    for code in snippets:
        exec(compile(code, DOC, "exec"), ns)
    assert ns["out"].dtype.is_floating_point and ns["y4"].shape == (8, 64)


def test_csharp_quick_start_is_the_tested_example():
    """The C# quick start of docs/bindings.md is code of examples/Quickstart.cs,
    which the test dotnet_quickstart compiles and runs."""
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## .NET / F#", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```csharp\n(.*?)```", section, re.S)[0]
    example = os.path.join(os.path.dirname(DOC), "..", "bindings", "dotnet", "examples", "Quickstart.cs")
    lines = {l.strip() for l in open(example, encoding="utf-8").read().splitlines()}
    missing = [l.strip() for l in block.splitlines() if l.strip() and l.strip() not in lines]
    assert not missing, missing
