"""Lowering: graph layers to latency-insensitive micro-ops (:mod:`.lower`).

One rule per op type (:mod:`.rule` declares the protocol, :mod:`.registry` holds the
table), one module per op family, each registering its rules when imported
(:mod:`.lower` imports them all); the map lowering's convolution core is
:mod:`.maps`, chains of convolutions are :mod:`.chain`."""
