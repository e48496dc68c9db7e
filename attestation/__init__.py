"""Offline verification of AMD SEV-SNP attestation envelopes.

This package is the tenant side of attested-replay. It is pure: it depends only on
``cryptography`` and ``pydantic``, never on ``runner``, ``requests`` or ``kubernetes``.
Time (``now``) and trust roots are always arguments.
"""

__version__ = "0.1.0"
