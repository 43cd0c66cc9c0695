// The rank's own kernels (sandbox/rank/device_kernels.py compiles them with NVRTC):
// - kloop_leaf_sha256: SHA-256 of every leaf of a byte buffer, one thread a leaf, the device side of
//   sandbox/rank/commitment.py's tree digest. Leaf i is bytes [i * leaf_bytes, (i + 1) * leaf_bytes)
//   except the last, which holds `tail` bytes (1..leaf_bytes). Its 32-byte digest is written to
//   out + 32 * i, in the byte order of hashlib's digest(). `data` is 16-byte aligned and leaf_bytes a
//   multiple of 64.
// - kloop_mask_chacha20: a buffer XORed in place with a ChaCha20 keystream (RFC 8439), 64 bytes a
//   thread, the device side of sandbox/rank/input_mask.py.
// With KLOOP_HOST_BUILD defined the same functions are built for the host, so that they can be checked
// against hashlib and a ChaCha20 of record where there is no GPU (tests/sandbox/rank/test_commitment.py,
// test_input_mask.py).

#ifndef KLOOP_HOST_BUILD
#define KLOOP_HD __device__ __forceinline__
#define KLOOP_CONST __constant__
typedef uint4 kloop_u4;
#else
#define KLOOP_HD static inline
#define KLOOP_CONST static const
typedef struct { unsigned int x, y, z, w; } kloop_u4;
#endif

KLOOP_CONST unsigned int kloop_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

KLOOP_HD unsigned int kloop_rotr(unsigned int x, int n) { return (x >> n) | (x << (32 - n)); }

