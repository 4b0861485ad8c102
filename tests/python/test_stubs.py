"""The type stubs (__init__.pyi, safetensors.pyi) say how each function is called as the package takes
it: a parameter the stubs let be passed by keyword is one the package accepts by keyword, and the
other way round (a type-checked call must not be a TypeError at run time)."""
import ast
import inspect
import pathlib

import pytest

import ringfetch as rf
import ringfetch.safetensors as rst

PKG = pathlib.Path(rf.__file__).resolve().parent


def stub_params(fn):
    a = fn.args
    out = [(x.arg, "POSITIONAL_ONLY") for x in a.posonlyargs]
    out += [(x.arg, "POSITIONAL_OR_KEYWORD") for x in a.args]
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL"))
    out += [(x.arg, "KEYWORD_ONLY") for x in a.kwonlyargs]
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD"))
    return [p for p in out if p[0] != "self"]


def callables():
    out = []
    for stub, mod in (("__init__.pyi", rf), ("safetensors.pyi", rst)):
        tree = ast.parse((PKG / stub).read_text(encoding="utf-8"))
        scopes = [(None, tree.body)] + [(n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
        for cls, body in scopes:
            owner = mod if cls is None else getattr(mod, cls, None)
            for fn in body:
                if not isinstance(fn, ast.FunctionDef) or owner is None or fn.decorator_list:
                    continue
                if fn.name.startswith("__") and fn.name != "__init__":
                    continue                  # called by the language (with, len, in), never by keyword
                obj = owner if fn.name == "__init__" else getattr(owner, fn.name, None)
                if obj is None:
                    continue
                try:
                    sig = inspect.signature(obj)
                except (TypeError, ValueError):
                    continue                  # a slot wrapper with no text signature: nothing to compare
                name = f"{stub}:{cls + '.' if cls else ''}{fn.name}"
                out.append(pytest.param(fn, sig, id=name))
    return out


def test_some_callables_are_compared():
    names = {p.id for p in callables()}
    assert {"__init__.pyi:Pipeline.__init__", "__init__.pyi:Pipeline.acquire", "__init__.pyi:Block.view",
            "__init__.pyi:plan_ring", "safetensors.pyi:open"} <= names


@pytest.mark.parametrize("fn,sig", callables())
def test_stub_matches_the_package(fn, sig):
    real = [(p.name, p.kind.name) for p in sig.parameters.values() if p.name != "self"]
    assert stub_params(fn) == real
