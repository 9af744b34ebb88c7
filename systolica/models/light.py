"""The real topologies the ``onnx`` package ships (``onnx/backend/test/data/light/``:
ResNet-50, SqueezeNet, Inception v1, VGG-19, ...) given weights: their weights are
``ConstantOfShape`` nodes of one value, which would make every channel alike. Each
becomes a seeded random initialiser (He's scaling, so activations keep their range
through the depth), and the model is converted to opset 13, the oldest the front
end reads (they are opset 9)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

NAMES = ("light_resnet50", "light_squeezenet", "light_inception_v1", "light_vgg19",
         "light_bvlc_alexnet", "light_densenet121", "light_inception_v2",
         "light_shufflenet", "light_zfnet512")


def path(name: str) -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"


def model(name: str, seed: int = 0):
    """The float model `name` of NAMES with weights, at opset 13."""
    import onnx
    from onnx import numpy_helper, version_converter
    if name not in NAMES:
        raise ValueError(f"no light model {name!r}; they are {', '.join(NAMES)}")
    proto = onnx.load(str(path(name)))
    g = proto.graph
    rng = np.random.default_rng(seed)
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    # a BatchNormalization's scale, bias, mean and variance by its input position
    role = {n.input[k]: r for n in g.node if n.op_type == "BatchNormalization"
            for k, r in enumerate(("", "scale", "bias", "mean", "var")) if k}
    keep, weights = [], []
    for n in g.node:
        if n.op_type != "ConstantOfShape":
            keep.append(n)
            continue
        shape = [int(d) for d in consts[n.input[0]]]
        weights.append(numpy_helper.from_array(
            _weights(rng, shape, role.get(n.output[0], "")), n.output[0]))
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(weights)
    made = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in made]
    del g.input[:]
    g.input.extend(inputs)
    used = {v for n in g.node for v in n.input}
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    proto.ir_version = 8            # initialisers need not be inputs (IR 4 on)
    return version_converter.convert_version(proto, 13)


def _weights(rng, shape, role: str) -> np.ndarray:
    """Weights of `shape`; `role`: a normalisation's parameter it is, if one."""
    if len(shape) >= 2:                          # Conv [O, I, kh, kw], Gemm [N, K] or [K, N]
        fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else min(shape)
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    if role in ("scale", "var"):                 # positive, near 1
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.05).astype(np.float32)
