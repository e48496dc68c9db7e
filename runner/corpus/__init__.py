"""The corpus directory: cases, run records, pass marks and the plan."""

from __future__ import annotations

from runner.corpus.checksum import CaseScan, compute_checksum, scan_cases
from runner.corpus.errors import CorpusError, CorpusOrderError

__all__ = ["CaseScan", "CorpusError", "CorpusOrderError", "compute_checksum", "scan_cases"]
