"""Display rules (docs/rules.md#display-rules): whole seconds rounded up,
cents, four decimals of ms; three significant digits where those would hide
every digit, and a ranked value with its unit."""

import pytest

from dawnpipe.display import format_hours, format_ms, format_usd, format_value


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (9.43, "0:00:10"),  # the published leaderboard's own example
        (10.0, "0:00:10"),  # exactly 10 s stays 10 s despite float noise in 10/3600
        (10.000001, "0:00:11"),
        (0.0, "0:00:00"),
        (0.2, "0:00:01"),
        (59.5, "0:01:00"),
        (3599.01, "1:00:00"),
        (3600.0, "1:00:00"),
        (158.0, "0:02:38"),  # ImageNet record, 128 V100
        (1126.0, "0:18:46"),  # SQuAD record
        (36 * 3600 + 61, "36:01:01"),
    ],
)
def test_hours_round_up_to_whole_seconds(seconds, shown):
    assert format_hours(seconds / 3600.0) == shown


def test_published_cifar10_hours_show_as_ten_seconds():
    assert format_hours(0.0027) == "0:00:10"  # 9.72 s


@pytest.mark.parametrize(("usd", "shown"), [(0.0, "$0.00"), (0.005, "$0.01"), (0.02, "$0.02"), (1234.567, "$1,234.57"), (3.06, "$3.06")])
def test_costs_in_dollars_with_two_decimals(usd, shown):
    assert format_usd(usd) == shown


@pytest.mark.parametrize(
    ("usd", "shown"),
    [
        (0.004, "$0.00400"),
        (0.000412345, "$0.000412"),  # a CPU run's cost: not "$0.00"
        (0.00041250, "$0.000413"),  # half up
        (1.23e-6, "$0.00000123"),  # plain decimals, never 1.23E-6
        (0.0049996, "$0.00500"),
    ],
)
def test_a_cost_under_half_a_cent_shows_three_significant_digits(usd, shown):
    assert format_usd(usd) == shown


@pytest.mark.parametrize(
    ("ms", "shown"), [(0.1345, "0.1345"), (0.13445, "0.1345"), (0.13444, "0.1344"), (12.0, "12.0000"), (0.0, "0.0000"), (0.0779, "0.0779")]
)
def test_latency_in_ms_with_four_decimals(ms, shown):
    assert format_ms(ms) == shown


@pytest.mark.parametrize(("ms", "shown"), [(0.000123456, "0.000123"), (0.0009996, "0.00100"), (0.001, "0.0010")])
def test_a_latency_under_a_microsecond_shows_three_significant_digits(ms, shown):
    assert format_ms(ms) == shown


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), None])
def test_bad_values_are_refused(bad):
    for fn in (format_hours, format_usd, format_ms):
        with pytest.raises(ValueError):
            fn(bad)


def test_format_value_by_unit():
    assert format_value(0.0027, "hours") == "0:00:10"
    assert format_value(0.01, "USD per 10,000 items") == "$0.01"
    assert format_value(0.0779, "ms") == "0.0779 ms"  # a ranked latency says its unit
    assert format_value(32.0, "minutes") == "32.000 min"
