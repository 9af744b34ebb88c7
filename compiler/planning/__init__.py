"""Planning: where things live and how work is cut, before any micro-op exists --
memory (``memory``), DRAM layouts (``layout``), tiles and halos (``tiling``,
``map_tiling``), splits of the array (``split``, ``dense_passes``), chains and the
UBUF (``chain_passes``, ``network_chains``), permutations (``permute``), lane routes
(``lanes``). The cost models live beside what they choose."""
