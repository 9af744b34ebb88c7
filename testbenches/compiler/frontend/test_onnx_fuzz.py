"""The ONNX front end fuzzed: small valid models the repository builds, mutated
(attributes dropped or changed, input shapes and dtypes, opsets, scales and zero
points, initialisers dropped or reshaped, edges renamed, nodes duplicated or
dropped), then imported and compiled for the tiny chip (``compile --onnx``) and
planned (``sim --onnx``'s load, clean-up, assignment and chip-segment checks). Every
outcome is a success or the documented exception (CompileError, ConfigError) whose
one-line message names the model, a node, an input or an output; never another
exception, an InternalError or a hang (each example has a deadline). The plans of
the cheapest seeds are run (golden model, host) and must agree with onnxruntime:
a model taken is computed as written. Each failure
found is a row of testbenches/app/test_bad_inputs_onnx.py.

``make test`` draws :data:`TEST_EXAMPLES` examples (the fast tier a quarter of them),
``make regress`` :data:`REGRESS_EXAMPLES`, the same ones on every run (derandomized;
a new failure shows as a failing example, printed by hypothesis)."""

from __future__ import annotations

import signal
import time
from functools import cache

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from systolica.arch.config import ConfigError, preset
from systolica.compiler import compile_network
from systolica.compiler.assignment.partition import plan_model
from systolica.compiler.errors import CompileError, InternalError, OnnxNodeError
from systolica.compiler.frontend import onnx_import

from deadlines import Hang, deadline
from onnx_seeds import SEEDS
from tiers import examples

TINY = preset("tiny")

#: Examples drawn by ``make test`` and ``make regress``.
TEST_EXAMPLES = 80
REGRESS_EXAMPLES = 10000

#: Seconds one example may take before it counts as a hang.
DEADLINE_S = 60


@cache
def _seed_bytes(name: str) -> bytes:
    return SEEDS[name]().SerializeToString()


def seed_model(name: str) -> onnx.ModelProto:
    return onnx.load_from_string(_seed_bytes(name))


# -- mutations: each takes the model and hypothesis's `draw`, edits the model in place ---

#: Values a mutated number may take: ordinary, edge and absurd ones.
NUMBERS = [0, 1, 2, 3, -1, -2, 7, 255, -129, 1 << 20, 1 << 40]
FLOATS = [0.0, -0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), float("-inf"), 0.5]
ELEM_TYPES = [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32,
              TensorProto.INT64, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BOOL,
              TensorProto.STRING, TensorProto.BFLOAT16, 0]


def _pick(draw, items):
    return items[draw(st.integers(0, len(items) - 1))] if len(items) else None


def drop_attribute(model, draw):
    nodes = [n for n in model.graph.node if n.attribute]
    n = _pick(draw, nodes)
    if n is not None:
        del n.attribute[draw(st.integers(0, len(n.attribute) - 1))]


def change_attribute(model, draw):
    nodes = [n for n in model.graph.node if n.attribute]
    n = _pick(draw, nodes)
    if n is None:
        return
    a = n.attribute[draw(st.integers(0, len(n.attribute) - 1))]
    if a.type == onnx.AttributeProto.INTS:
        values = draw(st.lists(st.sampled_from(NUMBERS), max_size=5))
        del a.ints[:]
        a.ints.extend(values)
    elif a.type == onnx.AttributeProto.INT:
        a.i = draw(st.sampled_from(NUMBERS))
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = draw(st.sampled_from(FLOATS))
    else:
        a.CopyFrom(helper.make_attribute(a.name, draw(st.sampled_from(NUMBERS))))


def add_attribute(model, draw):
    n = _pick(draw, list(model.graph.node))
    name = draw(st.sampled_from(["kernel_shape", "pads", "strides", "dilations", "axis",
                                 "group", "auto_pad", "ceil_mode", "transB", "alpha"]))
    if name == "auto_pad":
        value = draw(st.sampled_from(["SAME_UPPER", "VALID", "NOTSET", "bogus"]))
    elif name in ("axis", "group", "ceil_mode", "transB"):
        value = draw(st.sampled_from(NUMBERS))
    elif name == "alpha":
        value = draw(st.sampled_from(FLOATS))
    else:
        value = draw(st.lists(st.sampled_from(NUMBERS), max_size=5))
    kind = onnx.AttributeProto.INTS if isinstance(value, list) else None
    keep = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(keep + [helper.make_attribute(name, value, attr_type=kind)])


def change_dimension(model, draw):
    vi = _pick(draw, [vi for vi in model.graph.input if vi.type.tensor_type.shape.dim])
    if vi is None:
        return
    dims = vi.type.tensor_type.shape.dim
    d = dims[draw(st.integers(0, len(dims) - 1))]
    choice = draw(st.sampled_from(NUMBERS + ["N", None]))
    d.Clear()
    if isinstance(choice, int):
        d.dim_value = choice
    elif choice:
        d.dim_param = choice


