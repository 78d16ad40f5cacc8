"""Small running statistics shared by the agents."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class RunningMoments:
    """Running mean and sample variance of a stream (Welford's update: numerically stable,
    O(1) memory)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    @property
    def variance(self) -> float:
        """Sample variance; infinite until two values were seen (nothing is known yet)."""
        return self.m2 / (self.count - 1) if self.count > 1 else math.inf

    @property
    def std(self) -> float:
        """Sample standard deviation; 0 until two values were seen."""
        return math.sqrt(self.variance) if self.count > 1 else 0.0
