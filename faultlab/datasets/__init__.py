"""Published labeled datasets: build, verify, describe and export them
(``faultlab dataset build|verify|info|export``). Layout: :mod:`faultlab.datasets.layout`."""

from faultlab.datasets.layout import Dataset

__all__ = ["Dataset"]
