"""The Python snippets of README.md and docs/python.md run as written: each ```python block is executed
in a fresh namespace in an empty working directory (a snippet may write files there). The version the
docs give for rf.__version__ is the package's."""
import pathlib
import re

import pytest

import ringfetch as rf

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/python.md"]


def snippets():
    out = []
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        for n, m in enumerate(re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)):
            line = text.count("\n", 0, m.start()) + 2
            out.append(pytest.param(doc, line, m.group(1), id=f"{doc}:{line}"))
    return out


def test_the_docs_have_snippets():
    assert {p.values[0] for p in snippets()} == set(DOCS)


@pytest.mark.parametrize("doc,line,code", snippets())
def test_snippet_runs(doc, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{doc}:{line}", "exec"), {"__name__": "__doc_snippet__"})


def test_documented_version_is_the_package_version():
    text = (ROOT / "docs/python.md").read_text(encoding="utf-8")
    m = re.search(r'^rf\.__version__\s+# "([^"]+)"', text, re.M)
    assert m, "docs/python.md gives no rf.__version__"
    assert m.group(1) == rf.__version__
