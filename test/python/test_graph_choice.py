"""When the torch.compile backend times the rewritten graph as a whole
against Inductor alone: only where its sites' own timings do not already
show a saving larger than the exported graph's measured cost
(kiln.dynamo.sites_saving_us, GRAPH_MARGIN_US). No torch needed."""

import math

import kiln.dynamo as kd


def entry(rewritten, choices):
    return {"rewritten": rewritten, "choices": choices}


def test_timed_sites_add_their_savings():
    e = entry([0, 1], {0: {"path": "kiln", "kiln_us": 100.0, "inductor_us": 250.0},
                       1: {"path": "kiln", "kiln_us": 90.0, "inductor_us": 300.0}})
    assert kd.sites_saving_us(e) == 360.0
    assert kd.sites_saving_us(e) >= kd.GRAPH_MARGIN_US


def test_a_small_saving_stays_below_the_margin():
    e = entry([0], {0: {"path": "kiln", "kiln_us": 20.0, "inductor_us": 31.0}})
    assert kd.sites_saving_us(e) == 11.0
    assert kd.sites_saving_us(e) < kd.GRAPH_MARGIN_US


def test_sites_rewritten_for_their_size_save_without_bound():
    e = entry([0, 2], {0: {"path": "kiln", "kiln_us": 20.0, "inductor_us": 31.0},
                       2: {"path": "kiln", "untimed": "size", "why": "not timed"}})
    assert math.isinf(kd.sites_saving_us(e))


def test_an_untimed_site_leaves_the_saving_unknown():
    # Not timed for another reason (an input not a tensor, out of memory):
    # the graph is then timed as a whole.
    e = entry([0], {0: {"path": "kiln", "why": "not timed: out of memory"}})
    assert kd.sites_saving_us(e) is None
    assert kd.sites_saving_us(entry([3], {})) is None


def test_sites_left_to_inductor_do_not_count():
    e = entry([0], {0: {"path": "kiln", "kiln_us": 10.0, "inductor_us": 410.0},
                    1: {"path": "inductor", "kiln_us": 900.0, "inductor_us": 100.0}})
    assert kd.sites_saving_us(e) == 400.0


def test_the_sites_decide_the_graph_only_above_the_margin():
    saving = entry([0, 1], {0: {"path": "kiln", "kiln_us": 100.0, "inductor_us": 300.0},
                            1: {"path": "kiln", "kiln_us": 100.0, "inductor_us": 300.0}})
    decided = kd.graph_choice_from_sites(saving)
    assert decided["path"] == "kiln" and "400 us a call" in decided["why"]
    small = entry([0], {0: {"path": "kiln", "kiln_us": 100.0, "inductor_us": 150.0}})
    assert kd.graph_choice_from_sites(small) is None
    unknown = entry([0], {0: {"path": "kiln", "why": "not timed: out of memory"}})
    assert kd.graph_choice_from_sites(unknown) is None
    assert kd.graph_choice_from_sites(entry([], {})) is None
    big = entry([0], {0: {"path": "kiln", "untimed": "size", "why": "not timed"}})
    assert "more than Inductor could materialise" in kd.graph_choice_from_sites(big)["why"]


def test_an_untimed_site_with_a_dense_term_keeps_the_graph_timing():
    """A site too large to time that reads a dense per-head bias saves an
    unknown amount: the whole graph is timed."""
    e = {"rewritten": [0], "choices": {0: {"path": "kiln", "untimed": "size",
                                           "dense": "bias"}}}
    assert kd.sites_saving_us(e) is None
    assert kd.graph_choice_from_sites(e) is None


def test_a_dense_site_timed_under_inductors_bound_counts_the_difference():
    """Kiln's path alone timed under the least time Inductor's code can take
    (its scores' traffic at peak bandwidth): the site saves at least the
    difference, which decides the graph above the margin."""
    big = {"rewritten": [0], "choices": {0: {
        "path": "kiln", "untimed": "size", "dense": "bias",
        "kiln_us": 1200.0, "inductor_bound_us": 2560.0}}}
    assert kd.sites_saving_us(big) == 1360.0
    assert kd.graph_choice_from_sites(big)["path"] == "kiln"
    near = {"rewritten": [0], "choices": {0: {
        "path": "kiln", "untimed": "size", "dense": "bias",
        "kiln_us": 110.0, "inductor_bound_us": 160.0}}}
    assert kd.sites_saving_us(near) == 50.0
    assert kd.graph_choice_from_sites(near) is None