def change_rank(model, draw):
    vi = _pick(draw, list(model.graph.input))
    if vi is not None:
        dims = vi.type.tensor_type.shape.dim
        if draw(st.booleans()) and dims:
            del dims[len(dims) - 1]
        else:
            dims.add().dim_value = draw(st.sampled_from([1, 2]))


def change_dtype(model, draw):
    vi = _pick(draw, list(model.graph.input) + list(model.graph.output))
    if vi is not None:
        vi.type.tensor_type.elem_type = draw(st.sampled_from(ELEM_TYPES))


def change_opset(model, draw):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") or draw(st.booleans()):
            o.version = draw(st.sampled_from([1, 7, 11, 12, 13, 17, 21, 22, 99]))
            return


def _small_inits(model):
    return [t for t in model.graph.initializer if int(np.prod(t.dims)) <= 64]


def change_scale_or_zero_point(model, draw):
    """A scalar (or per-channel) initialiser given an edge value, or another dtype."""
    t = _pick(draw, _small_inits(model))
    if t is None:
        return
    a = numpy_helper.to_array(t)
    if a.dtype.kind == "f":
        v = np.full(a.shape, draw(st.sampled_from(FLOATS)), a.dtype)
    elif draw(st.booleans()):
        v = np.full(a.shape, draw(st.sampled_from([-128, 127, 0, 1, 100])), np.int64) \
            .astype(a.dtype) if a.dtype.kind in "iu" and a.dtype.itemsize == 1 \
            else a.astype(np.int64)
    else:
        v = a.astype(draw(st.sampled_from([np.uint8, np.int32, np.float32, np.int16])))
    t.CopyFrom(numpy_helper.from_array(v, t.name))


