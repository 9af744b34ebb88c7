"""The bad-input catalogue's ONNX part (testbenches/app/test_bad_inputs.py has the rest):
ONNX files and ``sim --onnx`` / ``compile --onnx`` options a user may give by mistake,
and what they must get back. Command-line rows expect exit status 2 and one
``systolica: error: ...`` line naming the file, node and operator (or the option) at
fault and what to do; Python API rows one exception of the documented type. Never a
traceback, never a run reported PASS on a model no processor computes as written.

The rows marked "found by the fuzzer" are the failures
testbenches/compiler/frontend/test_onnx_fuzz.py found (a traceback each, before its
fix)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.arch.config import preset
from systolica.compiler import CompileError
from systolica.compiler.assignment.partition import PlanOptions, plan_model
from systolica.compiler.errors import InvalidOnnxNode, OnnxNodeError
from systolica.compiler.frontend import onnx_import, onnx_model
from systolica.compiler.graph.ops import MaxPool2d
from systolica.models import onnx_zoo

from onnx_seeds import float_small
from test_bad_inputs import assert_clear, assert_refused, run_cli
from tiers import sample

TINY = preset("tiny")


# -- the models: a small valid one each, and the edit that makes it bad ------------------
def _ms(model):
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def conv(**attrs):
    """One QLinearConv 'qconv1' of an int8 (1, 3, 6, 6) map 'x' to 8 channels (its
    attributes replaced by `attrs`, an attribute given None dropped)."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    model = m.build([("x", [1, 3, 6, 6])], [y])
    _set_attrs(model.graph.node[0], attrs)
    return model


def _set_attrs(node, attrs):
    for name, value in attrs.items():
        keep = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(keep)
        if value is not None:
            node.attribute.append(helper.make_attribute(
                name, value, attr_type=onnx.AttributeProto.INTS if isinstance(value, list)
                else None))


def conv1d(**attrs):
    """`conv` over an int8 (1, 3, 6) NCW input: weights [8, 3, 3], 1-D attributes
    (kernel_shape dropped), then `attrs`."""
    model = weights(lambda w: w[:, :, 1])
    dims = model.graph.input[0].type.tensor_type.shape.dim
    del dims[2]
    _set_attrs(model.graph.node[0], {"kernel_shape": None, "strides": [1], "pads": [1, 1],
                                     "dilations": [1], **attrs})
    return model


def pool(op="MaxPool", **attrs):
    """A QLinearConv, then `op` 'pool' with `attrs` (None drops one)."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    m.nodes.append(helper.make_node(op, [y], ["p"], name="pool"))
    _set_attrs(m.nodes[-1], {"kernel_shape": [2, 2], "strides": [2, 2], **attrs})
    return m.build([("x", [1, 3, 6, 6])], ["p"])


def qadd(scale):
    """onnxruntime's QLinearAdd 'add' of two int8 maps, its output scale `scale`."""
    m = onnx_zoo.QModel(0)
    s = m.const(np.float32(scale), "sum_scale")
    m.nodes.append(helper.make_node("QLinearAdd", ["a", *m.q(0.04, 0), "b", *m.q(0.03, 0),
                                                   s, m.const(np.int8(0))], ["sum"],
                                    name="add", domain="com.microsoft"))
    return _ms(m.build([("a", [1, 8, 4, 4]), ("b", [1, 8, 4, 4])], ["sum"]))


def global_pool(scale):
    """A QLinearConv, then onnxruntime's QLinearGlobalAveragePool 'gap' whose output
    scale 'gap_scale' is `scale`."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    m.nodes.append(helper.make_node("QLinearGlobalAveragePool",
                                    [y, *m.q(0.1, -4), m.const(np.float32(scale), "gap_scale"),
                                     m.const(np.int8(0))], ["gap"], name="gap",
                                    domain="com.microsoft", channels_last=0))
    return _ms(m.build([("x", [1, 3, 6, 6])], ["gap"]))


def weights(reshape, model=None):
    """`conv`'s weights reshaped by `reshape`."""
    model = model or conv()
    t = next(t for t in model.graph.initializer if t.name == model.graph.node[0].input[3])
    t.CopyFrom(numpy_helper.from_array(reshape(numpy_helper.to_array(t)), t.name))
    return model


