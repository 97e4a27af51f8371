"""A timed site whose package is still compiling is timed after Inductor's
compile of the rewritten graph (docs/design.md, "The first call"): its
timing is prepared and left pending (kiln.choice.Pending), the site is
written on Kiln's path meanwhile, and where it then loses the graph is
rewritten without it and compiled again. No torch needed."""

import contextlib
import importlib.util
import sys
import types

import pytest

import kiln.dynamo as kd
from kiln import choice
from kiln.runtime import KilnError, Status


@pytest.fixture(autouse=True)
def decisions(monkeypatch, tmp_path):
    """A fresh memory and cache directory of decisions."""
    monkeypatch.setattr(choice, "_decisions", {})
    monkeypatch.setattr(choice, "_directory", lambda: tmp_path / "choices")


def timing(key, decision, runs):
    """A Pending whose measurement records itself in `runs`."""
    def run():
        runs.append(key)
        choice._remember(key, decision)
        return decision

    return choice.Pending(key, run)


# --------------------------------------------------------------------------
# kiln.choice: measured now, or left pending.
# --------------------------------------------------------------------------


def test_a_site_whose_package_is_compiling_is_left_pending():
    runs, pending = [], {}
    left = choice._later_or_now(timing("k", {"path": "kiln"}, runs), pending,
                                lambda: False)
    assert isinstance(left, choice.Pending)
    assert runs == [] and pending == {"k": left}
    assert left.measure() == {"path": "kiln"}
    assert runs == ["k"]


def test_a_site_whose_package_is_built_is_timed_at_once():
    runs, pending = [], {}
    decision = choice._later_or_now(timing("k", {"path": "inductor"}, runs), pending,
                                    lambda: True)
    assert decision == {"path": "inductor"}
    assert runs == ["k"] and pending == {}


def test_a_caller_that_takes_no_pending_timing_gets_a_decision():
    # choose() and the rewrite of regions: no `pending`, or no `built`.
    runs = []
    assert choice._later_or_now(timing("a", {"path": "kiln"}, runs), None,
                                lambda: False) == {"path": "kiln"}
    assert choice._later_or_now(timing("b", {"path": "kiln"}, runs), {},
                                None) == {"path": "kiln"}
    assert runs == ["a", "b"]


def test_a_pending_timing_is_measured_once_and_remembered():
    runs = []
    pending = timing("k", {"path": "kiln", "kiln_us": 1.0}, runs)
    first = pending.measure()
    assert pending.measure() is first
    assert runs == ["k"]
    assert choice._recall("k") == {"path": "kiln", "kiln_us": 1.0}


def test_a_site_of_a_form_decided_meanwhile_is_not_timed_again():
    runs = []
    first = timing("k", {"path": "inductor"}, runs)
    follower = choice.Pending("k", first.measure)  # another layer (prepare)
    assert first.measure() == {"path": "inductor"}
    assert follower.measure() == {"path": "inductor", "cached": True}
    # Decided by another graph or process before its own measurement.
    choice._remember("other", {"path": "kiln"})
    late = timing("other", {"path": "inductor"}, runs)
    assert late.measure() == {"path": "kiln", "cached": True}
    assert runs == ["k"]


def test_a_follower_of_an_unremembered_timing_takes_its_decision():
    # Out of memory while timing: nothing remembered, the decision shared.
    runs = []

    def run():
        runs.append("k")
        return {"path": "kiln", "why": "not timed: out of memory while timing"}

    first = choice.Pending("k", run)
    follower = choice.Pending("k", first.measure)
    assert follower.measure() == first.measure()
    assert runs == ["k"]


# --------------------------------------------------------------------------
# The rewrite: pending sites on Kiln's path, decided sites not asked again.
# --------------------------------------------------------------------------


class Node:
    def __init__(self, name):
        self.name, self.meta, self.replaced_by = name, {}, None

    def replace_all_uses_with(self, other):
        self.replaced_by = other


class Graph:
    def __init__(self, names):
        self.nodes = [Node(name) for name in names]

    @contextlib.contextmanager
    def inserting_before(self, node):
        yield

    def erase_node(self, node):
        self.nodes.remove(node)

    def eliminate_dead_code(self):
        pass

    def lint(self):
        pass


class Module:
    def __init__(self, names):
        self.graph = Graph(names)

    def recompile(self):
        pass


class Kernels:
    """_SiteKernels' part the rewrite asks: whether a package is built, and
    its wait."""

    def __init__(self):
        self.waited = []

    def built(self, site):
        return site["built"]

    def wait(self, site):
        self.waited.append(site["name"])


