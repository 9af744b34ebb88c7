// The external memory of sim_top.v: a sparse word store behind DPI-C calls.
//
// The chip's address space may be far larger than what a run uses (base: 2**24 words
// of 16 bytes, 256 MiB), so the memory is pages of PAGE_WORDS words, each allocated
// at the first write into it; a word of a page never written reads zero. A load
// drops every page (the memory reads zero) and reads a file of `@<hex word address>`
// records followed by words (firmware/dramfile.py writes them); a dump writes a word
// range, one word a line. Either way a run costs the words it moves, not the size of
// the memory.
//
// File format (that of $readmemh / $writememh): one word per line in hex, most
// significant digit first; bit 32k + j of a word is bit j of its DPI chunk k.

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "svdpi.h"

namespace {

constexpr unsigned PAGE_BITS = 12;
constexpr unsigned PAGE_WORDS = 1u << PAGE_BITS;

struct Dram {
    unsigned words = 0;       // the address space, in words
    unsigned bits = 0;        // bits per word
    unsigned chunks = 0;      // 32-bit chunks per word
    std::vector<std::unique_ptr<uint32_t[]>> pages;

    void init(unsigned w, unsigned b) {
        words = w;
        bits = b;
        chunks = (b + 31) / 32;
        pages.clear();
        pages.resize((static_cast<uint64_t>(w) + PAGE_WORDS - 1) >> PAGE_BITS);
    }

    void clear() {
        for (auto& p : pages) p.reset();
    }

    // The word at `addr` (below `words`), or null if its page was never written and
    // `make` is false.
    uint32_t* word(unsigned addr, bool make) {
        auto& page = pages[addr >> PAGE_BITS];
        if (!page) {
            if (!make) return nullptr;
            page.reset(new uint32_t[static_cast<size_t>(PAGE_WORDS) * chunks]());
        }
        return page.get() + static_cast<size_t>(addr & (PAGE_WORDS - 1)) * chunks;
    }
};

Dram dram;

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Word `text` (hex digits, most significant first) into `out` (chunks, zeroed first).
bool parse_word(const std::string& text, uint32_t* out) {
    std::memset(out, 0, sizeof(uint32_t) * dram.chunks);
    unsigned bit = 0;
    for (auto it = text.rbegin(); it != text.rend(); ++it, bit += 4) {
        const int d = hex_digit(*it);
        if (d < 0) return false;
        if (d && bit >= dram.bits) return false;            // wider than a word
        if (bit < 32 * dram.chunks) out[bit / 32] |= static_cast<uint32_t>(d) << (bit % 32);
    }
    return true;
}

}  // namespace

extern "C" void systolica_dram_init(int words, int bits) {
    dram.init(static_cast<unsigned>(words), static_cast<unsigned>(bits));
}

extern "C" void systolica_dram_read(int addr, svBitVecVal* data) {
    const uint32_t* w = dram.word(static_cast<unsigned>(addr), false);
    for (unsigned k = 0; k < dram.chunks; ++k) data[k] = w ? w[k] : 0;
}

extern "C" void systolica_dram_write(int addr, const svBitVecVal* data) {
    uint32_t* w = dram.word(static_cast<unsigned>(addr), true);
    for (unsigned k = 0; k < dram.chunks; ++k) w[k] = data[k];
    if (dram.bits % 32) w[dram.chunks - 1] &= (1u << (dram.bits % 32)) - 1;
}

// Zero the memory, then read `path`. Returns 0, or -1 (and says why) if the file
// cannot be read or holds a malformed word or an address past the memory.
extern "C" int systolica_dram_load(const char* path) {
    dram.clear();
    FILE* f = std::fopen(path, "r");
    if (!f) {
        std::fprintf(stderr, "sim_top: cannot read DRAM file %s\n", path);
        return -1;
    }
    std::vector<uint32_t> value(dram.chunks);
    uint64_t addr = 0;
    std::string token;
    int status = 0;
    auto take = [&]() {
        if (token.empty()) return;
        if (token[0] == '@') {
            addr = std::strtoull(token.c_str() + 1, nullptr, 16);
        } else if (addr >= dram.words || !parse_word(token, value.data())) {
            std::fprintf(stderr, "sim_top: %s: bad word %s at address %llu\n", path,
                         token.c_str(), static_cast<unsigned long long>(addr));
            status = -1;
        } else {
            bool zero = true;
            for (uint32_t c : value) zero = zero && !c;
            if (!zero || dram.word(static_cast<unsigned>(addr), false))
                std::memcpy(dram.word(static_cast<unsigned>(addr), true), value.data(),
                            sizeof(uint32_t) * dram.chunks);
            ++addr;
        }
        token.clear();
    };
    char buf[1 << 16];
    size_t n;
    bool comment = false;
    while (status == 0 && (n = std::fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < n && status == 0; ++i) {
            const char c = buf[i];
            if (c == '\n') comment = false;
            if (comment) continue;
            if (std::isspace(static_cast<unsigned char>(c))) {
                take();
            } else if (c == '/' && token == "/") {
                token.clear();
                comment = true;
            } else {
                token += c;
            }
        }
    }
    if (status == 0) take();
    std::fclose(f);
    return status;
}

// Words [first, first + count) into `path`, one a line. Returns 0, or -1.
extern "C" int systolica_dram_dump(const char* path, int first, int count) {
    FILE* f = std::fopen(path, "w");
    if (!f) {
        std::fprintf(stderr, "sim_top: cannot write DRAM file %s\n", path);
        return -1;
    }
    const unsigned digits = (dram.bits + 3) / 4;
    std::string line(digits + 1, '\n');
    static const char hex[] = "0123456789abcdef";
    const uint64_t end = static_cast<uint64_t>(static_cast<unsigned>(first)) +
                         static_cast<unsigned>(count);
    for (uint64_t a = static_cast<unsigned>(first); a < end; ++a) {
        const uint32_t* w = a < dram.words ? dram.word(static_cast<unsigned>(a), false)
                                           : nullptr;
        for (unsigned d = 0; d < digits; ++d) {
            const unsigned bit = 4 * (digits - 1 - d);
            line[d] = w ? hex[(w[bit / 32] >> (bit % 32)) & 15] : '0';
        }
        std::fwrite(line.data(), 1, line.size(), f);
    }
    return std::fclose(f) == 0 ? 0 : -1;
}
