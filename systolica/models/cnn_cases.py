"""Randomised convolution, pooling and add layers (docs/cnn.md) for the tests: each
case is a small graph whose shapes, strides, pads, dilations, channel counts and zero
points are drawn from a seed, with requantisation scaled so outputs do not saturate.
"""

from __future__ import annotations

import numpy as np

from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import requant_for


def _scaled(acc_std: float) -> tuple[int, int]:
    """(mult, shift) taking an accumulator of spread `acc_std` to about 32 levels."""
    return requant_for(32.0 / max(acc_std, 1.0), per_channel=False)


def conv_case(seed: int, *, channels: int | None = None, size: tuple[int, int] | None
              = None, kernel: tuple[int, int] | None = None) -> Graph:
    """One random conv2d (any kernel 1..5, stride 1..3, asymmetric pads, dilation 1..2,
    per-tensor or per-channel requantisation, ReLU / ReLU6 / none, input zero point)."""
    rng = np.random.default_rng(seed)
    cin = channels or int(rng.choice([1, 2, 3, 5, 8, 11, 17]))
    cout = int(rng.choice([1, 3, 8, 9, 16, 20]))
    kh, kw = kernel or (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    ext = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    H, W = size or (int(rng.integers(ext[0], ext[0] + 10)), int(rng.integers(ext[1], ext[1] + 10)))
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    pads = tuple(int(rng.integers(0, e)) for e in (ext[0], ext[1], ext[0], ext[1]))
    x_zp = int(rng.integers(-20, 21))
    x = rng.integers(-128, 128, size=(1, H, W, cin), dtype=np.int8)
    w = rng.integers(-60, 61, size=(kh, kw, cin, cout), dtype=np.int8)
    bias = rng.integers(-3000, 3000, size=cout, dtype=np.int32) if rng.random() < 0.7 \
        else None
    std = 70.0 * 35.0 * np.sqrt(kh * kw * cin)
    if rng.random() < 0.5:
        mult, shift = _scaled(std)
    else:
        mult, shift = requant_for(32.0 / std * rng.uniform(0.5, 2.0, size=cout))
    act = rng.integers(0, 3)
    zp = int(rng.integers(-10, 11))
    g = GraphBuilder(f"conv{seed}")
    t = g.input(x, zero_point=x_zp)
    t = g.conv2d(t, w, bias, stride=stride, pads=pads, dilation=dil, mult=mult, shift=shift,
                 zp=zp, relu=act == 1, relu6=zp + 40 if act == 2 else None, name="conv")
    return g.build(t)


def pool_case(seed: int) -> Graph:
    """A conv (so the pool reads a map the chip wrote) then a random max or average
    pool, or a global average pool."""
    rng = np.random.default_rng(seed)
    C = int(rng.choice([3, 8, 12]))
    H, W = int(rng.integers(4, 12)), int(rng.integers(4, 12))
    x = rng.integers(-128, 128, size=(1, H, W, C), dtype=np.int8)
    g = GraphBuilder(f"pool{seed}")
    t = g.input(x, zero_point=int(rng.integers(-10, 11)))
    kind = rng.integers(0, 3)
    if kind == 2:
        t = g.global_avg_pool(t, name="pool")
    else:
        k = (int(rng.integers(1, min(H, 4) + 1)), int(rng.integers(1, min(W, 4) + 1)))
        s = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pads = tuple(int(rng.integers(0, e)) for e in (k[0], k[1], k[0], k[1]))
        t = (g.max_pool2d if kind == 0 else g.avg_pool2d)(t, k, s, pads, name="pool")
    return g.build(t)


def add_case(seed: int) -> Graph:
    """Two inputs with their own zero points added with random multipliers, then
    optionally ReLU."""
    rng = np.random.default_rng(seed)
    C = int(rng.choice([1, 8, 13]))
    H, W = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    g = GraphBuilder(f"add{seed}")
    a = g.input(rng.integers(-128, 128, size=(1, H, W, C), dtype=np.int8), name="a",
                zero_point=int(rng.integers(-20, 21)))
    b = g.input(rng.integers(-128, 128, size=(1, H, W, C), dtype=np.int8), name="b",
                zero_point=int(rng.integers(-20, 21)))
    t = g.add(a, b, mult_a=int(rng.integers(-100, 101)), mult_b=int(rng.integers(-100, 101)),
              shift=int(rng.integers(5, 9)), zp=int(rng.integers(-10, 11)),
              relu=bool(rng.random() < 0.5), name="add")
    return g.build(t)


def large_conv_case(seed: int) -> Graph:
    """A convolution whose input is larger than the CBUF of ``tiny`` (cut into tiles
    with halos)."""
    return conv_case(seed, channels=16, size=(40, 30), kernel=(3, 3))


def flatten_case(seed: int, channels: int = 16) -> Graph:
    """A convolution, a Flatten of its whole map and a dense layer over it (the
    dense layer gathers each K-block, one pixel's channel block, with a strided
    load), for a batch of two."""
    rng = np.random.default_rng(seed)
    H, W = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    g = GraphBuilder(f"flatten{seed}")
    x = g.input(rng.integers(-128, 128, size=(2, H, W, 5), dtype=np.int8),
                zero_point=int(rng.integers(-10, 11)))
    m, s = _scaled(70.0 * 35.0 * np.sqrt(9 * 5))
    t = g.conv2d(x, rng.integers(-60, 61, size=(3, 3, 5, channels), dtype=np.int8),
                 pads=1, mult=m, shift=s, relu=True, name="conv")
    t = g.flatten(t, name="flat")
    K = H * W * channels
    m, s = _scaled(70.0 * 35.0 * np.sqrt(K))
    t = g.dense(t, rng.integers(-60, 61, size=(K, 7), dtype=np.int8),
                rng.integers(-500, 500, size=7, dtype=np.int32), mult=m, shift=s, name="fc")
    return g.build(t)


def residual_chain_case(seed: int, *, stride2: bool | None = None) -> Graph:
    """A small residual network whose middle is a run of two or three convolutions
    (docs/cnn.md, "Chains in networks"): a 3x3 convolution (so the run reads a map
    the chip wrote), the run (odd kernels, non-square too, dilation, "same" pads; one
    layer with stride 2 when `stride2`, by the seed when None), a shortcut from the
    first map (itself, or a 1x1 projection with the run's stride), Add (ReLU), a 2x2
    max pool. Channels 3..12, maps 8..20 x 6..12."""
    rng = np.random.default_rng(seed)
    H, W = int(rng.integers(8, 21)), int(rng.integers(6, 13))
    c0 = int(rng.integers(3, 13))
    depth = int(rng.integers(2, 4))
    strided = int(rng.integers(0, depth)) if (stride2 if stride2 is not None
                                              else rng.random() < 0.4) else -1
    g = GraphBuilder(f"residual_chain{seed}")
    x = g.input(rng.integers(-128, 128, size=(1, H, W, 3), dtype=np.int8),
                zero_point=int(rng.integers(-8, 9)))

    def conv(t, cin, cout, kh, kw, stride, dil, name, relu=True):
        m, s = _scaled(70.0 * 35.0 * np.sqrt(kh * kw * cin))
        ph, pw = dil * (kh // 2), dil * (kw // 2)
        return g.conv2d(t, rng.integers(-60, 61, size=(kh, kw, cin, cout), dtype=np.int8),
                        rng.integers(-2000, 2000, size=cout, dtype=np.int32),
                        stride=stride, pads=(ph, pw, ph, pw), dilation=dil, mult=m,
                        shift=s, zp=int(rng.integers(-6, 7)), relu=relu, name=name)

    first = conv(x, 3, c0, 3, 3, 1, 1, "stem")
    t, cin = first, c0
    for k in range(depth):
        cout = int(rng.integers(3, 13)) if k < depth - 1 else c0 + 4 * (strided >= 0)
        kh, kw = int(rng.choice([1, 3, 5])), int(rng.choice([1, 3]))
        dil = 2 if kh > 1 and rng.random() < 0.25 else 1
        t = conv(t, cin, cout, kh, kw, 2 if k == strided else 1, dil, f"run{k}",
                 relu=k < depth - 1)
        cin = cout
    short = first if strided < 0 else conv(first, c0, cin, 1, 1, 2, 1, "project",
                                           relu=False)
    t = g.add(t, short, mult_a=int(rng.integers(20, 60)), mult_b=int(rng.integers(20, 60)),
              shift=6, zp=-100, relu=True, name="add")
    t = g.max_pool2d(t, 2, 2, name="pool")
    return g.build(t)


def wide_maps_case(seed: int, channels: int = 24, classes: int = 13,
                   head: str = "int8") -> Graph:
    """Feature maps of many channels (more than a non-square array's ``min(R, C)``;
    docs/cnn.md, "Channels on non-square arrays"): a 3x3 convolution to `channels`
    (ReLU), a strided 3x3 convolution and a strided 1x1 projection of its map, their
    Add (ReLU), a 2x2 max pool and a 3x3 average pool (stride 1, padded), a global
    average pool, Flatten and a dense head of `classes` outputs (`head`: int8 or
    int32)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"wide_maps{seed}_{channels}")
    x = g.input(rng.integers(-128, 128, size=(1, 10, 9, 5), dtype=np.int8),
                zero_point=int(rng.integers(-10, 11)))

    def conv(t, cin, kh, stride, name, relu=True):
        m, s = _scaled(70.0 * 35.0 * np.sqrt(kh * kh * cin))
        p = kh // 2
        return g.conv2d(t, rng.integers(-60, 61, size=(kh, kh, cin, channels), dtype=np.int8),
                        rng.integers(-2000, 2000, size=channels, dtype=np.int32),
                        stride=stride, pads=(p, p, p, p), mult=m, shift=s,
                        zp=int(rng.integers(-6, 7)), relu=relu, name=name)

    stem = conv(x, 5, 3, 1, "stem")
    down = conv(stem, channels, 3, 2, "down")
    proj = conv(stem, channels, 1, 2, "proj", relu=False)
    t = g.add(down, proj, mult_a=int(rng.integers(20, 60)), mult_b=int(rng.integers(20, 60)),
              shift=6, zp=int(rng.integers(-10, 11)), relu=True, name="add")
    t = g.max_pool2d(t, 2, 1, (0, 0, 0, 0), name="maxpool")
    t = g.avg_pool2d(t, 3, 1, (1, 1, 1, 1), name="avgpool")
    t = g.flatten(g.global_avg_pool(t, name="gap"), name="flat")
    m, s = _scaled(70.0 * 35.0 * np.sqrt(channels))
    w = rng.integers(-60, 61, size=(channels, classes), dtype=np.int8)
    bias = rng.integers(-500, 500, size=classes, dtype=np.int32)
    if head == "int32":
        t = g.dense(t, w, bias, out_dtype="int32", name="fc")
    else:
        t = g.dense(t, w, bias, mult=m, shift=s, name="fc")
    return g.build(t)
