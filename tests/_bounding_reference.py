"""A slow, independent reference of the contribution-bounding choice (tests only).

Written from the law in :mod:`hierdp.frontends._contributions`, unit by unit in Python,
with OpenSSL's ChaCha20 (``cryptography``) as the PRF instead of hierdp's compiled block
function: the rows of a unit in the order of their content hashes get places ``j``; place
``j`` gets 64-bit word ``j % 8`` of block ``j // 8`` under the bounding key with the nonce
``(0x646E62, hash(unit))``; the ``c`` rows of smallest (key, j) stay.
"""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from hierdp.frontends._contributions import content_hash, value_hash


def _block(key: np.ndarray, nonce: tuple[int, int, int], counter: int) -> bytes:
    key_bytes = struct.pack("<8I", *(int(w) & 0xFFFFFFFF for w in key))
    full = struct.pack("<4I", counter, *nonce)  # cryptography: 32-bit counter, then the RFC nonce
    return Cipher(algorithms.ChaCha20(key_bytes, full), None).encryptor().update(b"\0" * 64)


def kept_rows(df: pd.DataFrame, unit: str, c: int, key: np.ndarray, content: list[str]) -> np.ndarray:
    """A boolean mask over ``df``'s rows: the rows the bound keeps."""
    keep = np.ones(len(df), dtype=bool)
    units = df[unit].to_numpy(dtype=object)
    chash = content_hash(df, content)
    uhash = value_hash(df[unit])
    groups: dict[object, list[int]] = {}
    for i, u in enumerate(units):
        groups.setdefault(u, []).append(i)
    for rows in groups.values():
        if len(rows) <= c:
            continue
        rows = sorted(rows, key=lambda i: int(chash[i]))
        h = int(uhash[rows[0]])
        nonce = (0x646E62, h & 0xFFFFFFFF, h >> 32)
        keys = []
        for j in range(len(rows)):
            blk = _block(key, nonce, j // 8)
            keys.append((struct.unpack_from("<Q", blk, 8 * (j % 8))[0], j))
        for _, j in sorted(keys)[c:]:
            keep[rows[j]] = False
    return keep
