"""ONNX models in the QOperator form (docs/compiler.md, "ONNX models"): built here with
onnx.helper, imported, compiled and run on the golden model. The chip's numbers equal
the numpy reference bit for bit and onnxruntime, the external oracle, within one int8
step (ONNX requantises by a float scale rounding half to even, the chip by a 16-bit
fixed-point multiplier rounding half up); the tests count how often they differ.
What the chip does not run is refused by name."""

from __future__ import annotations

import functools

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
    and the logits by up to two steps (in 14 % of them over 40 inputs, 2 steps in 2 of
    400)."""
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
    assert diff.max() <= 2 and (diff > 0).sum() <= 5, diff
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
            node.op_type = "AveragePool"
    with pytest.raises(CompileError, match="'pool': AveragePool between DequantizeLinear "
                                           "and QuantizeLinear is not lowered"):
        onnx_import.load(bad)
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for node in bad.graph.node:
        if node.name == "conv2":         # grouped, not depthwise
            node.attribute.append(helper.make_attribute("group", 2))
    with pytest.raises(CompileError, match="'conv2' \\(QLinearConv\\): group 2 with weights "
                                           "of shape \\[12, 8, 3, 3\\].*depthwise"):
        onnx_import.load(bad)
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    last = bad.graph.output[0]
    last.name = "fc_y"               # the Gemm's float output, never quantised
    with pytest.raises(CompileError, match="output 'fc_y' is not quantised"):
        onnx_import.load(bad)