class Timer:
    """_Timed as the rewrite calls it, each site's decision given by its
    `wins`; `calls` records each site asked and the `built` it was given."""

    def __init__(self):
        self.pending, self.calls, self.runs = {}, [], []

    def prepare(self, names):
        pass

    def __call__(self, site, output, sources, build, probe=None, dense=None, built=None):
        self.calls.append((site["name"], built is not None))
        return choice._later_or_now(
            timing(site["name"], {"path": site["wins"], "why": "timed"}, self.runs),
            self.pending if built is not None else None, built)


def site(name, built=True, wins="kiln"):
    return {"name": name, "built": built, "wins": wins, "operands": {},
            "q": f"q_{name}", "out": f"out_{name}"}


@pytest.fixture
def rewrite(monkeypatch):
    """_rewrite_sites on stand-ins: each site's output and query nodes, its
    Kiln path one inserted node (none for a site named "refused")."""
    def plan(site, nodes, kernels):
        return None, {"output": {"value": site["out"]}, "query": {"value": site["q"]}}, \
            (lambda: 0)

    def insert(into, operands, site, chosen, handle, dense_bias, training=False):
        if site["name"] == "refused":
            raise KilnError(Status.UNSUPPORTED, "the backend refuses it")
        node = Node(f"kiln_{site['name']}")
        into.nodes.append(node)
        return node

    monkeypatch.setattr(kd, "_plan", plan)
    monkeypatch.setattr(kd, "_insert_site", insert)

    def run(sites, choose, deferred=None, decided=None):
        names = [n for s in sites for n in (s["q"], s["out"])]
        module = Module(names)
        nodes = {node.name: node for node in module.graph.nodes}
        entry = {"rewritten": [], "skipped": {}}
        kernels = Kernels()
        count = kd._rewrite_sites(module, {"sites": sites}, entry, choose, nodes,
                                  "kiln", kernels, deferred, decided)
        return count, entry, kernels, nodes

    return run


def test_a_site_whose_package_is_compiling_is_written_on_kilns_path(rewrite):
    timer, deferred = Timer(), {}
    sites = [site("a"), site("b", built=False, wins="inductor"),
             site("c", wins="inductor")]
    count, entry, kernels, nodes = rewrite(sites, timer, deferred)
    assert timer.runs == ["a", "c"]  # b is measured later
    assert count == 2 and entry["rewritten"] == [0, 1]
    assert set(entry["choices"]) == {0, 2}
    assert "Inductor's path is faster" in entry["skipped"][2]
    assert list(deferred) == [1]
    pending, wait = deferred[1]
    assert isinstance(pending, choice.Pending)
    assert nodes["out_b"].replaced_by.name == "kiln_b"
    wait()
    assert kernels.waited == ["b"]
    assert pending.measure()["path"] == "inductor" and timer.runs == ["a", "c", "b"]


def test_without_a_place_for_pending_timings_every_site_is_timed_now(rewrite):
    # The rewrite of regions: no `deferred`, so no `built` asked.
    timer = Timer()
    count, entry, _, _ = rewrite([site("a", built=False), site("b", built=False,
                                                               wins="inductor")], timer)
    assert timer.calls == [("a", False), ("b", False)]
    assert timer.runs == ["a", "b"]
    assert count == 1 and set(entry["choices"]) == {0, 1}


def test_a_pending_site_the_backend_refuses_is_not_left_pending(rewrite):
    timer, deferred = Timer(), {}
    count, entry, _, _ = rewrite([site("refused", built=False)], timer, deferred)
    assert count == 0 and deferred == {}
    assert "refuses" in entry["skipped"][0]


def test_decided_sites_are_not_timed_again(rewrite):
    def choose(*args, **kwargs):
        pytest.fail("a decided site was timed again")

    choose.prepare = lambda names: None
    decided = {0: {"path": "kiln", "why": "timed", "deferred": True},
               1: {"path": "inductor", "why": "timed", "deferred": True},
               2: KilnError(Status.UNSUPPORTED, "no kernel (kilnc failed)")}
    count, entry, _, nodes = rewrite([site("a"), site("b"), site("c")], choose,
                                     None, decided)
    assert count == 1 and entry["rewritten"] == [0]
    assert entry["choices"] == {0: decided[0], 1: decided[1]}
    assert "Inductor's path is faster" in entry["skipped"][1]
    assert "kilnc failed" in entry["skipped"][2]
    assert nodes["out_c"].replaced_by is None


# --------------------------------------------------------------------------
# After the graph's compile: the pending sites timed, the graph redone
# where one loses.
# --------------------------------------------------------------------------


class Measurer:
    """_Timed.measure on given decisions (a KilnError: the site refused)."""

    def __init__(self, decisions):
        self.decisions = decisions

    def measure(self, pending, wait=None):
        wait()
        decision = self.decisions[pending]
        if isinstance(decision, Exception):
            raise decision
        return decision


