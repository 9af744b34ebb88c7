"""ONNX models in the QOperator form (docs/compiler.md, "ONNX models"): built here with
onnx.helper, imported, compiled and run on the golden model. The chip's numbers equal
the numpy reference bit for bit and onnxruntime, the external oracle, within one int8
step (ONNX requantises by a float scale rounding half to even, the chip by a 16-bit
fixed-point multiplier rounding half up); the tests count how often they differ.
What the chip does not run is refused by name."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import onnx  # noqa: E402  (the dev extra installs it, and onnxruntime)
import pytest
from onnx import TensorProto, helper  # noqa: E402

from systolica import golden  # noqa: E402
from systolica.arch.config import preset  # noqa: E402
from systolica.compiler import CompileError, OnnxNodeError, compile_network
from systolica.compiler.frontend import onnx_import
from systolica.compiler.graph import reference  # noqa: E402
from systolica.models import onnx_zoo as onnx_models  # noqa: E402

from tiers import sample  # noqa: E402

TINY = preset("tiny")


def _runtime(model, feeds):
    return onnx_models.runtime_session(model).run(None, feeds)


def _compare(model, feeds, cfg=TINY, max_differing=0.05):
    """Import, compile, run on the golden model: equal to numpy and to the
    prediction; against onnxruntime at most one step apart, and rarely that."""
    graph = onnx_import.load(model, feeds)
    comp = compile_network(cfg, graph)
    res = golden.run(cfg, comp.loadable)
    assert res.error.name == "NONE" and res.cycles == comp.predicted_cycles
    got, want = comp.results(res.dram), reference.outputs(graph)
    for t in want:
        np.testing.assert_array_equal(got[t], want[t], err_msg=t)
    oracle = _runtime(model, feeds)
    for t, o in zip(graph.outputs, oracle):
        assert got[t].shape == o.shape, (t, got[t].shape, o.shape)
        diff = np.abs(got[t].astype(int) - o.astype(int))
        assert diff.max() <= 1, (t, diff.max())
        assert diff.mean() <= max_differing, (t, float(diff.mean()))
    return comp


def test_an_inception_block_equals_onnxruntime():
    """NCHW in and out (transposes on the chip), a per-channel conv, a max pool, a
    Concat of maps, a strided conv with a Relu folded into it."""
    feeds = {"x": np.random.default_rng(1).integers(-128, 128, (1, 6, 10, 10), np.int8)}
    _compare(onnx_models.inception(), feeds)


def test_a_cnn_head_and_an_mlp_equal_onnxruntime():
    """A conv to a 1 x 1 map, Flatten, two QLinearMatMuls (the input zero point
    folded into a bias); and an MLP on [M, K] inputs."""
    m = onnx_models.QModel(2)
    c = m.conv("x", (0.04, 0), 5, 16, 4, (0.1, 2), pads=0)
    f = m.node("Flatten", [c], axis=1)
    h = m.matmul(f, (0.1, 2), 16, 12, (0.2, 0), relu=True)
    y = m.matmul(h, (0.2, 0), 12, 5, (0.3, -7))
    model = m.build([("x", [3, 5, 4, 4])], [y])
    _compare(model, {"x": np.random.default_rng(3).integers(-128, 128, (3, 5, 4, 4),
                                                             np.int8)})
    m = onnx_models.QModel(4)
    h = m.matmul("a", (0.03, -3), 20, 24, (0.2, 0), relu=True)
    y = m.matmul(h, (0.2, 0), 24, 9, (0.25, 4))
    model = m.build([("a", [40, 20])], [y])
    _compare(model, {"a": np.random.default_rng(5).integers(-128, 128, (40, 20), np.int8)})


@pytest.mark.parametrize("seed", range(3))
def test_random_conv_stacks_equal_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    m = onnx_models.QModel(seed)
    cin = int(rng.integers(1, 12))
    size = int(rng.integers(5, 12))
    x, q, c = "x", (0.05, int(rng.integers(-20, 20))), cin
    for layer in range(int(rng.integers(1, 4))):
        cout = int(rng.integers(1, 20))
        k = int(rng.choice([1, 3, 5]))
        yq = (float(rng.uniform(0.05, 0.2)), 0 if layer % 2 else int(rng.integers(-9, 9)))
        x = m.conv(x, q, c, cout, k, yq, stride=int(rng.integers(1, 3)),
                   relu=yq[1] == 0 and bool(rng.integers(2)))
        q, c = yq, cout
    model = m.build([("x", [1, cin, size, size])], [x])
    _compare(model, {"x": rng.integers(-128, 128, (1, cin, size, size), np.int8)})


def _refused(build, words):
    m = onnx_models.QModel(0)
    inputs, outputs = build(m)
    with pytest.raises(CompileError) as info:
        onnx_import.load(m.build(inputs, outputs))
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_what_the_chip_does_not_run_is_refused_by_name():
    _refused(lambda m: ([("x", [1, 2, 4, 4])], [m.node("Sigmoid", ["x"])]),
             ["node 'Sigmoid_1'", "Sigmoid is not lowered", "QLinearConv"])
    _refused(lambda m: ([("x", [1, 2, 4, 4])],
                        [m.conv("x", (0.1, 0), 2, 4, 3, (0.1, 5), relu=True)]),
             ["'relu1'", "folds into the layer before it", "zero point 0"])

    # a scale per output column after a layer with one: the matmul has an [M, K]
    # tensor to read, not a map
    _refused(lambda m: ([("x", [6, 8])], [m.matmul(m.matmul("x", (0.1, 0), 8, 8, (0.1, 0)),
                                                   (0.1, 0), 8, 4, (0.1, 0),
                                                   w_scales=np.linspace(0.01, 0.02, 4))]),
             ["node 'qmm2'", "one scale for the right operand", "a graph input that only "
              "such matmuls read", "all of them per channel"])

    m = onnx_models.QModel(0)                  # a float input no QuantizeLinear reads
    y = m.matmul("f", (0.1, 0), 4, 3, (0.1, 0))
    graph = helper.make_graph(
        m.nodes, "m", [helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(y, TensorProto.INT8, None)], m.inits)
    with pytest.raises(CompileError, match="input 'f' is FLOAT; the chip takes int8") as info:
        onnx_import.load(helper.make_model(graph))
    assert not isinstance(info.value, OnnxNodeError)
    m = onnx_models.QModel(0)                  # quantised, and nothing else
    m.nodes.append(helper.make_node("QuantizeLinear", ["f", *m.q(0.1, 0)], ["x"],
                                    name="quant"))
    graph = helper.make_graph(
        m.nodes, "m", [helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("x", TensorProto.INT8, None)], m.inits)
    with pytest.raises(CompileError, match="output 'x' is the input 'f' quantised"):
        onnx_import.load(helper.make_model(graph))
    with pytest.raises(CompileError, match="no such file"):
        onnx_import.load("/nonexistent/model.onnx")


@pytest.mark.rtl
def test_imported_models_on_the_rtl():
    """The inception-like model, the QDQ residual network and the CNN and MLP
    onnxruntime quantised (per channel), imported, on the Verilated tiny chip: equal to numpy and
    the golden model, in the predicted cycles, and within one step of onnxruntime."""
    from chip_runs import assert_matches_prediction, assert_outputs_match, compile_and_run_on_rtl
    feeds = {"x": np.random.default_rng(1).integers(-128, 128, (1, 6, 10, 10), np.int8)}
    model, resnet = onnx_models.inception(), onnx_models.qdq_resnet()
    xq = np.random.default_rng(0).integers(0, 128, (1, 3, 12, 12), dtype=np.int8)
    quantised = ort_model("cnn", True)
    o_scale, o_zp = _quantised_input(quantised)
    oq = np.random.default_rng(2).integers(o_zp, 128, (1, 3, 16, 16), dtype=np.int8)
    mlp = ort_model("mlp", True)
    m_scale, m_zp = _quantised_input(mlp)
    mq = np.random.default_rng(3).integers(m_zp, 128, (12, 20), dtype=np.int8)
    runs = compile_and_run_on_rtl(TINY, {
        "inception": lambda: onnx_import.load(model, feeds),
        "qdq_resnet": lambda: onnx_import.load(resnet, {"x": xq}),
        "ort_quantized": lambda: onnx_import.load(quantised, {"x": oq}),
        "ort_mlp": lambda: onnx_import.load(mlp, {"x": mq})})
    for compiled, res in runs.values():
        assert_outputs_match(TINY, compiled, res)
        assert_matches_prediction(TINY, compiled, res)
    compiled, res = runs["inception"]
    got = compiled.results(res.dram)
    for t, theirs in zip(compiled.graph.outputs, _runtime(model, feeds)):
        assert np.abs(got[t].astype(int) - theirs.astype(int)).max() <= 1
    compiled, res = runs["qdq_resnet"]
    (t,) = compiled.graph.outputs
    (theirs,) = _qdq_outputs(resnet, xq, 0.03, 0)
    assert np.abs(compiled.results(res.dram)[t].astype(int) - theirs.astype(int)).max() <= 1
    for name, m, x, scale, zp in (("ort_quantized", quantised, oq, o_scale, o_zp),
                                  ("ort_mlp", mlp, mq, m_scale, m_zp)):
        compiled, res = runs[name]
        (t,) = compiled.graph.outputs
        (theirs,) = _qdq_outputs(m, x, scale, zp)
        ours = compiled.results(res.dram)[t].reshape(theirs.shape)
        assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1, name


def _qdq_outputs(model, xq, x_scale, x_zp):
    """onnxruntime's run of a QDQ model on the float input that quantises to `xq`,
    its float outputs quantised back by their DequantizeLinear's parameters."""
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    xf = ((xq.astype(np.float32) - x_zp) * np.float32(x_scale)).astype(np.float32)
    outs = []
    for vo, of in zip(model.graph.output, _runtime(model, {"x": xf})):
        dq = made[vo.name]
        s, z = consts[dq.input[1]], consts[dq.input[2]]
        outs.append(np.clip(np.round(of / s) + z, -128, 127).astype(np.int8))
    return outs


