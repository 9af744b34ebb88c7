"""The map lowering: networks of feature maps through the CBUF in tiles of output
rows (docs/cnn.md). The convolution core here is shared by the layer-by-layer
lowering (:mod:`.network`) and the chains of convolutions in passes (seed 001,
:mod:`systolica.compiler.lowering.chain`): :mod:`.jobs` (what a layer is),
:mod:`.layout` (where things are), :mod:`.tile_loop` (the emitter of a layer's
tiles); the tiling cost model is :mod:`systolica.compiler.planning.map_tiling`."""
