"""Raw-report verification: the policy a tenant accepts, the ordered check records, and the
verifier that runs every stage in the order of the exit-code table."""
