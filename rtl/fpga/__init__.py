"""The chip on an FPGA: a UART host link (:mod:`.uart`, :mod:`.bridge`), the top that
joins it to the chip and a block-RAM DRAM (:mod:`.top`), and the boards it is built
for (:mod:`.boards`)."""