@pytest.fixture
def redo(monkeypatch):
    calls = []

    def rewritten_graph(exported, report, tensors, entry, timer, deferred=None,
                        decided=None):
        calls.append({"entry": dict(entry), "decided": decided, "deferred": deferred})
        return "graph without the losing sites"

    monkeypatch.setattr(kd, "_rewritten_graph", rewritten_graph)
    return calls


def pending_sites(*indices):
    waited = []
    return {i: (f"pending {i}", lambda i=i: waited.append(i)) for i in indices}, waited


def test_sites_that_keep_kilns_path_leave_the_compiled_graph(redo):
    deferred, waited = pending_sites(1, 2)
    entry = {"rewritten": [0, 1, 2], "skipped": {},
             "choices": {0: {"path": "kiln", "why": "size"}}}
    timer = Measurer({"pending 1": {"path": "kiln", "kiln_us": 5.0, "inductor_us": 9.0},
                      "pending 2": {"path": "kiln", "why": "not timed: OSError: x"}})
    assert kd._settle("exported", {}, [], entry, timer, deferred) is None
    assert redo == [] and waited == [1, 2]
    assert entry["rewritten"] == [0, 1, 2]
    assert entry["choices"][1] == {"path": "kiln", "kiln_us": 5.0, "inductor_us": 9.0,
                                   "deferred": True}
    assert entry["choices"][2]["deferred"] and "deferred" not in entry["choices"][0]
    assert "site timing" in entry["seconds"]


def test_a_site_that_loses_is_rewritten_again_without_it(redo):
    deferred, _ = pending_sites(1, 2)
    entry = {"rewritten": [0, 1, 2], "skipped": {3: "no source"},
             "choices": {0: {"path": "kiln", "why": "size"}}}
    timer = Measurer({"pending 1": {"path": "inductor", "why": "timed"},
                      "pending 2": {"path": "kiln", "why": "timed"}})
    assert kd._settle("exported", {}, [], entry, timer, deferred) == \
        "graph without the losing sites"
    (call,) = redo
    # Rewritten afresh, with every decision made (none asked again, none
    # left pending).
    assert call["entry"]["rewritten"] == [] and call["entry"]["skipped"] == {}
    assert call["deferred"] is None
    assert call["decided"] == {0: {"path": "kiln", "why": "size"},
                               1: {"path": "inductor", "why": "timed", "deferred": True},
                               2: {"path": "kiln", "why": "timed", "deferred": True}}


def test_a_site_whose_package_failed_is_rewritten_again_without_it(redo):
    deferred, _ = pending_sites(0)
    entry = {"rewritten": [0], "skipped": {}}
    failed = KilnError(Status.FORMAT_ERROR, "no kernel (kilnc failed)")
    timer = Measurer({"pending 0": failed})
    kd._settle("exported", {}, [], entry, timer, deferred)
    assert redo[0]["decided"] == {0: failed}
    assert 0 not in entry.get("choices", {})


def test_the_redone_graph_falls_back_as_a_first_rewrite_does(monkeypatch):
    monkeypatch.setattr(kd, "_graph_of", lambda exported: Module([]))
    monkeypatch.setattr(kd, "_rewrite", lambda *args: 0)
    entry = {"rewritten": [], "skipped": {}, "fallback": None,
             "choices": {0: {"path": "inductor", "why": "timed", "deferred": True}}}
    with pytest.raises(kd._Fallback, match="Inductor's own code measured faster"):
        kd._rewritten_graph("exported", {"sites": [{}]}, [], entry, None,
                            decided={0: entry["choices"][0]})


# --------------------------------------------------------------------------
# The order: the graph compiled, then the sites timed, then the check.
# --------------------------------------------------------------------------


@pytest.fixture
def unchecked(monkeypatch):
    if importlib.util.find_spec("torch") is None:
        # _checked imports it, and needs none of it here.
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setenv("KILN_VERIFY", "0")
    events = []
    monkeypatch.setattr(kd, "_bind_sites", lambda module: events.append(("bind", module)))
    monkeypatch.setattr(kd, "_inductor", lambda module, tensors, options: (
        events.append(("inductor", module)) or f"compiled {module}"))
    return events


def test_the_pending_sites_are_timed_after_the_graphs_compile(unchecked):
    def settle():
        unchecked.append(("settle", None))
        return None

    entry = {"rewritten": [0], "skipped": {}, "verified": None}
    assert kd._checked("gm", [], "rewritten", [], {}, entry, settle) == \
        "compiled rewritten"
    assert unchecked == [("inductor", "rewritten"), ("settle", None),
                         ("bind", "rewritten")]


def test_a_graph_redone_is_compiled_again_and_runs(unchecked):
    entry = {"rewritten": [0], "skipped": {}, "verified": None}
    assert kd._checked("gm", [], "rewritten", [], {}, entry,
                       lambda: "redone") == "compiled redone"
    assert unchecked == [("inductor", "rewritten"), ("inductor", "redone"),
                         ("bind", "redone")]
