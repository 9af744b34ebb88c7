"""The graph IR: layers over named tensors (``graph``), the closed set of op types
(``ops``), graph rewrites (``concat_pad``) and the numpy reference of their integer
semantics (``reference``), which shares no code with the lowering."""