def _golden_output(graph, cfg=TINY):
    """A one-output graph compiled for `cfg` and run on the golden model: no fault,
    the predicted cycles, equal to numpy; its output."""
    comp = compile_network(cfg, graph)
    res = golden.run(cfg, comp.loadable)
    assert res.error.name == "NONE" and res.cycles == comp.predicted_cycles
    got, want = comp.results(res.dram), reference.outputs(graph)
    (t,) = graph.outputs
    np.testing.assert_array_equal(got[t], want[t])
    return got[t]


@pytest.mark.parametrize("seed", sample(range(3), 3))
def test_a_qdq_model_equals_onnxruntime(seed):
    """The QDQ form, folded into the QOperator form: a per-channel conv with a Relu, a
    max pool, a conv whose Relu clamps at a nonzero zero point, a conv to 1 x 1,
    Flatten, a Gemm with transB and a bias; equal to numpy, within a step of
    onnxruntime."""
    model = onnx_models.qdq_cnn()
    xq = np.random.default_rng(seed).integers(-128, 128, (1, 4, 8, 8), dtype=np.int8)
    ours = _golden_output(onnx_import.load(model, {"x": xq}))
    (theirs,) = _qdq_outputs(model, xq, 0.03, 2)
    assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1
    assert len(np.unique(ours)) > 3            # not all saturated


@pytest.mark.parametrize("seed", sample(range(4), 4))
def test_a_qdq_residual_network_equals_onnxruntime(seed):
    """Residual blocks in the QDQ form: Adds (onnxruntime's QLinearAdd, the chip's Add
    with 8-bit multipliers) with a Relu at zero point -128, a strided 1x1
    projection, a global average pool, Flatten, a Gemm. Equal to numpy; the logits
    within a step of onnxruntime."""
    model = onnx_models.qdq_resnet()
    xq = np.random.default_rng(seed).integers(0, 128, (1, 3, 12, 12), dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    kinds = {type(n.op).__name__ for n in graph.nodes}
    assert {"Add", "GlobalAvgPool", "Dense", "Conv2d"} <= kinds
    (theirs,) = _qdq_outputs(model, xq, 0.03, 0)
    assert np.abs(_golden_output(graph).astype(int) - theirs.astype(int)).max() <= 1


def _quantised_input(model):
    """The scale and zero point of the QuantizeLinear that reads the model's input."""
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == model.graph.input[0].name)
    return float(consts[q.input[1]]), int(consts[q.input[2]])


