"""How the torch.compile backend keeps its first call short, without torch:
graphs with no op fusion could start from are not exported, kilnc runs
while the process does other work, the sites' packages compile in the
background while the sites are timed, and each second of the first call is
counted in one step."""

import json
import threading
import time
import types
from pathlib import Path

import pytest

import kiln.dynamo as kd
from kiln.runtime import KilnError, Status


# --------------------------------------------------------------------------
# Graphs that hold no attention are not exported.
# --------------------------------------------------------------------------


def softmax(*args):  # stand-ins for the graph's targets, named as torch's
    pass


def linear(*args):
    pass


def amax(*args):
    pass


def scaled_dot_product_attention(*args):
    pass


def fake_graph(*nodes, submodules=()):
    graph = types.SimpleNamespace(nodes=[types.SimpleNamespace(op=op, target=target)
                                         for op, target in nodes])
    module = types.SimpleNamespace(graph=graph)
    module.modules = lambda: [module, *submodules]
    return module


def test_graphs_without_a_softmax_max_or_attention_are_not_exported() -> None:
    assert not kd.may_hold_attention(fake_graph(
        ("placeholder", "x"), ("call_function", linear), ("call_method", "relu"),
        ("output", "output")))
    assert kd.may_hold_attention(fake_graph(("call_function", softmax)))
    assert kd.may_hold_attention(fake_graph(("call_method", "softmax")))
    # A hand-written softmax starts from its row max.
    assert kd.may_hold_attention(fake_graph(("call_function", amax)))
    assert kd.may_hold_attention(fake_graph(("call_method", "max")))
    # ... or through its logarithm.
    assert kd.may_hold_attention(fake_graph(("call_method", "logsumexp")))
    assert kd.may_hold_attention(fake_graph(("call_method", "log_softmax")))
    assert kd.may_hold_attention(fake_graph(
        ("call_function", scaled_dot_product_attention)))


def test_ops_the_graph_does_not_show_count_as_attention() -> None:
    # A called module's ops are not in the graph; a higher-order op's
    # subgraph is a submodule whose own graph is searched.
    assert kd.may_hold_attention(fake_graph(("call_module", "attn")))
    inner = fake_graph(("call_function", softmax))
    assert kd.may_hold_attention(fake_graph(("get_attr", "subgraph_0"),
                                            submodules=[inner]))
    plain = fake_graph(("call_function", linear))
    assert not kd.may_hold_attention(fake_graph(("get_attr", "subgraph_0"),
                                                submodules=[plain]))


# --------------------------------------------------------------------------
# kilnc runs while the process does other work.
# --------------------------------------------------------------------------


REPORT = {"bound_dims": {}, "sites": [], "unfused": [{"node": "n", "reason": "r" * 100}] * 2000}


