"""Go's math/rand generator (the Go 1.x global source, as the FGD paper's
simulator seeds it with rand.Seed), so that bench/openb/make-arrivals draws
the very arrival sequences of the paper's experiments.

The source is an additive lagged Fibonacci generator,

    x[n] = x[n-607] + x[n-273]  (mod 2^64),

whose 607 words of state Seed fills from a Park-Miller sequence of the
seed, each word XORed with a fixed "cooked" word. Go defines the cooked
words as the generator's own state after 7.8e12 steps from its
srand(1) set-up; rather than carry 607 constants, cooked_words() computes
them with a jump ahead: x^N mod (x^607 - x^334 - 1), coefficients mod
2^64, gives x[N] as a linear combination of the 607 first words (about
30 ms with numpy). tests/bench/make_arrivals_test.py checks the result
against the five shipped sequences of the default trace, word for word.

What the simulator calls, and how each draws from the source:
  Int()       one Int63;
  Intn(n)     n < 2^31: Int31n, rejection of the top of Int31's range;
  Shuffle(n)  Fisher-Yates from the end, each index by Lemire's
              multiply-shift on Uint32 with rejection.
"""
import numpy

LAGS = (607, 273)
_LONG, _SHORT = LAGS
_MASK64 = (1 << 64) - 1
_PARK_MILLER = 2**31 - 1
_COOKING_STEPS = 7_800_000_000_000


def _park_miller(x):
    """Go's seedrand: x * 48271 mod (2^31 - 1), by Schrage's method."""
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _PARK_MILLER if x < 0 else x


def _park_miller_words(seed, high, mid):
    """607 words from the Park-Miller sequence of `seed` (20 values skipped
    first), each three values shifted left by `high`, `mid` and 0 bits and
    XORed together: Go's seeding of the source's state."""
    words, x = [0] * _LONG, seed
    for i in range(-20, _LONG):
        x = _park_miller(x)
        if i >= 0:
            u = x << high
            x = _park_miller(x)
            u ^= x << mid
            x = _park_miller(x)
            words[i] = (u ^ x) & _MASK64
    return words


def _srand_words():
    """The state Go's cooking program starts from (its srand(1))."""
    return _park_miller_words(1, 20, 10)


def _mul_mod(a, b):
    """a * b mod (x^607 - x^334 - 1), coefficients as uint64 (wrapping)."""
    full = numpy.convolve(a, b)
    for d in range(len(full) - 1, _LONG - 1, -1):
        c = full[d]
        if c:
            # x^d = x^(d-607) (x^334 + 1)
            full[d - _SHORT] += c
            full[d - _LONG] += c
    return full[:_LONG].copy()


def _x_power(n):
    result = numpy.zeros(_LONG, dtype=numpy.uint64)
    result[0] = 1
    base = numpy.zeros(_LONG, dtype=numpy.uint64)
    base[1] = 1
    while n:
        if n & 1:
            result = _mul_mod(result, base)
        base = _mul_mod(base, base)
        n >>= 1
    return result


def advance(words, steps):
    """The state `steps` steps after `words` (tap and feed back at the start).

    Position p of the state is written at the steps n = 334 - p (mod 607),
    so the state holds the sequence's last 607 terms, x[steps-606..steps],
    where x[-606..0] are the first words in the order they are read.
    """
    first = [0] * _LONG
    for p in range(_LONG):
        first[(_LONG - _SHORT - 1 - p) % _LONG] = words[p]
    first = numpy.array(first, dtype=numpy.uint64)
    poly = _x_power(steps)
    terms = {}
    for k in range(steps, steps + _LONG):
        terms[k - (_LONG - 1)] = int(numpy.dot(poly, first)) & _MASK64
        top = poly[_LONG - 1]
        poly = numpy.concatenate((numpy.zeros(1, dtype=numpy.uint64), poly[:-1]))
        if top:
            poly[0] += top
            poly[_LONG - _SHORT] += top
    return [terms[steps - ((steps - (_LONG - _SHORT - p)) % _LONG)] for p in range(_LONG)]


def step(words, steps):
    """The same, one step at a time (for tests of advance)."""
    words, tap, feed = list(words), 0, _LONG - _SHORT
    for _ in range(steps):
        tap, feed = (tap - 1) % _LONG, (feed - 1) % _LONG
        words[feed] = (words[feed] + words[tap]) & _MASK64
    return words


_cooked = None


def cooked_words():
    global _cooked
    if _cooked is None:
        with numpy.errstate(over="ignore"):
            _cooked = advance(_srand_words(), _COOKING_STEPS)
    return _cooked


class GoRand:
    """A math/rand.Rand over rngSource, seeded as rand.Seed(seed) seeds it."""

    def __init__(self, seed):
        seed %= _PARK_MILLER
        if seed == 0:
            seed = 89482311
        words = _park_miller_words(seed, 40, 20)
        self._words = [w ^ c for w, c in zip(words, cooked_words())]
        self._tap, self._feed = 0, _LONG - _SHORT

    def uint64(self):
        self._tap = (self._tap - 1) % _LONG
        self._feed = (self._feed - 1) % _LONG
        x = (self._words[self._feed] + self._words[self._tap]) & _MASK64
        self._words[self._feed] = x
        return x

    def int63(self):
        return self.uint64() & ((1 << 63) - 1)

    def int31(self):
        return self.int63() >> 32

    def uint32(self):
        return (self.int63() >> 31) & 0xFFFFFFFF

    def intn(self, n):
        """rand.Intn for 0 < n < 2^31."""
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        top = (1 << 31) - 1 - (1 << 31) % n
        v = self.int31()
        while v > top:
            v = self.int31()
        return v % n

    def _int31n_lemire(self, n):
        product = self.uint32() * n
        if product & 0xFFFFFFFF < n:
            threshold = ((1 << 32) - n) % n
            while product & 0xFFFFFFFF < threshold:
                product = self.uint32() * n
        return product >> 32

    def shuffle(self, items):
        """rand.Shuffle over a list of fewer than 2^31 items, in place."""
        for i in range(len(items) - 1, 0, -1):
            j = self._int31n_lemire(i + 1)
            items[i], items[j] = items[j], items[i]
