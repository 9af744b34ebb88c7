// A plain C++ harness for sim_top.v: the same Verilog as the cocotb testbench, driven
// without Python, to measure what the Verilated model alone costs and to run long jobs.
//
//   sim_top_cxx +DRAM_IN=<hex> +DRAM_OUT=<hex> <script>
//
// The script (written by systolica.sim.cxxsim) is one command a line; the register map
// stays in Python, the harness only moves the top's ports:
//
//   reset <cycles>          hold rst for that many rising edges
//   load                    pulse dram_load: zero the DRAM, read the +DRAM_IN file
//                           (only the regions a job uses, `@address` records)
//   dump <first> <count> <path>
//                           pulse dram_dump for words [first, first + count) and
//                           move the +DRAM_OUT file they were written to to <path>
//   write <reg> <value>     one register write (set on a falling edge, taken on the rise)
//   mark                    start the measured window: cycle count and wall clock
//   wait <cycles>           clock until irq is high or the cycles have passed
//   until <reg> <value> <cycles>
//                           clock until register <reg> reads <value> or more, irq is
//                           high or the cycles have passed (the counters sampled while
//                           the chip runs: <reg> is its cycle counter)
//   read <name> <reg>       print "<name> <value>"
//   progress <path> <label> from now on, while clocking in `wait` and `until`, rewrite
//                           <path> a few times a second with "<label> <cycles since
//                           mark>" (how far a long run has got, for the host to show)
//
// `wait` prints "irq <0|1>", "sim_cycles <n>" (rising edges since `mark`),
// "start_cycle <n>" and "wall_s <seconds>". Any other line is an error (exit 2).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "Vtop.h"
#include "verilated.h"

namespace {

using Clock = std::chrono::steady_clock;

// How far a run has got, written to a file a few times a second (`progress`).
struct Progress {
    std::string path, label;
    Clock::time_point last = Clock::now();

    // Called every cycle; looks at the wall clock every 4096 cycles only (`force`:
    // write whatever the time).
    void tick(unsigned long long cycles, bool force = false) {
        if (path.empty() || (!force && (cycles & 4095) != 0)) return;
        const Clock::time_point now = Clock::now();
        if (!force && now - last < std::chrono::milliseconds(200)) return;
        last = now;
        const std::string part = path + ".part";
        if (FILE* f = std::fopen(part.c_str(), "w")) {
            std::fprintf(f, "%s %llu\n", label.c_str(), cycles);
            std::fclose(f);
            std::rename(part.c_str(), path.c_str());
        }
    }
};

struct Chip {
    VerilatedContext* ctx;
    Vtop* top;
    unsigned long long cycle = 0;

    // One full clock period: rising edge (registers take the inputs), falling edge.
    void tick() {
        top->clk = 1;
        ctx->timeInc(5000);
        top->eval();
        top->clk = 0;
        ctx->timeInc(5000);
        top->eval();
        ++cycle;
    }
};

}  // namespace

int main(int argc, char** argv) {
    const std::unique_ptr<VerilatedContext> ctx{new VerilatedContext};
    ctx->commandArgs(argc, argv);
    const char* script_path = nullptr;
    for (int i = 1; i < argc; ++i)
        if (argv[i][0] != '+') script_path = argv[i];
    if (!script_path) {
        std::fprintf(stderr, "usage: %s +DRAM_IN=<hex> +DRAM_OUT=<hex> <script>\n", argv[0]);
        return 2;
    }
    std::ifstream script(script_path);
    if (!script) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], script_path);
        return 2;
    }

    const std::unique_ptr<Vtop> top{new Vtop{ctx.get(), "TOP"}};
    Chip chip{ctx.get(), top.get()};
    top->clk = 0;
    top->rst = 1;
    top->reg_addr = 0;
    top->reg_wdata = 0;
    top->reg_we = 0;
    top->dram_load = 0;
    top->dram_dump = 0;
    top->dram_first = 0;
    top->dram_count = 0;
    top->eval();
    const char* dram_out = ctx->commandArgsPlusMatch("DRAM_OUT=");
    const std::string dram_out_path =
        *dram_out ? std::string(dram_out + std::strlen("+DRAM_OUT=")) : std::string();

    unsigned long long mark_cycle = 0;
    auto mark_wall = Clock::now();
    Progress progress;
    std::string line;
    int number = 0;
    while (std::getline(script, line)) {
        ++number;
        std::istringstream in(line);
        std::string cmd;
        if (!(in >> cmd)) continue;
        if (cmd == "reset") {
            unsigned cycles = 0;
            in >> cycles;
            top->rst = 1;
            for (unsigned i = 0; i < cycles; ++i) chip.tick();
            top->rst = 0;
        } else if (cmd == "load") {
            top->dram_load = 1;
            chip.tick();
            top->dram_load = 0;
        } else if (cmd == "dump") {
            unsigned long first = 0, count = 0;
            std::string path;
            in >> first >> count >> std::ws;
            std::getline(in, path);     // the rest of the line: a path may hold spaces
            if (path.empty() || dram_out_path.empty()) {
                std::fprintf(stderr, "%s:%d: dump needs <first> <count> <path> and "
                             "+DRAM_OUT=<file>\n", script_path, number);
                return 2;
            }
            top->dram_first = first;
            top->dram_count = count;
            top->dram_dump = 1;
            chip.tick();
            top->dram_dump = 0;
            if (std::rename(dram_out_path.c_str(), path.c_str()) != 0) {
                std::fprintf(stderr, "%s:%d: cannot move %s to %s\n", script_path, number,
                             dram_out_path.c_str(), path.c_str());
                return 2;
            }
        } else if (cmd == "write") {
            unsigned long reg = 0, value = 0;
            in >> reg >> value;
            top->reg_addr = reg;
            top->reg_wdata = value;
            top->reg_we = 1;
            chip.tick();
            top->reg_we = 0;
        } else if (cmd == "mark") {
            mark_cycle = chip.cycle;
            mark_wall = Clock::now();
        } else if (cmd == "progress") {
            in >> progress.path >> progress.label;
        } else if (cmd == "wait") {
            unsigned long long limit = 0;
            in >> limit;
            for (unsigned long long i = 0; i < limit && !top->irq; ++i) {
                chip.tick();
                progress.tick(chip.cycle - mark_cycle);
            }
            progress.tick(chip.cycle - mark_cycle, true);
            const std::chrono::duration<double> wall = Clock::now() - mark_wall;
            std::printf("irq %d\nsim_cycles %llu\nstart_cycle %llu\nwall_s %.6f\n",
                        top->irq ? 1 : 0, chip.cycle - mark_cycle, mark_cycle,
                        wall.count());
        } else if (cmd == "until") {
            unsigned long reg = 0, value = 0;
            unsigned long long limit = 0;
            in >> reg >> value >> limit;
            top->reg_addr = reg;
            top->eval();
            for (unsigned long long i = 0; i < limit && !top->irq && top->reg_rdata < value;
                 ++i) {
                chip.tick();
                progress.tick(chip.cycle - mark_cycle);
            }
        } else if (cmd == "read") {
            std::string name;
            unsigned long reg = 0;
            in >> name >> reg;
            top->reg_addr = reg;
            top->eval();
            std::printf("%s %lu\n", name.c_str(), (unsigned long)top->reg_rdata);
        } else {
            std::fprintf(stderr, "%s:%d: unknown command %s\n", script_path, number,
                         cmd.c_str());
            return 2;
        }
    }
    top->final();
    return 0;
}
