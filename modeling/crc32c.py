"""CRC-32C (Castagnoli), masked as TensorFlow masks it: the checksums inside TFRecord frames and
TF1 checkpoints (`data_gen.tfrecord_frames`, `modeling.tensor_bundle`), compiled.

Masking is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (mod 2**32), as in TensorFlow's
`crc32c::Mask`. Slicing-by-8 tables, so that a checkpoint's hundreds of MB are summed at memory
speed.
"""
import numpy as np

from bert_tf2.process import compiled

_POLYNOMIAL = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_MASK_DELTA = 0xA282EAD8


def _table() -> np.ndarray:
    """Slicing-by-8 tables: `table[k][b]` is the CRC of byte b followed by k zero bytes."""
    table = np.zeros((8, 256), dtype=np.int64)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLYNOMIAL if crc & 1 else 0)
        table[0, byte] = crc
    for k in range(1, 8):
        for byte in range(256):
            previous = int(table[k - 1, byte])
            table[k, byte] = (previous >> 8) ^ int(table[0, previous & 0xFF])
    return table


_TABLE = _table()


@compiled.njit()
def crc32c(data, start, end, table) -> int:
    """CRC-32C of `data[start:end]` (a uint8 array)."""
    crc = 0xFFFFFFFF
    i = start
    while i + 8 <= end:
        low = crc ^ (np.int64(data[i]) | (np.int64(data[i + 1]) << 8)
                     | (np.int64(data[i + 2]) << 16) | (np.int64(data[i + 3]) << 24))
        crc = (table[7, low & 0xFF] ^ table[6, (low >> 8) & 0xFF]
               ^ table[5, (low >> 16) & 0xFF] ^ table[4, low >> 24]
               ^ table[3, data[i + 4]] ^ table[2, data[i + 5]]
               ^ table[1, data[i + 6]] ^ table[0, data[i + 7]])
        i += 8
    while i < end:
        crc = table[0, (crc ^ data[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ 0xFFFFFFFF


@compiled.njit()
def masked_crc32c(data, start, end, table) -> int:
    crc = crc32c(data, start, end, table)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def table() -> np.ndarray:
    """The slicing-by-8 tables, for compiled callers."""
    return _TABLE


def masked(data: bytes) -> int:
    """The masked CRC-32C of `data`."""
    return int(masked_crc32c(np.frombuffer(data, dtype=np.uint8), 0, len(data), _TABLE))
