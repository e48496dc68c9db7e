"""The evaluation arithmetic a tenant's verifier re-runs: pure (pydantic and the standard library).

A sharded replay emits one attested partial per shard; verifying the merged envelope means
recomputing the merge, so the arithmetic that turns partials into the evaluation report lives
here, beside the verifier, and the replay (``runner``) imports the same implementation.
"""