@pytest.fixture
def fake_kilnc(tmp_path: Path, monkeypatch):
    """A kilnc that takes `delay` seconds, counts its runs, and prints a
    report larger than a pipe's buffer (kilnc writes to files, so it never
    stalls before the report is read)."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(REPORT))
    runs = tmp_path / "runs"

    def make(delay: float, status: int = 0) -> Path:
        script = tmp_path / "kilnc"
        script.write_text(f"#!/bin/sh\necho run >> {runs}\nsleep {delay}\n"
                          f"cat {report}\necho 'kilnc: an error' >&2\nexit {status}\n")
        script.chmod(0o755)
        monkeypatch.setenv("KILN_KILNC", str(script))
        return runs

    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_KEEP_GRAPHS", raising=False)
    return make


class FakeProgram:
    def save(self, path: str) -> None:
        Path(path).write_bytes(b"onnx")


def test_kilnc_runs_while_the_process_prepares(fake_kilnc) -> None:
    runs = fake_kilnc(1.0)
    done = []
    entry: dict = {}

    def meanwhile() -> None:
        time.sleep(1.0)  # the process's own work, e.g. importing Inductor
        done.append(True)

    began = time.perf_counter()
    report = kd._report_for("graph0", FakeProgram(), {}, meanwhile=meanwhile,
                            entry=entry)
    elapsed = time.perf_counter() - began
    assert report == REPORT and done == [True]
    assert elapsed < 1.8, elapsed  # 2 s one after the other
    assert entry["overlapped"]["kilnc"] >= 1.0
    assert entry["seconds"]["kilnc"] < 0.8  # the wait left after the work
    assert runs.read_text().count("run") == 1
    # The report is cached: a later compile of the graph runs no kilnc, but
    # still does the work that does not need it.
    again = []
    assert kd._report_for("graph0", FakeProgram(), {},
                          meanwhile=lambda: again.append(True)) == REPORT
    assert again == [True] and runs.read_text().count("run") == 1
    assert not (kd._graphs_directory() / "graph0.onnx").exists()


def test_a_report_another_kilnc_wrote_is_made_again(fake_kilnc) -> None:
    """A cached report records the kilnc that wrote it: a process with
    another kilnc (a rebuilt one, another wheel's) runs its own."""
    runs = fake_kilnc(0.0)
    assert kd._report_for("graph2", FakeProgram(), {}) == REPORT
    cached = kd._graphs_directory() / "graph2.report.json"
    stored = json.loads(cached.read_text())
    assert stored["kilnc"] and runs.read_text().count("run") == 1
    cached.write_text(json.dumps({**stored, "kilnc": "/elsewhere/kilnc 1 2"}))
    assert kd._report_for("graph2", FakeProgram(), {}) == REPORT
    assert runs.read_text().count("run") == 2


def test_a_failing_kilnc_says_why(fake_kilnc) -> None:
    fake_kilnc(0.0, status=1)
    with pytest.raises(KilnError, match="an error"):
        kd._report_for("graph1", FakeProgram(), {})


def test_kilnc_is_stopped_when_the_work_beside_it_fails(fake_kilnc) -> None:
    fake_kilnc(30.0)
    began = time.perf_counter()

    def meanwhile() -> None:
        raise ValueError("the export's names")

    with pytest.raises(ValueError):
        kd._report_for("graph2", FakeProgram(), {}, meanwhile=meanwhile)
    assert time.perf_counter() - began < 10
    assert not (kd._graphs_directory() / "graph2.report.json").exists()


def test_run_kilnc_still_gives_the_report(fake_kilnc) -> None:
    fake_kilnc(0.0)
    onnx = kd._graphs_directory()
    onnx.mkdir(parents=True)
    (onnx / "g.onnx").write_bytes(b"onnx")
    assert kd._run_kilnc(onnx / "g.onnx", {}) == REPORT


# --------------------------------------------------------------------------
# The sites' packages compile in the background.
# --------------------------------------------------------------------------


@pytest.fixture
def sources(monkeypatch):
    """Sites whose package source is their "form" (no kilnc needed)."""
    def source(site):
        if site["form"] == "bad":
            raise KilnError(Status.UNSUPPORTED, "no such site")
        return site["form"]

    monkeypatch.setattr(kd, "site_source", source)
    monkeypatch.setattr(kd, "_site_label", lambda site: "label")


def test_site_packages_compile_while_the_main_thread_works(sources) -> None:
    built = []

    def compile(source: str, label: str):
        time.sleep(0.5)
        built.append(source)
        if source == "broken":
            raise KilnError(Status.FORMAT_ERROR, "kilnc failed")
        return types.SimpleNamespace(source=source)

    entry: dict = {}
    handles = {}
    kernels = kd._SiteKernels(entry, compile=compile,
                              handle=lambda site: handles.setdefault(site.source, len(handles)))
    began = time.perf_counter()
    first = kernels.start({"form": "causal"})
    second = kernels.start({"form": "causal"})  # another layer: the same package
    other = kernels.start({"form": "masked"})
    broken = kernels.start({"form": "broken"})
    time.sleep(1.0)  # the main thread's own work (capture, Inductor's compile)
    assert first() == second() == 0
    assert other() == 1
    with pytest.raises(KilnError, match=r"no kernel \(.*kilnc failed\)"):
        broken()
    elapsed = time.perf_counter() - began
    kernels.close()
    assert built == ["causal", "masked", "broken"]
    assert elapsed < 2.2, elapsed  # 1 s of work beside 1.5 s of packages
    assert entry["seconds"]["site kernels"] < 1.0
    assert entry["overlapped"]["site kernels"] >= 1.5


def test_a_site_without_a_package_source_is_refused_at_once(sources) -> None:
    kernels = kd._SiteKernels({}, compile=lambda *a: pytest.fail("compiled"))
    site = {"form": "bad", "operands": {}, "output": None}
    why, chosen, handle = kd._plan(site, {}, kernels)
    kernels.close()
    assert why.startswith("no kernel (") and "no such site" in why
    assert handle is None


# --------------------------------------------------------------------------
# Each second counts in one step.
# --------------------------------------------------------------------------


def test_a_wait_inside_a_step_counts_in_its_own_step_only() -> None:
    entry: dict = {}
    with kd._step(entry, "site timing"):
        time.sleep(0.2)
        with kd._step(entry, "site kernels"):
            time.sleep(0.3)
    assert entry["seconds"]["site kernels"] >= 0.3
    assert 0.2 <= entry["seconds"]["site timing"] < 0.3
    # A step of another thread (the background's) does not nest in this
    # thread's.
    other: dict = {}

    def background() -> None:
        with kd._step(other, "in the background"):
            time.sleep(0.1)

    with kd._step(entry, "check"):
        worker = threading.Thread(target=background)
        worker.start()
        worker.join()
    assert entry["seconds"]["check"] >= 0.1
    assert other["seconds"]["in the background"] >= 0.1


def test_a_reserved_handle_waits_for_its_package_on_first_use(monkeypatch) -> None:
    """A site whose package is still compiling is written with a reserved
    handle (the graph is compiled meanwhile); the op's first use waits for
    the package and binds it; a package that failed names the handle."""
    import threading

    from kiln import torch_ops as kops

    monkeypatch.setattr(kops, "_define", lambda: None)
    monkeypatch.setattr(kops, "_sites", [])
    monkeypatch.setattr(kops, "_pending", {})
    ready = threading.Event()
    site = types.SimpleNamespace()

    def resolve():
        ready.wait(5)
        return site

    index = kops.reserve(resolve)
    assert kops._sites[index] is None
    threading.Timer(0.2, ready.set).start()
    began = time.perf_counter()
    assert kops._site(index) is site
    assert time.perf_counter() - began >= 0.15
    assert site._torch_handle == index and not kops._pending

    def broken():
        raise KilnError(Status.FORMAT_ERROR, "no kernel (kilnc failed)")

    other = kops.reserve(broken)
    with pytest.raises(KilnError, match="kilnc failed"):
        kops._site(other)
