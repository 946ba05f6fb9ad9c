"""The one error the dataset generators raise, shared by the text and vision writers."""

from __future__ import annotations


class DatasetError(ValueError):
    """Unknown dataset id or invalid parameters."""