def test_a_dense_site_slower_than_the_bound_keeps_the_graph_timing():
    """Read score by score (a strided term), Kiln's path may take longer
    than Inductor's bound: the bound shows nothing, the graph is timed."""
    slow = {"rewritten": [0, 1], "choices": {
        0: {"path": "kiln", "kiln_us": 10.0, "inductor_us": 900.0},
        1: {"path": "kiln", "untimed": "size", "dense": "bias",
            "kiln_us": 3460.0, "inductor_bound_us": 2560.0}}}
    assert kd.sites_saving_us(slow) is None
    assert kd.graph_choice_from_sites(slow) is None


class _Op:
    """An ATen overload as FX shows it: its op name."""

    def __init__(self, name):
        self._opname = name


class _Node:
    def __init__(self, target, op="call_function"):
        self.op, self.target = op, target


def test_one_sdpa_call_and_views_is_timed_as_written():
    import operator

    from kiln.choice import fused_already

    body = [_Node(_Op("expand")), _Node(_Op("_scaled_dot_product_efficient_attention")),
            _Node(operator.getitem), _Node(_Op("transpose"))]
    assert fused_already(body)


def test_code_inductor_would_fuse_is_compiled_before_timing():
    from kiln.choice import fused_already

    sdpa = _Node(_Op("_scaled_dot_product_flash_attention"))
    # A softmax written out, or anything computed beside the SDPA call.
    assert not fused_already([_Node(_Op("bmm")), _Node(_Op("_softmax")), _Node(_Op("bmm"))])
    assert not fused_already([_Node(_Op("logical_not")), sdpa])
    assert not fused_already([_Node(_Op("view"))])
    assert not fused_already([sdpa, _Node(_Op("_scaled_dot_product_flash_attention"))])


class _Call:
    """A call node of Dynamo's graph: its target function, arguments."""

    def __init__(self, name, args=(), kwargs=None):
        def target():
            pass

        target.__name__ = name
        self.op, self.target = "call_function", target
        self.args, self.kwargs, self.meta = tuple(args), dict(kwargs or {}), {}


class _Graph:
    def __init__(self, nodes):
        self.nodes = nodes


class _Module:
    def __init__(self, nodes):
        self.graph = _Graph(nodes)


def test_sdpa_calls_without_a_mask_on_cudnn_leave_the_graph_unexported(monkeypatch):
    """A graph whose only attention ops are SDPA calls without a mask that
    PyTorch runs with cuDNN is left to Inductor before the export; a
    masked call, a call on another kernel, or a softmax anywhere keeps
    the export (those may be taken)."""
    import kiln.choice as kc

    backend = {"value": "cudnn"}
    monkeypatch.setattr(kc, "sdpa_backend", lambda node: backend["value"])
    q, k, v, m = (_Call("linear") for _ in range(4))
    plain = _Call("scaled_dot_product_attention", (q, k, v), {"is_causal": True})
    masked = _Call("scaled_dot_product_attention", (q, k, v), {"attn_mask": m})
    why = kd.sdpa_calls_kept(_Module([q, k, v, plain, _Call("scaled_dot_product_attention",
                                                            (q, k, v))]))
    assert why is not None and "(2)" in why and "cuDNN" in why
    assert kd.sdpa_calls_kept(_Module([q, k, v, m, plain, masked])) is None
    assert kd.sdpa_calls_kept(_Module([q, k, v, plain, _Call("softmax", (q,))])) is None
    assert kd.sdpa_calls_kept(_Module([q, k, v])) is None
    backend["value"] = "flash"
    assert kd.sdpa_calls_kept(_Module([q, k, v, plain])) is None
    backend["value"] = None  # not known (symbolic sizes): exported as before
    assert kd.sdpa_calls_kept(_Module([q, k, v, plain])) is None


def test_sdpa_arguments_by_position_or_keyword():
    import kiln.choice as kc

    q, k, v, m = (_Call("view") for _ in range(4))
    args = kc.sdpa_arguments(_Call("scaled_dot_product_attention", (q, k, v, m, 0.0, True),
                                   {"scale": 0.125}))
    assert args["attn_mask"] is m and args["is_causal"] is True and args["scale"] == 0.125
    assert kc.sdpa_arguments(_Call("_scaled_dot_product_flash_attention", (q, k, v))) is None
