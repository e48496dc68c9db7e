"""Operator and pod side of attested-replay: corpus, replay, evidence, Kubernetes, publishing."""

__version__ = "0.1.0"
