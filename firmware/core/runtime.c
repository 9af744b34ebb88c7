/* memcpy and memset: clang emits calls to them for struct copies and zeroing even in a
 * freestanding build. Word loops when both ends are aligned, bytes otherwise. */
#include "runtime.h"

void *memcpy(void *restrict dst, const void *restrict src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    if ((((uintptr_t)d | (uintptr_t)s) & 3) == 0) {
        for (; n >= 4; n -= 4, d += 4, s += 4)
            *(uint32_t *)d = *(const uint32_t *)s;
    }
    while (n--)
        *d++ = *s++;
    return dst;
}

void *memset(void *dst, int c, size_t n)
{
    unsigned char *d = dst;
    uint32_t word = (unsigned char)c * 0x01010101u;
    while (n && ((uintptr_t)d & 3)) {
        *d++ = (unsigned char)c;
        n--;
    }
    for (; n >= 4; n -= 4, d += 4)
        *(uint32_t *)d = word;
    while (n--)
        *d++ = (unsigned char)c;
    return dst;
}
