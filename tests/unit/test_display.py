import pytest

from ftbench.api.display import display_round, rounded
from ftbench.api.status import Stability


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3489.5482115405125, 3489.55),
        (45.6789, 45.68),
        (5.6789, 5.679),
        (0.0123456, 0.01235),
        (1 / 3, 0.3333),
        (0.6, 0.6),
        (123456789.123, 123456789.12),
        (0.0, 0.0),
        (-2.34567, -2.346),
    ],
)
def test_at_least_two_decimals_and_four_significant_digits(value: float, shown: float) -> None:
    assert display_round(value) == shown


def test_rounded_touches_only_floats() -> None:
    stability = rounded(Stability(trials_planned=3, trials_finished=3, f_no_error=2 / 3, f_gpu_oom=1 / 3))
    assert (stability.f_no_error, stability.f_gpu_oom, stability.trials_planned) == (0.6667, 0.3333, 3)
