#include "core/base/siphash.h"

#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

struct sip {
    uint64_t v0, v1, v2, v3;
};

static void rounds(struct sip *s, int n)
{
    for (int i = 0; i < n; i++) {
        s->v0 += s->v1;
        s->v1 = ROTL(s->v1, 13);
        s->v1 ^= s->v0;
        s->v0 = ROTL(s->v0, 32);
        s->v2 += s->v3;
        s->v3 = ROTL(s->v3, 16);
        s->v3 ^= s->v2;
        s->v0 += s->v3;
        s->v3 = ROTL(s->v3, 21);
        s->v3 ^= s->v0;
        s->v2 += s->v1;
        s->v1 = ROTL(s->v1, 17);
        s->v1 ^= s->v2;
        s->v2 = ROTL(s->v2, 32);
    }
}

uint64_t tg_siphash(const uint8_t key[16], const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t k0 = le64(key), k1 = le64(key + 8);
    struct sip s = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
                    k1 ^ 0x7465646279746573ULL};
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = le64(p + i);
        s.v3 ^= m;
        rounds(&s, 2);
        s.v0 ^= m;
    }
    uint8_t last[8] = {0};
    memcpy(last, p + whole, n % 8);
    uint64_t m = le64(last) | (uint64_t)n << 56;
    s.v3 ^= m;
    rounds(&s, 2);
    s.v0 ^= m;
    s.v2 ^= 0xff;
    rounds(&s, 4);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}