def initialiser(model, name, value):
    t = next(t for t in model.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array(np.asarray(value), name))
    return model


def declared(dim):
    """`conv` whose input declares its height `dim`."""
    model = conv()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = dim
    return model


def dangling():
    model = conv()
    model.graph.output.append(helper.make_tensor_value_info("ghost", TensorProto.INT8, None))
    return model


def concat_without_axis():
    m = onnx_zoo.QModel(0)
    a = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    b = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    m.nodes.append(helper.make_node("Concat", [a, b], ["join"], name="join"))
    return m.build([("x", [1, 3, 6, 6])], ["join"])


def qdq(edit):
    """onnx_zoo.qdq_cnn with `edit(graph)` applied."""
    model = onnx_zoo.qdq_cnn()
    edit(model.graph)
    return model


def _node(graph, name):
    return next(n for n in graph.node if n.name == name)


def conv_bias_of(graph, shape):
    """qdq_cnn's conv1 bias (int32, behind its DequantizeLinear) of `shape`."""
    dq = next(n for n in graph.node if n.output[0] == _node(graph, "conv1").input[2])
    t = next(t for t in graph.initializer if t.name == dq.input[0])
    t.CopyFrom(numpy_helper.from_array(np.zeros(shape, np.int32), t.name))


def qlinear_input_count(op_edit):
    """`conv` with its node's inputs cut by `op_edit`."""
    model = conv()
    op_edit(model.graph.node[0])
    return model


def two_convs(first="conv1", second="conv2", size=6):
    """Two QLinearConvs, named `first` and `second`, of a (1, 3, size, size) map."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, 0))
    model = m.build([("x", [1, 3, size, size])], [m.conv(y, (0.1, 0), 8, 8, 3, (0.1, 0))])
    model.graph.node[0].name, model.graph.node[1].name = first, second
    return model


def relu_and_output():
    """A QLinearConv 'qconv1' + Relu 'relu1' whose conv output is a graph output too."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, 0), relu=True)
    return m.build([("x", [1, 3, 6, 6])], [y, "conv1"])


