"""The report's endorsement: VCEK/VLEK certificates with AMD's KDS extensions (read with a
strict DER reader), AMD's pinned roots, and the chain from the certificate to a pinned root."""
