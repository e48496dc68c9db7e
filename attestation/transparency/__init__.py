"""Verification of the publication log a tenant reads: RFC 6962 inclusion and consistency
proofs, C2SP signed checkpoints, and the log entry each leaf commits to. Pure: the tenant's
network client is ``attestation.tenant.fetch``; the service that builds the log is
``runner.service``."""
