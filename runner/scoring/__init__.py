"""Scoring glue of the replay: the plan-vs-marks check and the pack's worked-example format.

The arithmetic (metrics, marks, the report) is ``attestation.scoring``, shared with the
verifier.
"""
