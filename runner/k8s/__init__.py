"""Kubernetes side of attested-replay: build replay Jobs, submit them, track many at once.

* :mod:`runner.k8s.job` builds the Job and its init-data (pure: a dict in the API's wire form).
* :mod:`runner.k8s.submit` creates Jobs idempotently and collects verified envelopes.
* :mod:`runner.k8s.watch` tracks any number of runs with one Job watch and one Pod watch.
"""