def constant_of_size(op):
    """An Add of a float input 'x' and the output of node 'big' (`op`: ConstantOfShape
    or Range) of constant operands that make 10**12 values."""
    if op == "ConstantOfShape":
        inits = [numpy_helper.from_array(np.array([100000, 100000, 100], np.int64), "s")]
        ins = ["s"]
    else:
        inits = [numpy_helper.from_array(np.float32(v), k)
                 for k, v in (("a", 0), ("b", 1e12), ("d", 1))]
        ins = ["a", "b", "d"]
    nodes = [helper.make_node(op, ins, ["c"], name="big"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bool_input():
    """A Not of a bool input 'flags'."""
    x = helper.make_tensor_value_info("flags", TensorProto.BOOL, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, None)
    graph = helper.make_graph([helper.make_node("Not", ["flags"], ["y"], name="not")], "g",
                              [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- the Python API: plan_model (sim --onnx) and onnx_import.load (compile --onnx) ------
def planned(build, **options):
    return lambda: plan_model(TINY, build(), options=PlanOptions(**options))


def imported(build):
    return lambda: onnx_import.load(build())


API = [
    # (id, call, exception, key words)
    # wrong results reported as PASS: refused before any run, never moved to the host
    ("qlinearadd-scale-0", planned(lambda: qadd(0)), InvalidOnnxNode,
     ["node 'add' (QLinearAdd)", "output scale 'sum_scale' is 0.0", "positive, finite"]),
    ("qlinearadd-scale-negative", planned(lambda: qadd(-0.1)), InvalidOnnxNode,
     ["'add' (QLinearAdd)", "'sum_scale' is -0.1", "correct the model's quantisation"]),
    ("qlinearadd-scale-nan", planned(lambda: qadd(np.nan)), InvalidOnnxNode,
     ["'add' (QLinearAdd)", "'sum_scale' is nan"]),
    ("qlinearadd-scale-inf", planned(lambda: qadd(np.inf)), InvalidOnnxNode,
     ["'add' (QLinearAdd)", "'sum_scale' is inf"]),
    ("global-pool-scale-0", planned(lambda: global_pool(0)), InvalidOnnxNode,
     ["'gap' (QLinearGlobalAveragePool)", "output scale 'gap_scale' is 0.0"]),
    ("qdq-weight-scale-nan", planned(lambda: initialiser(
        onnx_zoo.qdq_cnn(), "conv1_wf_s", np.full(8, np.nan, np.float32))),
     InvalidOnnxNode, ["(DequantizeLinear)", "scale 'conv1_wf_s' has nan at index 0"]),
    ("qlinearadd-scale-negative-import", imported(lambda: qadd(-1)), InvalidOnnxNode,
     ["'add' (QLinearAdd)", "output scale 'sum_scale' is -1.0"]),
    # tracebacks: attributes the spec defaults or asks for, ranks, outputs, dimensions
    ("conv-pads-two", imported(lambda: conv(pads=[1, 1])), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "pads [1, 1] has 2 values", "takes 4",
      "begin H, begin W, end H, end W"]),
    ("conv-pads-three", imported(lambda: conv(pads=[1, 1, 1])), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "pads [1, 1, 1] has 3 values"]),
    ("conv-pads-negative", imported(lambda: conv(pads=[1, -1, 1, 1])), InvalidOnnxNode,
     ["'qconv1'", "pads [1, -1, 1, 1]", "at least 0"]),
    ("conv-strides-zero", imported(lambda: conv(strides=[0, 0])), InvalidOnnxNode,
     ["'qconv1'", "strides [0, 0]", "at least 1"]),
    ("conv-strides-one-value", imported(lambda: conv(strides=[2])), InvalidOnnxNode,
     ["'qconv1'", "strides [2] has 1 values", "takes 2"]),
    ("conv-kernel-shape-unlike-weights", imported(lambda: conv(kernel_shape=[5, 5])),
     InvalidOnnxNode, ["'qconv1'", "kernel_shape [5, 5]", "weights are [3, 3] wide"]),
    ("maxpool-no-kernel-shape", imported(lambda: pool(kernel_shape=None)), InvalidOnnxNode,
     ["'pool' (MaxPool)", "no kernel_shape", "specification of MaxPool"]),
    ("averagepool-no-kernel-shape", imported(lambda: pool("AveragePool", kernel_shape=None)),
     InvalidOnnxNode, ["'pool' (AveragePool)", "no kernel_shape"]),
    ("maxpool-pads-two", imported(lambda: pool(pads=[0, 0])), InvalidOnnxNode,
     ["'pool' (MaxPool)", "pads [0, 0] has 2 values"]),
    ("conv-weights-rank-3", imported(lambda: weights(lambda w: w[:, :, 0])), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "shape [8, 3, 3] (rank 3)", "[Cout, Cin/group, kh, kw]"]),
    ("conv-weights-rank-5-planned", planned(lambda: weights(lambda w: w[..., None])),
     InvalidOnnxNode, ["'qconv1' (QLinearConv)", "rank 5", "input 'x' rank 4"]),
    ("dangling-output", planned(dangling), CompileError,
     ["output 'ghost'", "made by no node, input or initialiser"]),
    ("dangling-output-import", imported(dangling), CompileError,
     ["output 'ghost'", "made by no operator"]),
    ("dimension-negative", planned(lambda: declared(-1)), CompileError,
     ["input 'x'", "dimension 2 as -1", "at least 1"]),
    ("dimension-zero-import", imported(lambda: declared(0)), CompileError,
     ["input 'x'", "dimension 2 as 0"]),
    ("dimension-enormous", planned(lambda: declared(10 ** 12)), CompileError,
     ["input 'x'", "[1, 3, 1000000000000, 6]", f"{onnx_model.MAX_INPUT_VALUES}",
      "declare a smaller input"]),
    ("dimension-enormous-import", imported(lambda: declared(10 ** 9)), CompileError,
     ["input 'x'", "18000000000 values"]),
    ("constant-of-shape-enormous", planned(lambda: constant_of_size("ConstantOfShape")),
     CompileError, ["node 'big' (ConstantOfShape)", "1000000000000 values",
                    "correct its operands"]),
    ("range-enormous", planned(lambda: constant_of_size("Range")), CompileError,
     ["node 'big' (Range)", "999999995904 values", "more than the 67108864"]),
    ("concat-without-axis", planned(concat_without_axis), CompileError,
     ["node 'join' (Concat)", "axis is missing", "specification of Concat"]),
    ("two-nodes-one-name", planned(lambda: two_convs("c", "c")), CompileError,
     ["nodes 0 (QLinearConv) and 1 (QLinearConv)", "both named 'c'", "rename one"]),
    # found by the fuzzer
    ("fuzz-qdq-empty-pads", imported(lambda: qdq(lambda g: _set_attrs(
        _node(g, "conv1"), {"pads": []}))), InvalidOnnxNode,
     ["'conv1' (Conv)", "pads [] has 0 values"]),
    ("fuzz-weights-rank-1", imported(lambda: weights(lambda w: w.reshape(-1))),
     InvalidOnnxNode, ["'qconv1'", "rank 1"]),
    ("fuzz-qdq-bias-empty", imported(lambda: qdq(lambda g: conv_bias_of(g, (0,)))),
     InvalidOnnxNode, ["'conv1' (Conv)", "has shape [0]", "one per output channel"]),
    ("fuzz-qdq-bias-scale-size", imported(lambda: initialiser(
        onnx_zoo.qdq_cnn(), "conv1_wf_s", np.full(4, 0.01, np.float32))),
     InvalidOnnxNode, ["'conv1' (Conv)", "[8, 1, 4] values"]),
    ("fuzz-weight-scale-size", imported(lambda: initialiser(
        conv(), conv().graph.node[0].input[4], np.full(5, 0.01, np.float32))),
     InvalidOnnxNode, ["'qconv1'", "weight scale", "5 values for 8 output channels"]),
    ("fuzz-conv-bias-size", imported(lambda: initialiser(
        conv(), conv().graph.node[0].input[8], np.zeros(3, np.int32))),
     InvalidOnnxNode, ["'qconv1'", "bias", "shape [3] for 8 output channels"]),
    ("fuzz-qlinearconv-four-inputs", imported(lambda: qlinear_input_count(
        lambda n: n.input.__delitem__(slice(4, None)))),
     InvalidOnnxNode, ["'qconv1' (QLinearConv)", "4 inputs", "takes 8 to 9 inputs"]),
    ("fuzz-qdq-conv-one-input", imported(lambda: qdq(lambda g: _node(g, "conv1").input
                                                     .__delitem__(slice(1, None)))),
     InvalidOnnxNode, ["'conv1' (Conv)", "1 inputs", "takes 2 to 3"]),
    ("fuzz-batch-norm-conv-bias-size", planned(lambda: initialiser(
        float_small(), "b", np.ones(4, np.float32))), InvalidOnnxNode,
     ["'conv' (Conv)", "'b' has shape [4]", "'conv' has 8 output channels"]),
    ("fuzz-batch-norm-negative-variance", planned(lambda: initialiser(
        float_small(), "var", np.full(8, -1, np.float32))), InvalidOnnxNode,
     ["'bn' (BatchNormalization)", "variance plus epsilon ('var') is -0.99999",
      "finite and positive"]),
    ("fuzz-reshape-shape-2d", planned(lambda: initialiser(
        float_small(), "shape", np.array([[1, 72]], np.int64))), InvalidOnnxNode,
     ["'reshape' (Reshape)", "shape 'shape' is int64 of shape [1, 2]", "1-D int64"]),
    ("fuzz-zero-point-int32", imported(lambda: initialiser(
        conv(), conv().graph.node[0].input[7], np.int32(0))), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "output zero point", "is int32", "int8 tensor is int8"]),
    ("fuzz-relu-of-a-graph-output", imported(relu_and_output), OnnxNodeError,
     ["'relu1' (Relu)", "folds into the layer before it", "is no graph output"]),
    # options of the Python API
    ("calibration-for-a-quantised-model", planned(conv, calibration=[{}]), CompileError,
     ["model 'm' is quantised already", "calibration inputs", "drop them"]),
    ("calibration-wrong-input", planned(onnx_zoo.float_cnn, calibration=[
        {"y": np.zeros((1, 3, 16, 16), np.float32)}]), CompileError,
     ["calibration sample 0", "has no ['x']", "names ['y']"]),
    ("calibration-wrong-shape", planned(onnx_zoo.float_cnn, calibration=[
        {"x": np.zeros((1, 3, 5, 5), np.float32)}]), CompileError,
     ["calibration sample 0, input 'x'", "shape [1, 3, 5, 5]", "[1, 3, 16, 16]"]),
    ("calibration-nan", planned(onnx_zoo.float_cnn, calibration=[
        {"x": np.full((1, 3, 16, 16), np.nan, np.float32)}]), CompileError,
     ["calibration sample 0, input 'x'", "NaN or infinite", "finite data"]),
    # grouped and 1-D convolutions
    ("conv-group-not-dividing", imported(lambda: conv(group=3)), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "group 3", "over 3 input channels", "divide Cout = 8"]),
    ("conv1d-weights-rank-4", imported(lambda: weights(lambda w: w[:, :, None], conv1d())),
     InvalidOnnxNode, ["'qconv1' (QLinearConv)", "(rank 4) for a map of rank 3",
                       "[Cout, Cin/group, kw]"]),
    ("conv1d-pads-four", imported(lambda: conv1d(pads=[1, 1, 1, 1])), InvalidOnnxNode,
     ["'qconv1' (QLinearConv)", "pads [1, 1, 1, 1] has 4 values", "a 1-D QLinearConv takes 2",
      "(begin W, end W)"]),
]


