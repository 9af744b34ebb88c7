// Simulation top: the chip plus a behavioural model of its external memory (DRAM).
//
// The register bus is driven from cocotb (or the C++ harness) through this module's
// ports. The DRAM is a sparse store in C++ (dram.cpp, through DPI-C): pages of words
// allocated at their first write, so the address space (WORDS words) costs nothing a
// run does not touch. It is never accessed word by word from the host, and never
// whole: a pulse on `dram_load` zeroes the memory and reads the file named by the
// +DRAM_IN=<path> plusarg, which holds only the regions a run uses, each after an
// `@<hex word address>` line; a pulse on `dram_dump` writes the `dram_count` words
// from `dram_first` to +DRAM_OUT=<path>. Both act at a rising clock edge.
// File format: that of $readmemh / $writememh, one word per line in hex; byte p of a
// word is bits [8p+7:8p].
//
// The memory reads synchronously (data the cycle after `mem_re`, as the chip expects)
// and ignores addresses at or beyond WORDS: the chip reports such accesses as faults,
// the model only has to survive them.

`default_nettype none

module sim_top #(
    parameter integer WORDS     = 16384,  // DRAM words
    parameter integer WIDTH     = 64,     // bits per word (array rows x 8)
    parameter integer ADDR_BITS = 24
) (
    input  wire        clk,
    input  wire        rst,
    input  wire [4:0]  reg_addr,
    input  wire [31:0] reg_wdata,
    input  wire        reg_we,
    output wire [31:0] reg_rdata,
    output wire        irq,
    input  wire        dram_load,
    input  wire        dram_dump,
    input  wire [31:0] dram_first,   // words dumped by `dram_dump`
    input  wire [31:0] dram_count
);

    wire [ADDR_BITS-1:0] mem_addr;
    wire                 mem_re;
    reg  [WIDTH-1:0]     mem_rdata;
    wire                 mem_we;
    wire [WIDTH-1:0]     mem_wdata;

    systolica_chip chip (
        .clk       (clk),
        .rst       (rst),
        .reg_addr  (reg_addr),
        .reg_wdata (reg_wdata),
        .reg_we    (reg_we),
        .reg_rdata (reg_rdata),
        .irq       (irq),
        .mem_addr  (mem_addr),
        .mem_re    (mem_re),
        .mem_rdata (mem_rdata),
        .mem_we    (mem_we),
        .mem_wdata (mem_wdata)
    );

    import "DPI-C" function void systolica_dram_init(input int words, input int bits);
    import "DPI-C" function void systolica_dram_read(input int addr,
                                                     output bit [WIDTH-1:0] data);
    import "DPI-C" function void systolica_dram_write(input int addr,
                                                      input bit [WIDTH-1:0] data);
    import "DPI-C" function int systolica_dram_load(input string path);
    import "DPI-C" function int systolica_dram_dump(input string path, input int first,
                                                    input int count);

    wire in_range = {{(32-ADDR_BITS){1'b0}}, mem_addr} < WORDS;

    // Bulk load and dump. The file names are fixed for the simulator's lifetime; the
    // host rewrites the input file before each load pulse.
    string          dram_in_file;
    string          dram_out_file;
    bit             have_in, have_out;
    bit [WIDTH-1:0] word;

    initial begin
        have_in  = $value$plusargs("DRAM_IN=%s", dram_in_file) != 0;
        have_out = $value$plusargs("DRAM_OUT=%s", dram_out_file) != 0;
        mem_rdata = {WIDTH{1'b0}};
        systolica_dram_init(WORDS, WIDTH);
    end

    // Every access to the memory is in this one block, in this order (the chip's read
    // sees the word before its write of the same cycle).
    always @(posedge clk) begin
        if (mem_re) begin
            if (in_range)
                systolica_dram_read(mem_addr, word);
            else
                word = {WIDTH{1'b0}};
            mem_rdata <= word;
        end
        if (mem_we && in_range)
            systolica_dram_write(mem_addr, mem_wdata);
        if (dram_load) begin
            if (!have_in) begin
                void'(systolica_dram_load(""));      // zeroes the memory, reads nothing
                $display("sim_top: dram_load without +DRAM_IN=<file>");
            end else if (systolica_dram_load(dram_in_file) != 0)
                $display("sim_top: loading %s failed", dram_in_file);
        end
        if (dram_dump && dram_count != 0) begin
            if (!have_out)
                $display("sim_top: dram_dump without +DRAM_OUT=<file>");
            else if (systolica_dram_dump(dram_out_file, dram_first, dram_count) != 0)
                $display("sim_top: dumping to %s failed", dram_out_file);
        end
    end

endmodule

`default_nettype wire