def reshape_initialiser(model, draw):
    t = _pick(draw, list(model.graph.initializer))
    if t is None:
        return
    a = numpy_helper.to_array(t)
    how = draw(st.sampled_from(["flat", "extra-axis", "truncate", "empty", "scalar"]))
    a = {"flat": lambda: a.reshape(-1), "extra-axis": lambda: a[..., None],
         "truncate": lambda: a.reshape(-1)[: max(1, a.size // 2)],
         "empty": lambda: a.reshape(-1)[:0],
         "scalar": lambda: a.reshape(-1)[0] if a.size else a}[how]()
    t.CopyFrom(numpy_helper.from_array(np.asarray(a), t.name))


def drop_initialiser(model, draw):
    inits = model.graph.initializer
    if len(inits):
        del inits[draw(st.integers(0, len(inits) - 1))]


def rename_edge(model, draw):
    """A node's input or output renamed: to a new name, or to another value's."""
    n = _pick(draw, list(model.graph.node))
    slots = [("input", k) for k in range(len(n.input))] + \
        [("output", k) for k in range(len(n.output))]
    side, k = _pick(draw, slots)
    values = sorted({v for m in model.graph.node for v in list(m.input) + list(m.output)}
                    | {vi.name for vi in model.graph.input})
    new = draw(st.sampled_from(["fresh_value", ""] + values))
    getattr(n, side)[k] = new


def rename_node(model, draw):
    """A node renamed: to another node's name (ONNX asks for none unique), empty, or odd."""
    n = _pick(draw, list(model.graph.node))
    names = [m.name for m in model.graph.node]
    n.name = draw(st.sampled_from(names + ["", "x_nhwc", "a.b/c:0", "input", "1st"]))


def duplicate_node(model, draw):
    n = _pick(draw, list(model.graph.node))
    copy = onnx.NodeProto()
    copy.CopyFrom(n)
    if draw(st.booleans()):
        copy.output[0] = copy.output[0] + "_copy"
    model.graph.node.insert(draw(st.integers(0, len(model.graph.node))), copy)


def drop_node(model, draw):
    nodes = model.graph.node
    del nodes[draw(st.integers(0, len(nodes) - 1))]


def swap_inputs(model, draw):
    n = _pick(draw, [n for n in model.graph.node if len(n.input) > 1])
    if n is not None:
        i, j = draw(st.integers(0, len(n.input) - 1)), draw(st.integers(0, len(n.input) - 1))
        n.input[i], n.input[j] = n.input[j], n.input[i]


def change_op_type(model, draw):
    n = _pick(draw, list(model.graph.node))
    n.op_type = draw(st.sampled_from(["Conv", "QLinearConv", "MaxPool", "AveragePool",
                                      "Relu", "Flatten", "Concat", "QLinearMatMul", "Add",
                                      "Softmax", "Frobnicate", "Identity"]))


def change_output(model, draw):
    """A graph output dropped, added (a value or a name nothing makes) or duplicated."""
    outs = model.graph.output
    how = draw(st.sampled_from(["drop", "ghost", "value", "twice"]))
    if how == "drop" and len(outs):
        del outs[draw(st.integers(0, len(outs) - 1))]
    elif how == "twice" and len(outs):
        outs.add().CopyFrom(outs[0])
    else:
        values = [o for n in model.graph.node for o in n.output]
        name = "ghost" if how == "ghost" or not values else draw(st.sampled_from(values))
        outs.append(helper.make_tensor_value_info(name, TensorProto.INT8, None))


MUTATIONS = [drop_attribute, change_attribute, add_attribute, change_dimension, change_rank,
             change_dtype, change_opset, change_scale_or_zero_point, reshape_initialiser,
             drop_initialiser, rename_edge, rename_node, duplicate_node, drop_node,
             swap_inputs, change_op_type, change_output]


@st.composite
def mutated(draw):
    """``(seed name, mutation names, model)``: a seed model with one to three
    mutations."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    model = seed_model(name)
    done = []
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        mutation(model, draw)
        done.append(mutation.__name__)
    return name, done, model


# -- the check -----------------------------------------------------------------------------

def assert_documented(error: Exception, model) -> None:
    """`error` is a documented refusal with a message that names what is at fault."""
    assert isinstance(error, (CompileError, ConfigError)), \
        f"{type(error).__name__}: {error}"
    assert not isinstance(error, InternalError), str(error)
    message = str(error)
    assert message.strip() and "Traceback" not in message and "\n" not in message.strip()
    names = ({n.name for n in model.graph.node} | {vi.name for vi in model.graph.input}
             | {vo.name for vo in model.graph.output} | {model.graph.name, "ONNX"}) - {""}
    assert any(name in message for name in names), f"names nothing of the model: {message}"
    if isinstance(error, OnnxNodeError) and error.node:
        assert repr(error.node) in message or error.node in message, message


#: The seeds whose planned run (golden model, host, onnxruntime) is cheap enough.
RUN = ("conv_chain", "add_pool", "float_small")


def check_run(result, end_to_end: bool) -> None:
    """A planned run computes the model as written: each chip program equals its
    numpy reference and each chip operation, fed onnxruntime's inputs, is within its
    bound of onnxruntime; and with `end_to_end` the outputs are within the tolerance
    too (not where the scales were changed: a scale of 1e30 amplifies a step the
    chip may differ by into a saturated output, which the run reports as a FAIL)."""
    problems = [p for p in result.problems()
                if end_to_end or not p.startswith("output ")]
    assert not problems, f"a wrong result: {problems}"


def front_end(model, run: bool = False, end_to_end: bool = True) -> None:
    """What ``compile --onnx`` and ``sim --onnx --golden-only`` do with `model`:
    import and compile for the tiny chip; plan (load, clean-up, assignment, chip
    segments imported), and with `run` run the plan on the golden model and the host
    and compare it with onnxruntime."""
    from systolica.app.onnx_run import run_plan
    with deadline(DEADLINE_S):
        try:
            compile_network(TINY, onnx_import.load(model))
        except (CompileError, ConfigError) as e:
            assert_documented(e, model)
        try:
            plan = plan_model(TINY, model)
            if run:         # a model taken is computed as written: as onnxruntime does
                check_run(run_plan(plan), end_to_end=end_to_end)
        except (CompileError, ConfigError) as e:
            assert_documented(e, model)


def _fuzz(case) -> None:
    name, done, model = case
    try:
        front_end(model, run=name in RUN,
                  end_to_end="change_scale_or_zero_point" not in done)
    except Hang:
        pytest.fail(f"seed {name}, mutations {done}: a hang")
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(f"seed {name}, mutations {done}: {type(e).__name__}: "
                             f"{e}") from e


SETTINGS = dict(database=None, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=examples(TEST_EXAMPLES), **SETTINGS)
@given(mutated())
def test_mutated_models_are_taken_or_refused_clearly(case):
    _fuzz(case)


@pytest.mark.regress
@settings(max_examples=REGRESS_EXAMPLES, **SETTINGS)
@given(mutated())
def test_many_mutated_models_are_taken_or_refused_clearly(case):
    _fuzz(case)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_the_seed_models_compile_and_plan(name):
    """Unmutated, every seed imports and compiles (but the float one, which only
    ``sim --onnx`` quantises) and plans, and runs where the fuzzer runs it: a
    mutation's refusal is the mutation's."""
    from systolica.app.onnx_run import run_plan
    model = seed_model(name)
    if name != "float_small":
        compile_network(TINY, onnx_import.load(model))
    plan = plan_model(TINY, model)
    if name in RUN:
        assert run_plan(plan).ok


def test_a_hang_is_caught_by_the_deadline():
    """An example running past its deadline raises Hang (the fuzzer then fails it,
    naming the seed and mutations) and an alarm set before is set again."""
    signal.setitimer(signal.ITIMER_REAL, 600)
    try:
        with pytest.raises(Hang), deadline(0.05):
            time.sleep(1)
        assert 590 < signal.getitimer(signal.ITIMER_REAL)[0] <= 600
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