@pytest.mark.parametrize("call, exception, words",
                         sample([pytest.param(*row[1:], id=row[0]) for row in API], 2))
def test_python_api(call, exception, words):
    with pytest.raises(exception) as info:
        call()
    assert_clear(str(info.value), words)
    if isinstance(info.value, OnnxNodeError):
        assert info.value.node in str(info.value)


# -- the command line: sim --onnx and compile --onnx --------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A directory of the command-line rows' models and data files."""
    d = tmp_path_factory.mktemp("onnx")
    for name, build in FILES.items():
        onnx.save(build(), str(d / f"{name}.onnx"))
    np.save(d / "w.npy", np.zeros((2, 1, 3, 16, 16), np.float32))
    np.savez(d / "cal.npz", x=np.zeros((2, 1, 3, 16, 16), np.float32))
    np.savez(d / "scalar.npz", x=np.float32(1))
    (d / "junk.npz").write_bytes(b"not an archive")
    return d


FILES = {"qadd0": lambda: qadd(0), "qaddneg": lambda: qadd(-0.25), "gap0": lambda: global_pool(0),
         "pads2": lambda: conv(pads=[1, 1]), "nokernel": lambda: pool(kernel_shape=None),
         "rank3": lambda: weights(lambda w: w[:, :, 0]), "dangling": dangling,
         "dimneg": lambda: declared(-3), "dimhuge": lambda: declared(10 ** 9),
         "conv": conv, "float": onnx_zoo.float_cnn, "twice": lambda: two_convs("c", "c"),
         "large": lambda: two_convs(size=300)}

