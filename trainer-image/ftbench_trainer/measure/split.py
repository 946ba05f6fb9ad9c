"""A peak's bytes by holder: torch-free, so a cached trace is read without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    """Bytes live at a phase's peak, by holder."""

    parameters: int
    gradients: int
    optimizer: int
    other: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.other
