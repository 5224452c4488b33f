"""The public surface: the drop-in names and nbmp's own resolve, and nothing else leaks in."""

import multiprocessing
import multiprocessing.managers
import multiprocessing.shared_memory

import nbmp
import nbmp.managers
import nbmp.shared_memory


def test_every_multiprocessing_name_resolves():
    missing = [name for name in multiprocessing.__all__ if not hasattr(nbmp, name)]
    assert missing == []


def test_every_nbmp_name_resolves_and_is_documented():
    for name in set(nbmp.__all__) - set(multiprocessing.__all__):
        obj = getattr(nbmp, name)
        if callable(obj):
            assert obj.__doc__, f"nbmp.{name} has no docstring"


def test_every_nbmp_name_is_in_the_api_reference():
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "api.md")) as f:
        listed = {line.split("::: nbmp.")[1].strip() for line in f if line.startswith("::: nbmp.")}
    assert sorted(set(nbmp.__all__) - set(multiprocessing.__all__) - listed) == []


def test_public_namespace_is_deliberate():
    public = {name for name in dir(nbmp) if not name.startswith("_")}
    submodules = {"widgets"} | nbmp._MIRRORS
    ipython_protocol = {"load_ipython_extension", "unload_ipython_extension"}
    assert public - submodules - ipython_protocol - set(nbmp.__all__) == set()


def test_submodules_mirror_the_standard_ones():
    for name in multiprocessing.managers.__all__ + ["NamespaceProxy", "BaseProxy"]:
        assert hasattr(nbmp.managers, name), name
    for name in multiprocessing.shared_memory.__all__:
        assert getattr(nbmp.shared_memory, name) is getattr(multiprocessing.shared_memory, name)


def test_exceptions_are_the_standard_ones():
    for name in ("ProcessError", "BufferTooShort", "TimeoutError", "AuthenticationError"):
        assert getattr(nbmp, name) is getattr(multiprocessing, name)