SIM = ["sim", "--config", "tiny", "--golden-only", "--onnx"]
COMPILE = ["compile", "--config", "tiny", "--onnx"]

CLI = [
    # (id, argv with {d} = the models' directory, key words)
    ("sim-qlinearadd-scale-0", [*SIM, "{d}/qadd0.onnx"],
     ["qadd0.onnx", "node 'add' (QLinearAdd)", "'sum_scale' is 0.0", "positive, finite"]),
    ("sim-qlinearadd-scale-negative", [*SIM, "{d}/qaddneg.onnx"],
     ["qaddneg.onnx", "'add' (QLinearAdd)", "'sum_scale' is -0.25"]),
    ("sim-global-pool-scale-0", [*SIM, "{d}/gap0.onnx"],
     ["gap0.onnx", "'gap' (QLinearGlobalAveragePool)", "is 0.0"]),
    ("compile-qlinearadd-scale-0", [*COMPILE, "{d}/qadd0.onnx"],
     ["qadd0.onnx", "'add' (QLinearAdd)", "output scale 'sum_scale' is 0.0"]),
    ("sim-pads-two", [*SIM, "{d}/pads2.onnx"],
     ["pads2.onnx", "node 'qconv1' (QLinearConv)", "pads has incorrect size",
      "specification of QLinearConv"]),
    ("compile-pads-two", [*COMPILE, "{d}/pads2.onnx"],
     ["pads2.onnx", "'qconv1' (QLinearConv)", "pads [1, 1] has 2 values"]),
    ("sim-maxpool-no-kernel-shape", [*SIM, "{d}/nokernel.onnx"],
     ["nokernel.onnx", "node 'pool' (MaxPool)", "kernel_shape must be specified"]),
    ("compile-maxpool-no-kernel-shape", [*COMPILE, "{d}/nokernel.onnx"],
     ["nokernel.onnx", "'pool' (MaxPool)", "no kernel_shape"]),
    ("sim-weights-rank-3", [*SIM, "{d}/rank3.onnx"],
     ["rank3.onnx", "'qconv1' (QLinearConv)", "rank 3", "input 'x' rank 4"]),
    ("compile-weights-rank-3", [*COMPILE, "{d}/rank3.onnx"],
     ["rank3.onnx", "'qconv1' (QLinearConv)", "(rank 3)"]),
    ("sim-dangling-output", [*SIM, "{d}/dangling.onnx"],
     ["dangling.onnx", "output 'ghost'", "made by no node"]),
    ("compile-dangling-output", [*COMPILE, "{d}/dangling.onnx"],
     ["dangling.onnx", "output 'ghost'", "made by no operator"]),
    ("sim-dimension-negative", [*SIM, "{d}/dimneg.onnx"],
     ["dimneg.onnx", "input 'x'", "dimension 2 as -3"]),
    ("compile-dimension-negative", [*COMPILE, "{d}/dimneg.onnx"],
     ["dimneg.onnx", "input 'x'", "dimension 2 as -3"]),
    ("sim-dimension-enormous", [*SIM, "{d}/dimhuge.onnx"],
     ["dimhuge.onnx", "input 'x'", "18000000000 values", "declare a smaller input"]),
    ("compile-dimension-enormous", [*COMPILE, "{d}/dimhuge.onnx"],
     ["dimhuge.onnx", "input 'x'", "18000000000 values"]),
    ("sim-two-nodes-one-name", [*SIM, "{d}/twice.onnx", "--assign", "c=host"],
     ["twice.onnx", "both named 'c'", "unique node names"]),
    ("compile-larger-than-the-chip", [*COMPILE, "{d}/large.onnx"],
     ["large.onnx", "input 'x'", "DRAM too small"]),
    # the options of sim --onnx
    ("assign-one-node-twice", [*SIM, "{d}/conv.onnx", "--assign", "qconv1=host", "--assign",
                               "qconv1=chip"],
     ["--assign 'qconv1=chip'", "assigned to host too", "one processor"]),
    ("assign-no-node", [*SIM, "{d}/conv.onnx", "--assign", "=chip"],
     ["--assign '=chip'", "NODE=PROCESSOR"]),
    ("constant-an-archive", [*SIM, "{d}/conv.onnx", "--constant", "x={d}/cal.npz"],
     ["--constant", "cal.npz", "archive of arrays", "numpy.save"]),
    ("constant-of-another-dtype", [*SIM, "{d}/conv.onnx", "--constant", "x={d}/w.npy"],
     ["conv.onnx", "input 'x'", "takes int8", "float32"]),
    ("calibration-for-a-quantised-model", [*SIM, "{d}/conv.onnx", "--calibration",
                                           "{d}/cal.npz"],
     ["model 'm' is quantised already", "--calibration", "drop them"]),
    ("calibration-a-single-array", [*SIM, "{d}/float.onnx", "--calibration", "{d}/w.npy"],
     ["--calibration", "w.npy", "holds one array", "numpy.savez"]),
    ("calibration-not-an-archive", [*SIM, "{d}/float.onnx", "--calibration",
                                    "{d}/junk.npz"],
     ["--calibration", "junk.npz", "not a readable .npz", "numpy.savez"]),
    ("calibration-a-number", [*SIM, "{d}/float.onnx", "--calibration", "{d}/scalar.npz"],
     ["--calibration", "'x' is a single number", "first axis"]),
    ("tolerance-nan", [*SIM, "{d}/conv.onnx", "--tolerance", "nan"],
     ["--tolerance", "expected a finite number", "'nan'"]),
    ("tolerance-negative", [*SIM, "{d}/conv.onnx", "--tolerance", "-1"],
     ["--tolerance", "at least 0", "'-1'"]),
    ("benefit-threshold-nan", [*SIM, "{d}/conv.onnx", "--benefit-threshold", "nan"],
     ["--benefit-threshold", "expected a finite number", "'nan'"]),
    ("cost-threshold-negative", [*SIM, "{d}/conv.onnx", "--cost-threshold", "-2"],
     ["--cost-threshold", "at least 0", "'-2'"]),
    # the management core as a processor: where its kernels cannot run the operation
    ("assign-core-without-its-kernel", [*SIM, "{d}/conv.onnx", "--assign", "qconv1=core"],
     ["--assign qconv1=core", "core cannot run it", "no QLinearConv kernel"]),
    ("assign-core-on-a-chip-without-one", ["sim", "--config", "tangnano9k", "--golden-only",
                                           "--onnx", "{d}/conv.onnx", "--assign",
                                           "qconv1=core"],
     ["--assign qconv1=core", "chip tangnano9k has no management core"]),
]


