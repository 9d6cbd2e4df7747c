"""A tiny module for the CI recipe: arithmetic on lists of numbers."""


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def clamp(value, low, high):
    """`value` limited to the range [low, high]."""
    if low > high:
        raise ValueError("low is above high")
    return max(low, min(high, value))
