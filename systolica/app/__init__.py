"""Applications on top of the chip and compiler: the command line (:mod:`.cli`), the
demo network (:mod:`.demo`), the compile-and-run flow (:mod:`.flow`) and its reports
(:mod:`.report`)."""