@pytest.mark.parametrize("argv, words",
                         sample([pytest.param(*row[1:], id=row[0]) for row in CLI], 2))
def test_command_line(argv, words, models, capsys, monkeypatch):
    from systolica.sim import rtlsim

    def refuse(*_, **__):
        raise AssertionError("a bad input reached the Verilator build")
    monkeypatch.setattr(rtlsim, "build", refuse)
    argv = [a.format(d=models) for a in argv]
    assert_refused(*run_cli(argv, capsys), words)


def test_a_model_larger_than_the_chip_fails_naming_its_operations(models, capsys):
    """Planned (the plan is printed), then its chip segment does not compile: exit 2,
    one line naming the operations, the fault and what to do."""
    status, out, err = run_cli([*SIM, str(models / "large.onnx")], capsys)
    assert status == 2 and "conv1" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("systolica: error: ")
    assert_clear(lines[0], ["the operations conv1, conv2 do not compile for chip tiny",
                            "input 'x'", "DRAM too small", "--assign NODE=host", "--config"])


#: The command-line rows about an option's value rather than a model file.
OPTION_ROWS = ("assign-", "constant-", "calibration-", "tolerance-", "benefit-", "cost-")


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's): a
    model file's, whichever door it came through, are the ONNX files'."""
    options = sum(row[0].startswith(OPTION_ROWS) for row in CLI)
    calibration = sum(row[0].startswith("calibration-") for row in API)
    return {"ONNX files": len(API) - calibration + len(CLI) - options,
            "command line": options, "Python API": calibration}


# -- what the spec defaults is taken, and names that clash are kept apart -------------------
def test_attributes_the_spec_defaults_are_taken():
    """A QLinearConv without kernel_shape (from its weights), strides, pads or
    dilations, and a MaxPool without strides (1, as ONNX defines, not its kernel)."""
    graph = onnx_import.load(conv(kernel_shape=None, strides=None, pads=None,
                                  dilations=None))
    conv_op = next(n.op for n in graph.nodes if n.name == "qconv1")
    assert (conv_op.stride, conv_op.pads, conv_op.dilation) == ((1, 1), (0, 0, 0, 0), (1, 1))
    graph = onnx_import.load(pool(strides=None))
    pool_op = next(n.op for n in graph.nodes if isinstance(n.op, MaxPool2d))
    assert pool_op.stride == (1, 1)


@pytest.mark.parametrize("first, second", [("a.b", "a_b"), ("spare", "spare_nhwc"),
                                           ("spare_nhwc", "spare")])
def test_input_names_alike_once_made_safe_are_kept_apart(first, second):
    """Two ONNX inputs whose graph names would be one (``a.b`` and ``a_b``), or one the
    NHWC view of the other (``spare_nhwc``), import; the message blamed the user's
    unique names for a clash of the importer's own."""
    m = onnx_zoo.QModel(0)
    a = m.conv(first, (0.05, 3), 3, 8, 3, (0.1, 0))
    b = m.conv(second, (0.05, 3), 3, 8, 3, (0.1, 0))
    m.nodes.append(helper.make_node("QLinearAdd", [a, *m.q(0.1, 0), b, *m.q(0.1, 0),
                                                   *m.q(0.2, 0)], ["sum"], name="add",
                                    domain="com.microsoft"))
    model = _ms(m.build([(first, [1, 3, 6, 6]), (second, [1, 3, 6, 6])], ["sum"]))
    assert len(onnx_import.load(model).inputs) == 2
    plan_model(TINY, model)