@functools.cache
def ort_model(name: str, per_channel: bool):
    """A float network quantised by onnxruntime's own quantiser, per tensor or per
    channel; once per worker process, when first asked for (the fast tier runs the
    tests in a shuffled order, which would set a module's fixture up again and
    again)."""
    return onnx_models.ort_quantized({"cnn": onnx_models.float_cnn,
                                      "lenet": onnx_models.float_lenet,
                                      "mlp": onnx_models.float_mlp,
                                      "mobilenet": onnx_models.float_mobilenet,
                                      "mobilenet_relu6": lambda: onnx_models.float_mobilenet(
                                          relu6=True)}[name](),
                                     per_channel=per_channel)


PER_CHANNEL = sample([pytest.param(False, id="per_tensor"),
                      pytest.param(True, id="per_channel")], 2)


@pytest.mark.parametrize("per_channel, seed", sample(
    [pytest.param(pc, seed, id=f"{'per_channel' if pc else 'per_tensor'}-{seed}")
     for pc in (False, True) for seed in range(2)], 4))
def test_a_model_quantised_by_onnxruntime_equals_it(per_channel, seed):
    """What quantize_static writes, taken as it is: its Concat gives each branch its
    own scale (each branch's convolution writes at the join's instead, no identity
    layer between), the branches' 6 and 10 channels pad to whole blocks of R, and
    with weights per channel
    the Gemm after the global pool runs as a 1x1 convolution (a multiplier per
    output), its output a 1 x 1 map. Equal to numpy. onnxruntime rounds a branch twice
    (to its own scale, then the join's) where the chip rounds once, so the join differs
    from it by a step in about 3 % of its values (test_a_join_is_written_by_its_branches),
    and the logits by a step in 13 % of them over 40 inputs (4 % with an identity
    layer, which rounds twice too)."""
    model = ort_model("cnn", per_channel)
    x_scale, x_zp = _quantised_input(model)
    xq = np.random.default_rng(seed).integers(x_zp, 128, (1, 3, 16, 16), dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    names = {n.name: type(n.op).__name__ for n in graph.nodes}
    assert not any("__requant" in n for n in names)
    join = graph.tensor("join").quant
    assert graph.tensor("branch1x1").quant == graph.tensor("branch3x3").quant == join
    assert names["fc"] == ("Conv2d" if per_channel else "Dense")
    ours = _golden_output(graph)
    (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
    diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
    assert diff.max() <= 1 and (diff > 0).sum() <= 5, diff
    assert len(np.unique(ours)) > 3            # not all saturated


@pytest.mark.parametrize("per_channel", PER_CHANNEL)
def test_a_multilayer_perceptron_equals_onnxruntime(per_channel):
    """Three Gemms on a [12, 20] input (Relu between). Weights per tensor: dense
    layers. Weights per channel: the input is read only by such matmuls, so it is
    taken as a batch of 1 x 1 maps (the same DRAM words) and each Gemm runs as a 1x1
    convolution with a multiplier per output. Equal to numpy; within a step of
    onnxruntime, on tiny and on the 2x3 grid."""
    model = ort_model("mlp", per_channel)
    x_scale, x_zp = _quantised_input(model)
    xq = np.random.default_rng(5).integers(x_zp, 128, (12, 20), dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    assert {type(n.op).__name__ for n in graph.nodes} == {
        "Conv2d" if per_channel else "Dense"}
    (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
    for cfg in (TINY, preset("tiny_2x3")):
        ours = _golden_output(graph, cfg)
        diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
        assert diff.max() <= 1, diff
        assert len(np.unique(ours)) > 3


@pytest.mark.parametrize("per_channel", PER_CHANNEL)
def test_a_flatten_of_a_larger_map_equals_onnxruntime(per_channel):
    """ONNX flattens a 3x3 map of 16 channels in C, H, W order, the chip in H, W, C:
    the Gemm reading it takes its weight rows reordered (per tensor), or runs as a 3x3
    convolution over the map (weights per channel; the next Gemm then a 1x1 one).
    Equal to numpy; within a step of onnxruntime."""
    model = ort_model("lenet", per_channel)
    x_scale, x_zp = _quantised_input(model)
    for seed in range(2):
        xq = np.random.default_rng(seed).integers(x_zp, 128, (1, 3, 12, 12), dtype=np.int8)
        graph = onnx_import.load(model, {"x": xq})
        kinds = {n.name: type(n.op).__name__ for n in graph.nodes}
        assert kinds["fc1"] == kinds["fc2"] == ("Conv2d" if per_channel else "Dense")
        ours = _golden_output(graph)
        (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
        diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
        assert diff.max() <= 1, diff
        assert len(np.unique(ours)) > 3


@pytest.mark.parametrize("per_channel", PER_CHANNEL)
def test_a_residual_network_quantised_by_onnxruntime_equals_it(per_channel):
    """A float residual network (stem, padded max pool, three basic blocks, one with a
    strided projection; global pool, Gemm) quantised by onnxruntime, on `base`: the
    golden model equals numpy in the predicted cycles, the logits within a step of
    onnxruntime."""
    model = onnx_models.ort_quantized(onnx_models.float_resnet(), per_channel=per_channel)
    x_scale, x_zp = _quantised_input(model)
    xq = np.random.default_rng(0).integers(x_zp, 128, (1, 3, 32, 32), dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    assert sum(type(n.op).__name__ == "Add" for n in graph.nodes) == 3
    ours = _golden_output(graph, preset("base"))
    (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
    diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
    assert diff.max() <= 1 and len(np.unique(ours)) > 3, diff


@pytest.mark.parametrize("name, per_channel", sample(
    [pytest.param(name, pc, id=f"{name}-{'per_channel' if pc else 'per_tensor'}")
     for name in ("mobilenet", "mobilenet_relu6") for pc in (False, True)], 4))
def test_a_mobilenet_quantised_by_onnxruntime_equals_it(name, per_channel):
    """MobileNetV2's blocks (depthwise convolutions: QLinearConv with ``group`` =
    channels) quantised by onnxruntime; its global pool after the linear projection
    changes the zero point; with ReLU6 (``Clip(x, 0, 6)``) the quantiser folds each
    clip into its QuantizeLinear's range. Equal to numpy; the logits within two steps
    of onnxruntime (the residual Adds' 8-bit multipliers), most within one."""
    model = ort_model(name, per_channel)
    assert "Clip" not in {n.op_type for n in model.graph.node}     # folded, if any
    x_scale, x_zp = _quantised_input(model)
    for seed in range(2):
        xq = np.random.default_rng(seed).integers(x_zp, 128, (1, 3, 16, 16), dtype=np.int8)
        graph = onnx_import.load(model, {"x": xq})
        assert sum(getattr(n.op, "depthwise", False) for n in graph.nodes) == 3
        ours = _golden_output(graph)
        (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
        diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
        assert diff.max() <= 2 and diff.mean() <= 0.7, diff
        assert len(np.unique(ours)) > 3


def test_a_flatten_of_a_larger_map_read_otherwise_is_refused():
    m = onnx_models.QModel(0)
    h = m.conv("x", (0.02, 0), 3, 8, 3, (0.05, 0))
    flat = m.node("Flatten", [h], axis=1)
    with pytest.raises(CompileError, match="Flatten_2' \\(Flatten\\): a 4x4 map is "
                                           "flattened in C, H, W order by ONNX"):
        onnx_import.load(m.build([("x", [1, 3, 4, 4])], [flat]))


def test_qdq_models_the_chip_does_not_run_are_refused_by_name():
    model = onnx_models.qdq_cnn()
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for node in bad.graph.node:
        if node.name == "pool":
            node.op_type = "LpPool"
    with pytest.raises(CompileError, match="'pool': LpPool between DequantizeLinear "
                                           "and QuantizeLinear is not lowered"):
        onnx_import.load(bad)
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for node in bad.graph.node:
        if node.name == "conv2":         # 2 groups of 8 channels: the input has 8
            node.attribute.append(helper.make_attribute("group", 2))
    with pytest.raises(CompileError, match="'conv2' \\(Conv\\): group 2 with weights of "
                                           "shape \\[12, 8, 3, 3\\] over 8 input channels"):
        onnx_import.load(bad)
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    last = bad.graph.output[0]
    last.name = "fc_y"               # the Gemm's float output, never quantised
    with pytest.raises(CompileError, match="output 'fc_y' is not quantised"):
        onnx_import.load(bad)


# -- refusals: an OnnxNodeError names the node at fault ------------------------------

def _edited(model, edit):
    """A copy of `model` changed by `edit(graph)`."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    edit(copy.graph)
    return copy


def _node(graph, name):
    return next(n for n in graph.node if n.name == name)


def _between(graph, value, op, name, **attrs):
    """A node `name` (`op`) inserted after `value`: its readers read the new node's
    output instead."""
    out = f"{name}_out"
    for n in graph.node:
        n.input[:] = [out if v == value else v for v in n.input]
    made = next(i for i, n in enumerate(graph.node) if value in n.output)
    graph.node.insert(made + 1, helper.make_node(op, [value], [out], name=name, **attrs))


def _qoperator(build):
    m = onnx_models.QModel(0)
    inputs, outputs = build(m)
    return m.build(inputs, outputs)


def _depthwise_convinteger():
    """A depthwise ConvInteger (an int32 output, which the chip makes of channel groups
    but not of a depthwise convolution's diagonal)."""
    w = onnx.numpy_helper.from_array(np.ones((4, 1, 3, 3), np.int8), "w")
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w"], ["y"], name="conv", group=4)], "m",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _float_weights(graph):
    _node(graph, "conv1").input[1] = "conv1_w_float"
    graph.initializer.append(onnx.numpy_helper.from_array(
        np.ones((8, 4, 3, 3), np.float32), "conv1_w_float"))


NODE_REFUSALS = [
    pytest.param(lambda: _qoperator(lambda m: ([("x", [1, 2, 4, 4])],
                                               [m.node("Sigmoid", ["x"])])),
                 "Sigmoid_1", "Sigmoid", "Sigmoid is not lowered", id="qoperator-sigmoid"),
    pytest.param(lambda: _qoperator(lambda m: ([("x", [1, 2, 4, 4])], [m.conv(
        "x", (0.1, 0), 2, 4, 3, (0.1, 5), relu=True)])),
                 "relu1", "Relu", "folds into the layer before it", id="qoperator-relu"),
    pytest.param(lambda: _qoperator(lambda m: ([("x", [1, 3, 6, 6])], [m.conv(
        "x", (0.1, 0), 5, 4, 3, (0.1, 0))])),          # weights for 5 channels, 3 come
                 "qconv1", "QLinearConv", "ONNX node 'qconv1' (QLinearConv): layer",
                 id="qoperator-graph-check"),
    pytest.param(lambda: _edited(onnx_models.qdq_cnn(), lambda g: setattr(
        _node(g, "pool"), "op_type", "LpPool")), "pool", "LpPool",
                 "LpPool between DequantizeLinear and QuantizeLinear is not lowered",
                 id="qdq-lppool"),
    pytest.param(_depthwise_convinteger, "conv", "ConvInteger",
                 "int32 output is taken from convolutions over channel groups, not "
                 "depthwise ones", id="depthwise-convinteger"),
    pytest.param(lambda: _edited(onnx_models.qdq_cnn(), _float_weights), "conv1", "Conv",
                 "its weights 'conv1_w_float' is not a DequantizeLinear's output",
                 id="qdq-float-weights"),
    pytest.param(lambda: _edited(onnx_models.qdq_cnn(), lambda g: _node(g, "fc").attribute
                                 .append(helper.make_attribute("transA", 1))), "fc", "Gemm",
                 "transA is not lowered", id="qdq-gemm-transA"),
]


@pytest.mark.parametrize("build, node, op_type, words", NODE_REFUSALS)
def test_a_node_refusal_is_an_onnx_node_error(build, node, op_type, words):
    """Each node-level refusal is an OnnxNodeError carrying the node's name and its
    operator as the model writes them (a folded QDQ Conv is a Conv), so that a caller
    can run that node elsewhere; it survives pickling (a worker's error)."""
    with pytest.raises(OnnxNodeError) as info:
        onnx_import.load(build())
    e = info.value
    assert (e.node, e.op_type) == (node, op_type)
    assert f"'{node}'" in str(e) and words in str(e), str(e)
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.node, back.op_type, str(back)) == (
        OnnxNodeError, e.node, e.op_type, str(e))


MODEL_REFUSALS = [
    pytest.param(lambda: ("/nonexistent/model.onnx", {}), "no such file", id="no-file"),
    pytest.param(lambda: (onnx_models.inception(), {"y": np.zeros((1, 6, 10, 10), np.int8)}),
                 "has no input(s) ['y']", id="unknown-input"),
    pytest.param(lambda: (_edited(onnx_models.qdq_cnn(), lambda g: setattr(
        g.output[0], "name", "fc_y")), {}), "output 'fc_y' is not quantised",
                 id="float-output"),
]


@pytest.mark.parametrize("build, words", MODEL_REFUSALS)
def test_a_model_refusal_is_a_plain_compile_error(build, words):
    model, inputs = build()
    with pytest.raises(CompileError) as info:
        onnx_import.load(model, inputs)
    assert not isinstance(info.value, OnnxNodeError) and words in str(info.value)


def _lrn_before_pool(graph):
    _between(graph, "conv1_f", "LRN", "lrn", size=3)


def _relu_after(name):
    return lambda graph: _between(graph, f"{name}_out", "Relu", f"{name}_relu")


def _softmax_last(graph):
    graph.node.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax"))
    graph.output[0].name = "probs"


def _relu_on_dequantised(graph):
    """``Q(Relu(DQ(x)))`` at another scale than x's: the Relu is at fault."""
    _between(graph, "conv2_f", "Relu", "lone_relu")
    _between(graph, "lone_relu_out", "QuantizeLinear", "Q_lone")
    graph.node.insert(len(graph.node) - 1, helper.make_node(
        "DequantizeLinear", ["Q_lone_out", "conv1_q_s", "conv1_q_z"], ["lone_f"], name="DQ_lone"))
    for n in graph.node:
        if n.name != "DQ_lone":
            n.input[:] = ["lone_f" if v == "Q_lone_out" else v for v in n.input]
    _node(graph, "Q_lone").input.extend(["conv1_q_s", "conv1_q_z"])


AT_FAULT = [
    pytest.param(onnx_models.qdq_cnn, _lrn_before_pool, "lrn", "LRN",
                 "LRN between DequantizeLinear and QuantizeLinear is not lowered",
                 id="lrn-not-its-pool"),
    pytest.param(onnx_models.qdq_cnn, _relu_after("pool"), "pool_relu", "Relu",
                 "follows MaxPool 'pool'", id="relu-not-its-pool"),
    pytest.param(onnx_models.qdq_resnet, _relu_after("gap"), "gap_relu", "Relu",
                 "follows GlobalAveragePool 'gap'", id="relu-not-the-final-pool"),
    pytest.param(onnx_models.qdq_cnn, _softmax_last, "softmax", "Softmax",
                 "Softmax between DequantizeLinear and QuantizeLinear is not lowered",
                 id="softmax-not-the-output"),
    pytest.param(onnx_models.qdq_cnn, _relu_on_dequantised, "lone_relu", "Relu",
                 "input and output are quantised differently", id="relu-not-its-dq"),
]


@pytest.mark.parametrize("build, edit, node, op_type, words", AT_FAULT)
def test_a_refusal_names_the_node_at_fault(build, edit, node, op_type, words):
    """Not the neighbour the fold reached it from: an LRN before a pool (not the
    pool), a Relu after a pool (not the pool, nor "not lowered"), a float Softmax at
    the end (not the output), a Relu between a DequantizeLinear and a QuantizeLinear
    of other scales (not the DequantizeLinear)."""
    with pytest.raises(OnnxNodeError) as info:
        onnx_import.load(_edited(build(), edit))
    assert (info.value.node, info.value.op_type) == (node, op_type)
    assert words in str(info.value), str(info.value)


def test_a_node_and_a_value_may_share_a_name():
    """ONNX names nodes and values apart: a final pool named as its output is no
    refusal."""
    m = onnx_models.QModel(0)
    h = m.conv("x", (0.05, 0), 3, 8, 3, (0.1, -3))
    m.nodes.append(helper.make_node("QLinearGlobalAveragePool", [h, *m.q(0.1, -3),
                                                                 *m.q(0.02, 4)],
                                    ["gap"], name="gap", domain="com.microsoft"))
    model = m.build([("x", [1, 3, 6, 6])], ["gap"])
    _compare(model, {"x": np.random.default_rng(0).integers(-128, 128, (1, 3, 6, 6),
                                                            np.int8)})


# -- a graph input's quantisation comes from whichever operator reads it -------------

def _pool_first(m):
    p = m.node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])
    return [("x", [1, 3, 8, 8])], [m.conv(p, (0.05, 7), 3, 8, 3, (0.1, -2))], (7, 0.05)


def _add_first(m):
    """Scales whose ratios the chip's 8-bit multipliers hold exactly (0.5, 0.375)."""
    m.nodes.append(helper.make_node("QLinearAdd", ["x", *m.q(0.04, 9), "b", *m.q(0.03, -5),
                                                   *m.q(0.08, 2)], ["sum"], name="add",
                                    domain="com.microsoft"))
    return [("x", [1, 4, 6, 6]), ("b", [1, 4, 6, 6])], ["sum"], (9, 0.04)


@pytest.mark.parametrize("build", [_pool_first, _add_first], ids=["pool", "add"])
def test_an_input_read_first_by_a_pool_or_an_add_keeps_its_quantisation(build):
    """The input's zero point and scale are those its reader declares: an Add's
    operand's, or, through a pool (which keeps them), the convolution's after it."""
    m = onnx_models.QModel(0)
    inputs, outputs, (zp, scale) = build(m)
    model = m.build(inputs, outputs)
    rng = np.random.default_rng(1)
    feeds = {n: rng.integers(-128, 128, s, np.int8) for n, s in inputs}
    graph = onnx_import.load(model, feeds)
    assert graph.tensor("x").quant.zero_point == zp
    assert graph.tensor("x").quant.scale == pytest.approx(scale)
    _compare(model, feeds)


# -- QOperator models holding DequantizeLinear ----------------------------------------

def _with_dq(m, v, q, name):
    """`v` dequantised by (scale, zp) `q`: a float value."""
    m.nodes.append(helper.make_node("DequantizeLinear", [v, *m.q(*q)], [name], name=f"DQ_{name}"))
    return name


def _requantised_by_onnx(model, feeds):
    """onnxruntime's outputs of `model` at `feeds`, each float one quantised by the
    DequantizeLinear that makes it (its scale and zero point)."""
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    out = []
    for vo, got in zip(model.graph.output, _runtime(model, feeds)):
        if got.dtype == np.float32:
            dq = made[vo.name]
            got = np.clip(np.round(got / consts[dq.input[1]]) + consts[dq.input[2]], -128,
                          127).astype(np.int8)
        out.append(got)
    return out


def _trailing_dq(m):
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    return [("x", [1, 3, 8, 8])], [_with_dq(m, y, (0.1, -4), "y")]


def _qdq_island(m):
    f = _with_dq(m, "x", (0.05, 3), "x_f")
    m.nodes.append(helper.make_node("MaxPool", [f], ["p_f"], name="pool", kernel_shape=[2, 2],
                                    strides=[2, 2]))
    m.nodes.append(helper.make_node("QuantizeLinear", ["p_f", *m.q(0.05, 3)], ["p"],
                                    name="Q_p"))
    return [("x", [1, 3, 8, 8])], [m.conv("p", (0.05, 3), 3, 6, 3, (0.08, 5))]


@pytest.mark.parametrize("build", [_trailing_dq, _qdq_island],
                         ids=["trailing-dequantize", "qdq-island"])
def test_a_qoperator_model_with_dequantize_linear_keeps_its_qlinear_nodes(build):
    """The fold takes the QDQ patterns (an output's DequantizeLinear, a DQ-MaxPool-Q
    island) and leaves the QLinear nodes as they are (they were lost: KeyError);
    equal to numpy, within a step of onnxruntime."""
    m = onnx_models.QModel(0)
    inputs, outputs = build(m)
    graph = helper.make_graph(
        m.nodes, "m", [helper.make_tensor_value_info(n, TensorProto.INT8, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "y" else TensorProto.INT8,
                                       None) for n in outputs], m.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.random.default_rng(2).integers(-128, 128, (1, 3, 8, 8), np.int8)}
    g = onnx_import.load(model, feeds)
    assert sum(type(n.op).__name__ == "Conv2d" for n in g.nodes) == 1
    ours = _golden_output(g)
    (theirs,) = _requantised_by_onnx(model, feeds)
    diff = np.abs(ours.astype(int) - theirs.astype(int))
    assert diff.max() <= 1 and diff.mean() <= 0.05, diff


def test_a_dequantize_quantize_pair_around_an_unlowered_op_names_it():
    m = onnx_models.QModel(0)
    h = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))
    m.nodes.append(helper.make_node("Sigmoid", [_with_dq(m, h, (0.1, -4), "h_f")], ["s_f"],
                                    name="sigmoid"))
    m.nodes.append(helper.make_node("QuantizeLinear", ["s_f", *m.q(1 / 256, -128)], ["s"],
                                    name="Q_s"))
    model = m.build([("x", [1, 3, 8, 8])], [m.conv("s", (1 / 256, -128), 8, 4, 1, (0.1, 0))])
    with pytest.raises(OnnxNodeError, match="'sigmoid': Sigmoid between DequantizeLinear") \
            as info:
        onnx_import.load(model)
    assert (info.value.node, info.value.op_type) == ("sigmoid", "Sigmoid")


# -- onnxruntime's QOperator form: QLinearConcat, QGemm -------------------------------

@functools.cache
def ort_qoperator(name: str, per_channel: bool):
    return onnx_models.ort_quantized({"cnn": onnx_models.float_cnn,
                                      "lenet": onnx_models.float_lenet,
                                      "mlp": onnx_models.float_mlp}[name](),
                                     per_channel=per_channel, quant_format="QOperator")


def _also_output(model, value):
    """`model` with its int8 `value` a graph output too (onnxruntime gives it)."""
    return _edited(model, lambda g: g.output.append(
        helper.make_tensor_value_info(value, TensorProto.INT8, None)))


@pytest.mark.parametrize("name, per_channel", sample(
    [pytest.param(n, pc, id=f"{n}-{'per_channel' if pc else 'per_tensor'}")
     for n in ("cnn", "lenet", "mlp") for pc in (False, True)], 2))
def test_a_model_onnxruntime_quantised_in_the_qoperator_form_equals_it(name, per_channel):
    """quantize_static's QOperator form as it is: a float input quantised and the
    logits dequantised (the host's), QLinearConv, MaxPool, QLinearConcat of two
    branches of their own scales, QLinearGlobalAveragePool, Flatten, QGemm
    (``transB``, an int32 C). The numpy reference against onnxruntime over four
    inputs: the join within a step (the branches rounded once where onnxruntime
    rounds twice) in under 5 % of its values (2.6 to 2.9 % over 20 inputs); the
    logits within two steps in under a fifth of them (a step in a layer may become
    two after the next: 12 to 15 % differ for the CNN over 20 inputs, up to 4 % for
    the others, 2 steps in 25 of 4800 MLP logits, the QDQ form's too)."""
    model = ort_qoperator(name, per_channel)
    kinds = {n.op_type for n in model.graph.node}
    assert "QGemm" in kinds and ("QLinearConcat" in kinds) == (name == "cnn")
    if name == "cnn":
        model = _also_output(model, "join_quantized")
    x_scale, x_zp = _quantised_input(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    differing = {}
    for seed in range(4):
        xq = np.random.default_rng(seed).integers(x_zp, 128, shape, dtype=np.int8)
        graph = onnx_import.load(model, {"x": xq})
        assert not any("__requant" in n.name for n in graph.nodes)
        ours = reference.outputs(graph)
        xf = ((xq.astype(np.float32) - x_zp) * np.float32(x_scale)).astype(np.float32)
        for t, theirs in zip(graph.outputs, _requantised_by_onnx(model, {"x": xf})):
            diff = np.abs(ours[t].reshape(theirs.shape).astype(int) - theirs.astype(int))
            assert diff.max() <= (1 if t == "join_quantized" else 2), (t, diff)
            n, size = differing.get(t, (0, 0))
            differing[t] = (n + int((diff > 0).sum()), size + diff.size)
            assert len(np.unique(ours[t])) > 3
    for t, (n, size) in differing.items():
        assert n <= (0.05 if t == "join_quantized" else 0.2) * size, (t, n, size)


def _qgemm_model(trans_b, alpha, bias, a_q=(0.05, 3), y_q=(0.2, -6), transA=0):
    m = onnx_models.QModel(7)
    w = m.rng.integers(-60, 60, (4, 12) if trans_b else (12, 4), dtype=np.int8)
    ins = ["a", *m.q(*a_q), m.const(w), *m.q(0.02, 0),
           m.const(m.rng.integers(-900, 900, 4, dtype=np.int32)) if bias else "", *m.q(*y_q)]
    attrs = {"transB": trans_b, **({"alpha": alpha} if alpha != 1.0 else {}),
             **({"transA": 1} if transA else {})}
    m.nodes.append(helper.make_node("QGemm", ins, ["y"], name="gemm", domain="com.microsoft",
                                    **attrs))
    model = m.build([("a", [5, 12])], ["y"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


@pytest.mark.parametrize("trans_b, alpha, bias", [(1, 1.0, True), (0, 0.5, True),
                                                  (1, 1.75, False)])
def test_qgemm_equals_onnxruntime(trans_b, alpha, bias):
    """``Y = alpha * (A - a_zp) @ (B - b_zp) + C`` quantised: B transposed or not,
    alpha folded into the multiplier, C the bias; equal to numpy and within a step of
    onnxruntime (the golden model)."""
    model = _qgemm_model(trans_b, alpha, bias)
    feeds = {"a": np.random.default_rng(3).integers(-128, 128, (5, 12), np.int8)}
    _compare(model, feeds)


def test_qgemm_with_transposed_a_or_a_float_output_is_refused():
    with pytest.raises(OnnxNodeError, match="'gemm' \\(QGemm\\): transA is not lowered"):
        onnx_import.load(_qgemm_model(1, 1.0, True, transA=1))
    bad = _edited(_qgemm_model(1, 1.0, True), lambda g: _node(g, "gemm").input.__delitem__(
        slice(7, 9)))                           # no y_scale, y_zero_point: a float output
    with pytest.raises(OnnxNodeError, match="no output scale"):
        onnx_import.load(bad)


# -- every scale and zero point is checked --------------------------------------------

def _qoperator_conv():
    m = onnx_models.QModel(0)
    return m.build([("x", [1, 3, 6, 6])], [m.conv("x", (0.05, 3), 3, 8, 3, (0.1, -4))])


def _set(tensor, value):
    """An edit: the initialiser `tensor` becomes `value`."""
    def edit(graph):
        init = next(t for t in graph.initializer if t.name == tensor)
        init.CopyFrom(onnx.numpy_helper.from_array(np.asarray(value), tensor))
    return edit


def _conv_input(k):
    """The initialiser at input `k` of the QOperator convolution."""
    return _node(_qoperator_conv().graph, "qconv1").input[k]


BAD_QUANTISATION = [
    # (model, tensor, bad value, the node blamed, the words)
    pytest.param(_qoperator_conv, lambda: _conv_input(1), np.float32(0), "qconv1", "is 0.0",
                 id="input-scale-0"),
    pytest.param(_qoperator_conv, lambda: _conv_input(4), np.float32(-0.01), "qconv1",
                 "is -0.01", id="weight-scale-negative"),
    pytest.param(_qoperator_conv, lambda: _conv_input(6), np.float32(np.nan), "qconv1",
                 "is nan", id="output-scale-nan"),
    pytest.param(_qoperator_conv, lambda: _conv_input(6), np.float32(np.inf), "qconv1",
                 "is inf", id="output-scale-inf"),
    pytest.param(_qoperator_conv, lambda: _conv_input(7), np.int32(300), "qconv1",
                 "is 300, outside int8's [-128, 127]", id="output-zero-point-300"),
    pytest.param(_qoperator_conv, lambda: _conv_input(2), np.uint8(200), "qconv1",
                 "is uint8", id="input-zero-point-uint8"),
    pytest.param(onnx_models.qdq_cnn, lambda: "conv1_q_s", np.float32(0), "conv1",
                 "its output's scale 'conv1_q_s' is 0.0", id="qdq-output-scale-0"),
    pytest.param(onnx_models.qdq_cnn, lambda: "conv1_wf_s",
                 np.array([0.01] * 3 + [0] + [0.01] * 4, np.float32), "conv1",
                 "its weights's scale 'conv1_wf_s' has 0.0 at index 3",
                 id="qdq-weight-scale-per-channel"),
    pytest.param(onnx_models.qdq_cnn, lambda: "x_q_z", np.int32(-129), "Q_x_q",
                 "its input's zero point 'x_q_z' is -129", id="qdq-input-quantiser"),
    pytest.param(onnx_models.qdq_cnn, lambda: "logits_s", np.float32(0), "DQ_logits",
                 "its output's scale 'logits_s' is 0.0", id="qdq-output-dequantiser"),
    pytest.param(onnx_models.qdq_resnet, lambda: "block1_conv2_f_s", np.float32(np.inf),
                 "block1_add", "its operand's scale 'block1_conv2_f_s' is inf", id="qdq-add"),
    pytest.param(lambda: ort_qoperator("cnn", False), lambda: "join_scale",
                 np.float32(np.nan), "join_quant", "'join_scale' is nan",
                 id="qlinearconcat-output"),
    pytest.param(lambda: ort_qoperator("mlp", False), lambda: "fc2_w_scale",
                 np.float32(-1), "fc2_quant", "'fc2_w_scale' is -1.0", id="qgemm-weights"),
]


@pytest.mark.parametrize("build, tensor, value, node, words", BAD_QUANTISATION)
def test_every_scale_and_zero_point_is_checked(build, tensor, value, node, words):
    """A scale of 0, below 0, NaN or infinite, a zero point outside int8 or of uint8,
    in a QOperator node, a QDQ pattern (its QuantizeLinear, a DequantizeLinear it
    reads, the input's QuantizeLinear), a QLinearConcat, a QGemm: an OnnxNodeError
    naming the tensor and the node that reads it (a join's own, not the branch's)."""
    name = tensor()
    with pytest.raises(OnnxNodeError) as info:
        onnx_import.load(_edited(build(), _set(name, value)))
    assert info.value.node == node and f"{name!r}" in str(info.value)
    assert words in str(info.value), str(info.value)


def test_a_qlinearadd_with_an_output_scale_of_0_is_refused():
    """It imported, and gave 271 of 512 values otherwise than onnxruntime (247 of 512
    here, before the check)."""
    m = onnx_models.QModel(0)
    scale = m.const(np.float32(0), "sum_scale")
    m.nodes.append(helper.make_node("QLinearAdd", ["a", *m.q(0.04, 0), "b", *m.q(0.03, 0),
                                                   scale, m.const(np.int8(0))], ["sum"],
                                    name="add", domain="com.microsoft"))
    model = m.build([("a", [1, 8, 8, 8]), ("b", [1, 8, 8, 8])], ["sum"])
    with pytest.raises(OnnxNodeError, match="'add' \\(QLinearAdd\\): its output scale "
                                            "'sum_scale' is 0.0") as info:
        onnx_import.load(model)
    assert info.value.node == "add"


# -- a join's branches requantised by their own layers ------------------------------

def test_a_join_is_written_by_its_branches():
    """onnxruntime's quantiser gives each branch of a Concat its own scale: each
    branch's convolution writes at the join's scale and zero point instead (no
    identity layer). onnxruntime rounds a branch twice, ``Q_join(DQ(Q_branch(v)))``,
    the chip once, ``Q_join(v)``: the join within a step of onnxruntime, in about 3 %
    of its values (1 in 200 when the chip rounded twice too)."""
    model = _also_output(ort_model("cnn", False), "join_QuantizeLinear_Output")
    x_scale, x_zp = _quantised_input(model)
    n = size = 0
    for seed in range(4):
        xq = np.random.default_rng(seed).integers(x_zp, 128, (1, 3, 16, 16), dtype=np.int8)
        graph = onnx_import.load(model, {"x": xq})
        assert not any("__requant" in n.name for n in graph.nodes)
        join = graph.outputs[1]
        ours = reference.outputs(graph)[join]
        xf = ((xq.astype(np.float32) - x_zp) * np.float32(x_scale)).astype(np.float32)
        theirs = _runtime(model, {"x": xf})[1]
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        assert diff.max() <= 1
        n, size = n + int((diff > 0).sum()), size + diff.size
    assert 0 < n <= 0.05 * size, (n, size)


def test_an_identity_layer_only_where_no_layer_can_requantise():
    """A join of a graph input and a convolution, each at its own scale: the
    convolution writes at the join's, the input (no layer makes it) goes through an
    identity layer. Equal to numpy (the golden model's run), within a step of
    onnxruntime."""
    m = onnx_models.QModel(0)
    c = m.conv("x", (0.05, 3), 8, 6, 3, (0.1, -4))
    m.nodes.append(helper.make_node("QLinearConcat", [*m.q(0.08, 1), "x", *m.q(0.05, 3),
                                                      c, *m.q(0.1, -4)], ["join"],
                                    name="join", axis=1, domain="com.microsoft"))
    model = m.build([("x", [1, 8, 6, 6])], ["join"])
    feeds = {"x": np.random.default_rng(0).integers(-128, 128, (1, 8, 6, 6), np.int8)}
    graph = onnx_import.load(model, feeds)
    assert [n.name for n in graph.nodes if "__requant" in n.name] == ["join__requant0"]
    assert graph.tensor("qconv1").quant.zero_point == 1
    # the convolution's channels rounded once, to 0.08, where onnxruntime rounds to 0.1
    # first: a step apart in about a quarter of them; the input's in 6 % (ties of
    # 0.05/0.08 = 5/8, rounded half up by the chip and to even by onnxruntime)
    _compare(model, feeds, max_differing=0.2)


@pytest.mark.parametrize("build, identities", [
    pytest.param(lambda: onnx_models.float_densenet(growth=8), 3, id="densenet"),
    pytest.param(lambda: onnx_models.float_squeezenet(size=32), 0, id="squeezenet")])
def test_identity_layers_left_in_densenet_and_squeezenet(build, identities):
    """Quantised by onnxruntime (QDQ): every join of SqueezeNet's fire modules takes
    its two expand convolutions as they write (8 identity layers before); DenseNet's
    joins ``Concat(cat_k-1, new_k)`` take the new features as their convolution
    writes, and keep an identity layer where the block so far, which the next layer
    reads too, is quantised otherwise than the join (3 of 6 joins; 6 before). A step
    apart in one layer may grow in the next, and SqueezeNet has 26: its logits are
    as close to the float model's as onnxruntime's are (the mean distance within 10 %
    of it), not to onnxruntime's own (a quarter or more differ, by up to 5 steps,
    with identity layers or without)."""
    from onnx import numpy_helper
    float_model = build()
    model = onnx_models.ort_quantized(float_model)
    x_scale, x_zp = _quantised_input(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    xq = np.random.default_rng(0).integers(x_zp, 128, shape, dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    left = [n.name for n in graph.nodes if "__requant" in n.name]
    assert len(left) == identities and all(n.endswith("__requant0") for n in left), left
    (t,) = graph.outputs
    ours = reference.outputs(graph)[t].astype(float)
    (theirs,) = _qdq_outputs(model, xq, x_scale, x_zp)
    ours = ours.reshape(theirs.shape)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    xf = ((xq.astype(np.float32) - x_zp) * np.float32(x_scale)).astype(np.float32)
    (exact,) = _runtime(float_model, {"x": xf})
    exact = exact.reshape(theirs.shape) / consts[dq.input[1]] + consts[dq.input[2]]
    assert np.abs(ours - exact).mean() <= 1.1 * np.abs(theirs - exact).mean()
    assert len(np.unique(ours)) > 3


def test_a_branch_written_at_the_join_keeps_its_own_range():
    """onnxruntime clips a branch to its own int8 range before requantising it to the
    join's: a branch after a Relu (0 to 127 x 0.05, saturated here) written at the
    join's scale (0.15) clamps at 39 (``relu6``) and at the join's zero point. A
    branch that would need a clamp the chip has not (below, not at the zero point)
    keeps its identity layer. Equal to numpy, within a step of onnxruntime."""
    m = onnx_models.QModel(0)
    a = m.conv("x", (0.05, 3), 8, 8, 3, (0.05, 0), relu=True)
    b = m.conv("x", (0.05, 3), 8, 8, 1, (0.07, 2))
    m.nodes.append(helper.make_node("QLinearConcat", [*m.q(0.15, -3), a, *m.q(0.05, 0),
                                                      b, *m.q(0.07, 2)], ["join"],
                                    name="join", axis=1, domain="com.microsoft"))
    model = m.build([("x", [1, 8, 6, 6])], [m.conv("join", (0.15, -3), 16, 4, 1, (0.2, 0)),
                                            "join"])
    feeds = {"x": np.random.default_rng(0).integers(-128, 128, (1, 8, 6, 6), np.int8)}
    graph = onnx_import.load(model, feeds)
    conv = graph.node("qconv1").op
    assert (conv.zp, conv.relu, conv.relu6) == (-3, True, 39)
    assert [n.name for n in graph.nodes if "__requant" in n.name] == ["join__requant1"]
    _compare(model, feeds, max_differing=0.1)
