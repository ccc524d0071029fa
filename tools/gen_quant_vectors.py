#!/usr/bin/env python3
"""gen_quant_vectors.py - generate the quantization test vectors in tests/data/quant/.

The expected values come from the `gguf` Python package's reference implementation (gguf.quants), so the
C tests (tests/test_quant_dequant.c, tests/test_quant_quantize.c) compare Kiln against code someone else
wrote. CI reads the committed files and never needs Python.

    pip install gguf numpy
    python3 tools/gen_quant_vectors.py [--out tests/data/quant] [--seed 4]

Files (all little-endian):
  dequant_<type>.bin   "KQDV", u32 version = 1, u32 ggml type, u32 n_blocks, u32 block_elems,
                       u32 block_bytes, then n_blocks raw blocks, then n_blocks u64 checksums of the
                       float32 values gguf.quants.dequantize produces for each block (see block_checksum).
  quantize_input.bin   "KQQI", u32 version = 1, u32 n_values, then n_values float32 (32-element blocks of
                       many distributions: gaussian at scales 1e-6..1e4, uniform, zero, constant, one
                       outlier, all positive, exact rounding ties, large values whose fp16 scale overflows).
  quantize_<type>.bin  "KQQV", u32 version = 1, u32 ggml type, u32 n_blocks, u32 block_elems,
                       u32 block_bytes, then the bytes gguf.quants.quantize produces from quantize_input
                       (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4).
  quantize_<type>.bin  the same format for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, which
                       gguf.quants cannot quantize: the bytes come from llama.cpp's own reference
                       quantizers (quantize_row_*_ref, quantize_iq4_nl/xs with no importance matrix) in
                       the libggml-base.so that the llama-cpp-python package ships, called through ctypes.
                       Without that package these files are left as they are (a warning says so).

Dequantization blocks are random bytes whose scale fields are then chosen to cover the whole half-float
range: ordinary values of every exponent, the extremes (0, -0, the smallest subnormal, the largest
subnormal, the smallest normal, +-65504) and a few fully random bit patterns (infinities and NaNs
included). Q8_K is not implemented by gguf.quants; its expected values are computed here with numpy
following ggml's dequantize_row_q8_K (y = d * q in float32), and that is said in the test.
"""
import argparse
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

MASK64 = (1 << 64) - 1


def splitmix64(x):
    """The splitmix64 finalizer; the C test computes the same per-position multipliers."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def block_checksum(values):
    """values: (n_blocks, block_elems) float32. Per block, sum over i of bits(v_i) * (splitmix64(i) | 1)
    modulo 2^64, with every NaN replaced by 0x7fc00000 first. Any single changed value changes the sum."""
    bits = values.view(np.uint32).astype(np.uint64)
    bits = np.where(np.isnan(values), np.uint64(0x7FC00000), bits)
    mult = np.array([splitmix64(i) | 1 for i in range(values.shape[1])], dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (bits * mult).sum(axis=1, dtype=np.uint64)


EXTREME_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]


def random_f16(rng, n):
    """n half-float bit patterns: 75% ordinary values of any exponent, 18% extremes, 7% fully random."""
    out = np.empty(n, dtype=np.uint16)
    kind = rng.random(n)
    ordinary = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    ordinary = (ordinary & 0x83FF) | (rng.integers(0, 31, n, dtype=np.uint16) << 10)  # exponent 0..30
    out[:] = ordinary
    ext = kind >= 0.75
    out[ext] = rng.choice(np.array(EXTREME_F16, dtype=np.uint16), int(ext.sum()))
    wild = kind >= 0.93
    out[wild] = rng.integers(0, 1 << 16, int(wild.sum()), dtype=np.uint16)
    return out


def random_f32(rng, n):
    """n single-float bit patterns for Q8_K's scale, with the same mix of ordinary, extreme and wild."""
    extremes = np.array([0, 0x80000000, 1, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000,
                         0x7F800000, 0x7FC00000], dtype=np.uint32)
    ordinary = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    ordinary = (ordinary & np.uint32(0x807FFFFF)) | (rng.integers(0, 255, n).astype(np.uint32) << 23)
    kind = rng.random(n)
    ordinary[kind >= 0.8] = rng.choice(extremes, int((kind >= 0.8).sum()))
    return ordinary


# ggml type -> (byte offsets of fp16 scale fields inside a block)
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0], T.MXFP4: [],
}
BLOCKS = {T.Q2_K: 1024, T.Q3_K: 1024, T.Q4_K: 1024, T.Q5_K: 1024, T.Q6_K: 1024, T.IQ4_XS: 1024, T.Q8_K: 512}
SIZES = {T.Q8_K: (256, 292)}


def header(magic, *fields):
    return magic + struct.pack("<%dI" % (len(fields) + 1), 1, *fields)