KLOOP_HD unsigned int kloop_bswap(unsigned int x) {
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

// One 64-byte block, w[] as big-endian words (the schedule is rolled in place).
KLOOP_HD void kloop_compress(unsigned int h[8], unsigned int w[16]) {
    unsigned int a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        unsigned int wi;
        if (i < 16) {
            wi = w[i];
        } else {
            unsigned int x = w[(i + 1) & 15], y = w[(i + 14) & 15];
            unsigned int s0 = kloop_rotr(x, 7) ^ kloop_rotr(x, 18) ^ (x >> 3);
            unsigned int s1 = kloop_rotr(y, 17) ^ kloop_rotr(y, 19) ^ (y >> 10);
            wi = w[i & 15] = w[i & 15] + s0 + w[(i + 9) & 15] + s1;
        }
        unsigned int t1 = k + (kloop_rotr(e, 6) ^ kloop_rotr(e, 11) ^ kloop_rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                          kloop_sha256_k[i] + wi;
        unsigned int t2 = (kloop_rotr(a, 2) ^ kloop_rotr(a, 13) ^ kloop_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

// SHA-256 of `len` bytes at `p` (16-byte aligned), written big-endian to `out`. A block's 64 bytes
// are read as four 16-byte words.
KLOOP_HD void kloop_sha256(const unsigned char* p, unsigned int len, unsigned char* out) {
    unsigned int h[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                         0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    unsigned int w[16];
    const kloop_u4* quads = (const kloop_u4*)p;
    unsigned int full = len / 64;
    for (unsigned int block = 0; block < full; ++block) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            kloop_u4 v = quads[block * 4 + q];
            w[4 * q] = kloop_bswap(v.x);
            w[4 * q + 1] = kloop_bswap(v.y);
            w[4 * q + 2] = kloop_bswap(v.z);
            w[4 * q + 3] = kloop_bswap(v.w);
        }
        kloop_compress(h, w);
    }
    // the rest, the 0x80 byte, zeros and the bit length: one block, or two when the rest is 56 bytes or more
    unsigned int rest = len - full * 64;
    const unsigned char* tail = p + full * 64;
    unsigned long long bits = (unsigned long long)len * 8ull;
    for (unsigned int block = 0; block < (rest >= 56 ? 2u : 1u); ++block) {
        for (int i = 0; i < 16; ++i) {
            unsigned int word = 0;
            for (int j = 0; j < 4; ++j) {
                unsigned int at = block * 64 + i * 4 + j;
                unsigned int byte = at < rest ? tail[at] : (at == rest ? 0x80u : 0u);
                word = (word << 8) | byte;
            }
            w[i] = word;
        }
        if (block == (rest >= 56 ? 1u : 0u)) {
            w[14] = (unsigned int)(bits >> 32);
            w[15] = (unsigned int)bits;
        }
        kloop_compress(h, w);
    }
    for (int i = 0; i < 8; ++i) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

// ChaCha20's block function (RFC 8439 2.3): 16 keystream words from the key, a block counter and a
// 3-word nonce.
KLOOP_HD unsigned int kloop_rotl(unsigned int x, int n) { return (x << n) | (x >> (32 - n)); }

KLOOP_HD void kloop_quarter(unsigned int* x, int a, int b, int c, int d) {
    x[a] += x[b]; x[d] = kloop_rotl(x[d] ^ x[a], 16);
    x[c] += x[d]; x[b] = kloop_rotl(x[b] ^ x[c], 12);
    x[a] += x[b]; x[d] = kloop_rotl(x[d] ^ x[a], 8);
    x[c] += x[d]; x[b] = kloop_rotl(x[b] ^ x[c], 7);
}

KLOOP_HD void kloop_chacha20_block(const unsigned int* key, unsigned int counter, unsigned int n0, unsigned int n1,
                                   unsigned int n2, unsigned int* out) {
    unsigned int s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, key[0], key[1], key[2], key[3],
                          key[4], key[5], key[6], key[7], counter, n0, n1, n2};
    unsigned int x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = s[i];
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        kloop_quarter(x, 0, 4, 8, 12); kloop_quarter(x, 1, 5, 9, 13); kloop_quarter(x, 2, 6, 10, 14); kloop_quarter(x, 3, 7, 11, 15);
        kloop_quarter(x, 0, 5, 10, 15); kloop_quarter(x, 1, 6, 11, 12); kloop_quarter(x, 2, 7, 8, 13); kloop_quarter(x, 3, 4, 9, 14);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = x[i] + s[i];
}

// Block `block` (bytes [64 * block, 64 * block + 64) of `bytes`) XORed with keystream block `block` of
// nonce (stream, block >> 32, 0): the keystream's bytes are its words little-endian, as RFC 8439's.
KLOOP_HD void kloop_mask_block(unsigned char* data, unsigned long long bytes, const unsigned int* key, unsigned int stream,
                               unsigned long long block) {
    unsigned int ks[16];
    kloop_chacha20_block(key, (unsigned int)block, stream, (unsigned int)(block >> 32), 0u, ks);
    unsigned long long start = block * 64ull;
    unsigned long long n = bytes - start < 64ull ? bytes - start : 64ull;
    unsigned char* p = data + start;
    if (n == 64ull && ((unsigned long long)p & 15ull) == 0ull) {
        kloop_u4* quads = (kloop_u4*)p;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            kloop_u4 v = quads[q];
            v.x ^= ks[4 * q]; v.y ^= ks[4 * q + 1]; v.z ^= ks[4 * q + 2]; v.w ^= ks[4 * q + 3];
            quads[q] = v;
        }
    } else {
        for (unsigned long long i = 0; i < n; ++i) p[i] ^= (unsigned char)(ks[i / 4] >> (8 * (i % 4)));
    }
}

#ifndef KLOOP_HOST_BUILD
extern "C" __global__ void kloop_leaf_sha256(const unsigned char* data, int leaves, int leaf_bytes, int tail,
                                             unsigned char* out) {
    int leaf = blockIdx.x * blockDim.x + threadIdx.x;
    if (leaf >= leaves) return;
    unsigned int len = leaf == leaves - 1 ? (unsigned int)tail : (unsigned int)leaf_bytes;
    kloop_sha256(data + (unsigned long long)leaf * (unsigned long long)leaf_bytes, len, out + 32ull * leaf);
}

extern "C" __global__ void kloop_mask_chacha20(unsigned char* data, unsigned long long bytes, unsigned int k0, unsigned int k1,
                                               unsigned int k2, unsigned int k3, unsigned int k4, unsigned int k5,
                                               unsigned int k6, unsigned int k7, unsigned int stream) {
    unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (block * 64ull >= bytes) return;
    unsigned int key[8] = {k0, k1, k2, k3, k4, k5, k6, k7};
    kloop_mask_block(data, bytes, key, stream, block);
}
#else
extern "C" void kloop_leaf_sha256_host(const unsigned char* data, int leaves, int leaf_bytes, int tail,
                                       unsigned char* out) {
    for (int leaf = 0; leaf < leaves; ++leaf) {
        unsigned int len = leaf == leaves - 1 ? (unsigned int)tail : (unsigned int)leaf_bytes;
        kloop_sha256(data + (unsigned long long)leaf * (unsigned long long)leaf_bytes, len, out + 32ull * leaf);
    }
}

extern "C" void kloop_mask_chacha20_host(unsigned char* data, unsigned long long bytes, const unsigned int* key,
                                         unsigned int stream) {
    for (unsigned long long block = 0; block * 64ull < bytes; ++block) kloop_mask_block(data, bytes, key, stream, block);
}
#endif
