"""CPython's `random.Random` draws, compiled: the same numbers from the same state, at native speed.

The original draws every choice of its pretraining data from one `random.Random`: the target
length, the sentence split, the random next document, the truncation side, the masking shuffle and
the fate of every masked token. To keep its records while losing the Python loop per draw, the
compiled instance maker (`compiled_instances`) draws from this twin of CPython's generator. The
state is CPython's own: `state_of(rng)` copies the 624 Mersenne Twister words and position out of a
`random.Random`, `restore(rng, state)` puts them back, so Python and compiled draws can alternate.

The draws are CPython 3's (Modules/_randommodule.c and Lib/random.py):
- `random()`: two 32-bit outputs `a`, `b`; `((a >> 5) * 2**26 + (b >> 6)) / 2**53`;
- `randbelow(n)`: `k = n.bit_length()`, then 32-bit outputs shifted right by `32 - k` until one is
  below `n` (`getrandbits(k)` with rejection; n below 2**32);
- `randint(a, b)`: `a + randbelow(b - a + 1)`;
- `shuffle(x)`: for `i` from `len(x) - 1` down to 1, swap `x[i]` with `x[randbelow(i + 1)]`.
`tests/test_compiled_pretraining.py` checks each against `random.Random` over many seeds.
"""
import random

import numpy as np

from bert_tf2.process import compiled

N, M = 624, 397
STATE_WORDS = N + 1  # the 624 words, then the position of the next one to temper
_MATRIX_A = 0x9908B0DF
_UPPER, _LOWER = 0x80000000, 0x7FFFFFFF
_MASK32 = 0xFFFFFFFF


def state_of(rng: random.Random) -> np.ndarray:
    """The generator's state as `STATE_WORDS` int64 values (a copy)."""
    version, words, _gauss = rng.getstate()
    if version != 3 or len(words) != STATE_WORDS:
        raise ValueError(f"unexpected random.Random state (version {version}, {len(words)} words)")
    return np.array(words, dtype=np.int64)


def restore(rng: random.Random, state: np.ndarray) -> None:
    """Set `rng` to `state`, as if it had made the draws itself."""
    rng.setstate((3, tuple(int(word) for word in state), None))


@compiled.njit()
def _twist(state):
    for kk in range(N - M):
        y = (state[kk] & _UPPER) | (state[kk + 1] & _LOWER)
        state[kk] = state[kk + M] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
    for kk in range(N - M, N - 1):
        y = (state[kk] & _UPPER) | (state[kk + 1] & _LOWER)
        state[kk] = state[kk + M - N] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
    y = (state[N - 1] & _UPPER) | (state[0] & _LOWER)
    state[N - 1] = state[M - 1] ^ (y >> 1) ^ (_MATRIX_A if y & 1 else 0)
    state[N] = 0


@compiled.njit()
def next_word(state) -> int:
    """The next tempered 32-bit output (`genrand_uint32`)."""
    if state[N] >= N:
        _twist(state)
    y = state[state[N]]
    state[N] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y & _MASK32


@compiled.njit()
def random_float(state) -> float:
    """`random.random()`."""
    a = next_word(state) >> 5
    b = next_word(state) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@compiled.njit()
def randbelow(state, n: int) -> int:
    """`random._randbelow(n)` for 1 <= n < 2**32 (one 32-bit output per try)."""
    k = 0  # n.bit_length(), by halving
    for step in (16, 8, 4, 2, 1):
        if n >> (k + step):
            k += step
    shift = 31 - k
    r = next_word(state) >> shift
    while r >= n:
        r = next_word(state) >> shift
    return r


@compiled.njit()
def randint(state, a: int, b: int) -> int:
    """`random.randint(a, b)`."""
    return a + randbelow(state, b - a + 1)


@compiled.njit()
def shuffle(state, values) -> None:
    """`random.shuffle(values)` in place."""
    for i in range(len(values) - 1, 0, -1):
        j = randbelow(state, i + 1)
        values[i], values[j] = values[j], values[i]