def test_an_output_of_another_shape_or_not_compared_fails_the_run():
    """The agreement with onnxruntime of a value of another size, or of an output
    missing on one side, is never within the tolerance."""
    from systolica.app.onnx_oracle import _agreement
    assert not _agreement("y", np.zeros(4, np.int8), np.zeros(5, np.int8), 8.0).ok
    assert _agreement("y", np.zeros(4, np.int8), np.zeros(4, np.int8), 8.0).ok
    assert not _agreement("y", np.full(2, np.nan, np.float32), np.zeros(2, np.float32),
                          0.05).ok


def test_a_bool_input_gets_random_data():
    """Found by the fuzzer: random data for a bool input asked numpy for the integer
    range of bool (a traceback)."""
    plan = plan_model(TINY, bool_input())
    assert plan.model.inputs["flags"].dtype == np.bool_


@pytest.mark.slow
def test_a_value_of_onnxruntimes_own_operators_is_compared():
    """Found by the fuzzer: a QLinearAdd's output read by another chip operation has no
    type from ONNX's shape inference, and asking onnxruntime for it was a KeyError."""
    from systolica.app.onnx_run import run_plan
    m = onnx_zoo.QModel(1)
    a = m.conv("x", (0.05, 0), 3, 8, 3, (0.1, 0))
    m.nodes.append(helper.make_node("QLinearAdd", [a, *m.q(0.1, 0), a, *m.q(0.1, 0),
                                                   *m.q(0.2, 0)], ["sum"], name="add",
                                    domain="com.microsoft"))
    m.nodes.append(helper.make_node("QLinearGlobalAveragePool", ["sum", *m.q(0.2, 0),
                                                                 *m.q(0.05, 0)], ["gap"],
                                    name="gap", domain="com.microsoft", channels_last=0))
    run = run_plan(plan_model(TINY, _ms(m.build([("x", [1, 3, 6, 6])], ["gap"]))))
    assert run.ok and run.agreement, run.problems()


@pytest.mark.slow
def test_a_layer_output_read_by_a_relu_and_the_graph_keeps_its_values():
    """Found by the fuzzer: a convolution's output read by a Relu alone but also a graph
    output had the Relu folded into it, so that output was clamped (a wrong result,
    128 steps from onnxruntime's). The Relu now runs on the host."""
    from systolica.app.onnx_run import run_plan
    plan = plan_model(TINY, relu_and_output())
    assert {p.op.name: p.processor for p in plan.placements}["relu1"] == "host"
    run = run_plan(plan)
    assert run.ok, run.problems()
