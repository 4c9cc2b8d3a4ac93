"""Independent NumPy reference of the NVFP4 and NF4 formats (for the tests).

NVFP4: 16-element blocks along K; each element an E2M1 code (element 2j in
the LOW nibble of byte j), one E4M3 block scale per block, one fp32 global
scale g: value = (e2m1 * scale) * g, computed in fp32 in that order."""
import numpy as np

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                np.float32)


def e4m3_decode(codes):
    """E4M3 (fn: no infinities, 0x7F/0xFF NaN) bytes -> float32."""
    c = np.asarray(codes, np.uint8).astype(np.int32)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = c & 0x7
    normal = (1.0 + m / 8.0) * np.exp2(e - 7.0)
    sub = (m / 8.0) * 2.0 ** -6
    v = sign * np.where(e == 0, sub, normal)
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return v.astype(np.float32)


def nvfp4_dequantize(qdata, scale, g, rows, k):
    """Linear-layout scales [rows, k/16] -> float32 [rows, k]."""
    q = np.asarray(qdata, np.uint8).reshape(rows, k // 2)
    codes = np.empty((rows, k), np.uint8)
    codes[:, 0::2] = q & 0xF
    codes[:, 1::2] = q >> 4
    e2m1 = E2M1[codes]
    s = np.repeat(e4m3_decode(np.asarray(scale).reshape(rows, k // 16)), 16, axis=1)
    return (e2m1 * s).astype(np.float32) * np.float32(g)


NF4_CODEBOOK = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023,
    1.0], np.float32)


def nf4_dequantize(qdata, absmax, n, blocksize):
    """NF4 (element 2j in the HIGH nibble) -> float32 [n]."""
    q = np.asarray(qdata, np.uint8)
    codes = np.empty(q.size * 2, np.uint8)
    codes[0::2] = q >> 4
    codes[1::2] = q & 0xF
    codes = codes[:n]
    scale = np.repeat(np.asarray(absmax, np.float32), blocksize)[:n]
    return (NF4_CODEBOOK[codes] * scale).astype(np.float32)
