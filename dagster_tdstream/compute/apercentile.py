"""``apercentile`` as TDengine computes it: its histogram (``'default'``) and its t-digest.

Owns the two approximations of TDengine's ``apercentile(col, p[, algorithm])``, written after
its ``thistogram.c`` (Ben-Haim and Tom-Tov's streaming histogram: at most 500 bins, the two
closest merged when a value would make 501, the quantile read off the bins by the paper's
trapezoid procedure) and ``tdigest.c`` (a merging t-digest of compression 300, buffering 100
points between compressions; a value equal to the one buffered just before it is dropped, as
TDengine's ``tdigestAdd`` does). Values go in in the order TDengine scans them, time order.
With at most 500 distinct values the histogram is exact bins and the answer does not depend on
the order. Spark calls ``apercentile`` through a Python UDF the session registers
(``compute/spark.py``, named ``APERCENTILE_UDF``) over the group's values collected in time
order. Must not touch Spark.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

MAX_HISTOGRAM_BIN = 500
COMPRESSION = 300
_CENTROIDS = int(math.ceil(COMPRESSION * math.pi / 2) + 1 + 2)  # GET_CENTROID, with ADDITION_CENTROID_NUM
_THRESHOLD = int(7.5 + 0.37 * COMPRESSION - 2e-4 * COMPRESSION**2)  # GET_THRESHOLD
_DOUBLE_MAX = 1.79e308
_FLT_EPSILON = 1.1920928955078125e-07


def apercentile(values: Sequence[float] | None, percent: float, algorithm: str = "default") -> float | None:
    """The ``percent`` (0-100) approximate percentile of ``values`` (time order, no NULLs);
    None for none."""
    if not values:
        return None
    if algorithm.lower() == "t-digest":
        return _tdigest(values, percent / 100)
    return _histogram(values, percent)


def _histogram(values: Sequence[float], percent: float) -> float:
    vals: list[float] = []
    nums: list[int] = []
    low, high = _DOUBLE_MAX, -_DOUBLE_MAX
    for value in values:
        v = float(value)
        at = bisect_left(vals, v)
        if at < len(vals) and vals[at] == v:
            nums[at] += 1
        else:
            vals.insert(at, v)
            nums.insert(at, 1)
            if len(vals) == MAX_HISTOGRAM_BIN + 1:
                _merge_closest(vals, nums)
        low, high = min(low, v), max(high, v)
    return _uniform(vals, nums, len(values), low, high, percent)


def _merge_closest(vals: list[float], nums: list[int]) -> None:
    """histogramMergeImpl: the first pair of neighbouring bins closest in value becomes one."""
    delta, index = math.inf, -1
    for i in range(1, len(vals)):
        if vals[i] - vals[i - 1] < delta:
            delta, index = vals[i] - vals[i - 1], i - 1
    total = nums[index] + nums[index + 1]
    vals[index] = (vals[index] * nums[index] + vals[index + 1] * nums[index + 1]) / total
    nums[index] = total
    del vals[index + 1], nums[index + 1]


def _uniform(vals: list[float], nums: list[int], count: int, low: float, high: float, percent: float) -> float:
    """tHistogramUniform: the value below which ``percent`` of the elements lie."""
    wanted = percent / 100 * count
    if wanted == 0:
        return low
    if wanted <= nums[0]:
        return vals[0]
    if wanted == count:
        return high
    j, total = 0, 0
    while j < len(vals):
        total += nums[j]
        following = nums[j + 1] if j + 1 < len(nums) else 0
        if total <= wanted < total + following:
            break
        j += 1
    delta = wanted - total
    start = float(nums[j])
    span = nums[j + 1] - start
    if span == 0:
        return (vals[j + 1] - vals[j]) * delta / start + vals[j]
    factor = (-2 * start + math.sqrt(4 * start * start - 4 * span * (-2 * delta))) / (2 * span)
    return vals[j] + (vals[j + 1] - vals[j]) * factor


class _TDigest:
    def __init__(self) -> None:
        self.total = 0
        self.low, self.high = _DOUBLE_MAX, -_DOUBLE_MAX
        self.buffered: list[float] = []
        self.centroids: list[list[float]] = []  # [mean, weight]

    def add(self, value: float) -> None:
        if self.buffered and self.buffered[-1] == value:
            return  # tdigestAdd writes the weight past the last point and does not count it
        self.buffered.append(value)
        if len(self.buffered) >= _THRESHOLD:
            self.compress()

    def compress(self) -> None:
        if not self.buffered:
            return
        unmerged = sorted(self.buffered)
        self.buffered = []
        self.total += len(unmerged)
        merged: list[list[float]] = [[0.0, 0] for _ in range(_CENTROIDS)]
        state = {"idx": 0, "so_far": 0.0, "k1": 0.0, "min": _DOUBLE_MAX, "max": -_DOUBLE_MAX}
        i = j = 0
        while i < len(unmerged) and j < len(self.centroids):
            if unmerged[i] <= self.centroids[j][0]:
                self._merge(merged, state, unmerged[i], 1)
                i += 1
            else:
                self._merge(merged, state, *self.centroids[j])
                j += 1
        for value in unmerged[i:]:
            self._merge(merged, state, value, 1)
        for mean, weight in self.centroids[j:]:
            self._merge(merged, state, mean, weight)
        idx = int(state["idx"])
        if self.total > 0:
            self.low = min(self.low, state["min"])
            if merged[idx][1] <= 0:
                idx -= 1
            self.high = max(self.high, state["max"])
        self.centroids = merged[: idx + 1]

    def _merge(self, merged: list[list[float]], state: dict[str, float], mean: float, weight: float) -> None:
        """mergeCentroid."""
        state["so_far"] += weight
        q = state["so_far"] / self.total
        k2 = _CENTROIDS * (math.asin(2 * q - 1) / math.pi + 0.5)
        idx = int(state["idx"])
        if k2 - state["k1"] > 1 and merged[idx][1] > 0:
            if idx + 1 < _CENTROIDS and mean != merged[idx][0]:
                idx += 1
                state["idx"] = idx
            state["k1"] = k2
        c = merged[idx]
        c[1] += weight
        if c[0] != mean:
            c[0] += (mean - c[0]) * weight / c[1]
            if weight > 0:
                state["min"], state["max"] = min(mean, state["min"]), max(mean, state["max"])

    def quantile(self, q: float) -> float | None:
        self.compress()
        if not self.centroids:
            return None
        if len(self.centroids) == 1:
            return self.centroids[0][0]
        if abs(q) <= _FLT_EPSILON:
            return self.low
        if abs(q - 1) <= _FLT_EPSILON:
            return self.high
        idx = q * self.total
        so_far = 0.0
        b_mean, b_weight = self.low, 0.0
        right = self.low
        for mean, weight in self.centroids:
            a_mean, a_weight = b_mean, b_weight
            left = right
            b_mean, b_weight = mean, weight
            right = (b_weight * a_mean + a_weight * b_mean) / (a_weight + b_weight)
            if idx < so_far + a_weight:
                p = (idx - so_far) / (a_weight if a_weight else 1)
                return left * (1 - p) + right * p
            so_far += a_weight
        left, a_weight, right = right, b_weight, self.high
        if idx < so_far + a_weight and a_weight != 0:
            p = (idx - so_far) / a_weight
            return left * (1 - p) + right * p
        return self.high


def _tdigest(values: Sequence[float], q: float) -> float | None:
    digest = _TDigest()
    for value in values:
        digest.add(float(value))
    return digest.quantile(q)
