// Simulation top: the chip plus a behavioural model of its external memory (DRAM).
//
// The register bus is driven from cocotb through this module's ports. The DRAM is
// never accessed word by word from Python, and never whole: a pulse on `dram_load`
// zeroes the memory and reads the file named by the +DRAM_IN=<path> plusarg
// ($readmemh), which holds only the regions a run uses, each after an `@<hex word
// address>` line; a pulse on `dram_dump` writes the `dram_count` words from
// `dram_first` to +DRAM_OUT=<path> ($writememh). Both act at a rising clock edge.
// File format: one word per line in hex; byte p of a word is bits [8p+7:8p].
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

    reg [WIDTH-1:0] mem [0:WORDS-1];

    wire in_range = {{(32-ADDR_BITS){1'b0}}, mem_addr} < WORDS;

    // Bulk load and dump. The file names are fixed for the simulator's lifetime; the
    // host rewrites the input file before each load pulse.
    reg [1023:0] dram_in_file;
    reg [1023:0] dram_out_file;
    reg          have_in, have_out;
    integer      i;

    initial begin
        have_in  = $value$plusargs("DRAM_IN=%s", dram_in_file) != 0;
        have_out = $value$plusargs("DRAM_OUT=%s", dram_out_file) != 0;
        mem_rdata = {WIDTH{1'b0}};
    end

    // Every access to `mem` is in this one block, in this order (the chip's read sees
    // the word before its write of the same cycle), so blocking writes are safe and
    // the bulk operations need no second process on the array.
    always @(posedge clk) begin
        if (mem_re)
            mem_rdata <= in_range ? mem[mem_addr] : {WIDTH{1'b0}};
        if (mem_we && in_range)
            mem[mem_addr] = mem_wdata;
        if (dram_load) begin
            for (i = 0; i < WORDS; i = i + 1)
                mem[i] = {WIDTH{1'b0}};
            if (have_in)
                $readmemh(dram_in_file, mem);
            else
                $display("sim_top: dram_load without +DRAM_IN=<file>");
        end
        if (dram_dump && dram_count != 0) begin
            if (have_out)
                $writememh(dram_out_file, mem, dram_first, dram_first + dram_count - 1);
            else
                $display("sim_top: dram_dump without +DRAM_OUT=<file>");
        end
    end

endmodule

`default_nettype wire