def dequant_vectors(rng, qtype):
    elems, nbytes = SIZES.get(qtype) or quants.GGML_QUANT_SIZES[qtype]
    n = BLOCKS.get(qtype, 2048)
    blocks = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    if qtype == T.Q8_K:
        blocks[:, 0:4] = random_f32(rng, n).view(np.uint8).reshape(n, 4)
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        with np.errstate(all="ignore"):
            values = (d * q).astype(np.float32)
    else:
        for off in F16_FIELDS[qtype]:
            blocks[:, off:off + 2] = random_f16(rng, n).view(np.uint8).reshape(n, 2)
        with np.errstate(all="ignore"):
            values = quants.dequantize(blocks, qtype).reshape(n, elems).astype(np.float32)
    return header(b"KQDV", int(qtype), n, elems, nbytes) + blocks.tobytes() + block_checksum(values).tobytes()


def quantize_input(rng, n_blocks=2048):
    x = np.empty((n_blocks, 32), dtype=np.float32)
    for i in range(n_blocks):
        kind = i % 9
        if kind == 0:
            v = rng.standard_normal(32) * 10.0 ** rng.uniform(-6, 4)
        elif kind == 1:
            a = 10.0 ** rng.uniform(-3, 3)
            v = rng.uniform(-a, a, 32)
        elif kind == 2:
            v = np.zeros(32)
        elif kind == 3:
            v = np.full(32, rng.choice([-1, 1]) * 10.0 ** rng.uniform(-4, 4))
        elif kind == 4:
            v = rng.standard_normal(32) * 0.01
            v[rng.integers(0, 32)] = rng.choice([-1, 1]) * rng.uniform(5, 50)
        elif kind == 5:
            v = rng.uniform(0.5, 2.0, 32) * 10.0 ** rng.uniform(-2, 2)
        elif kind == 6:  # exact halves after scaling: amax 127 (Q8_0 d = 1) or 8 (Q4_0 id = -1)
            if rng.random() < 0.5:
                v = rng.integers(-126, 126, 32) + 0.5
                v[0] = 127.0
            else:
                v = rng.integers(-16, 16, 32) / 2.0
                v[0] = -8.0
        elif kind == 7:
            v = rng.standard_normal(32) * 10.0 ** rng.uniform(4, 6)  # fp16 scale may overflow to inf
        else:
            v = rng.standard_normal(32) * 1e-30
        x[i] = v.astype(np.float32)
    return x


def llama_cpp_quantizer(lib, qtype):
    """A function (x float32 array) -> bytes, using libggml-base's reference quantizer for qtype."""
    import ctypes
    name = qtype.name.lower().replace("_k", "_K")
    if qtype in (T.IQ4_NL, T.IQ4_XS):
        fn = getattr(lib, "quantize_" + name)
        fn.restype = ctypes.c_size_t
    else:
        fn = getattr(lib, "quantize_row_%s_ref" % name)
    elems, nbytes = SIZES.get(qtype) or quants.GGML_QUANT_SIZES[qtype]

    def run(x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.size // elems * nbytes, dtype=np.uint8)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
        if qtype in (T.IQ4_NL, T.IQ4_XS):
            fn(ptr(x), ptr(out), ctypes.c_int64(1), ctypes.c_int64(x.size), None)
        else:
            fn(ptr(x), ptr(out), ctypes.c_int64(x.size))
        return out.tobytes()
    return run


def load_ggml():
    try:
        import ctypes
        import llama_cpp
        return ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    except (ImportError, OSError) as e:
        print("warning: llama-cpp-python not usable (%s): K-quant/IQ4 quantize vectors left unchanged" % e)
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant"))
    ap.add_argument("--seed", type=int, default=4)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    total = 0
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K,
                  T.IQ4_NL, T.IQ4_XS, T.MXFP4]:
        data = dequant_vectors(rng, qtype)
        with open(os.path.join(args.out, "dequant_%s.bin" % qtype.name.lower()), "wb") as f:
            f.write(data)
        total += len(data)
    x = quantize_input(rng)
    data = header(b"KQQI", x.size) + x.tobytes()
    with open(os.path.join(args.out, "quantize_input.bin"), "wb") as f:
        f.write(data)
    total += len(data)
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4]:
        elems, nbytes = quants.GGML_QUANT_SIZES[qtype]
        with np.errstate(all="ignore"):
            q = quants.quantize(x, qtype)
        data = header(b"KQQV", int(qtype), x.shape[0], elems, nbytes) + q.tobytes()
        with open(os.path.join(args.out, "quantize_%s.bin" % qtype.name.lower()), "wb") as f:
            f.write(data)
        total += len(data)
    ggml = load_ggml()
    for qtype in ([T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS] if ggml else []):
        elems, nbytes = SIZES.get(qtype) or quants.GGML_QUANT_SIZES[qtype]
        q = llama_cpp_quantizer(ggml, qtype)(x.ravel())
        data = header(b"KQQV", int(qtype), x.size // elems, elems, nbytes) + q
        with open(os.path.join(args.out, "quantize_%s.bin" % qtype.name.lower()), "wb") as f:
            f.write(data)
        total += len(data)
    print("wrote %d bytes of vectors to %s" % (total, os.path.normpath(args.out)))


if __name__ == "__main__":
    main()
