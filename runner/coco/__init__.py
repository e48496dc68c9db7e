"""Confidential Containers guest configuration: the Kata agent policy of a replay pod.

:mod:`runner.coco.policy` renders ``policy.rego`` (the rules in ``agent_policy.rego`` plus a
table derived from the pod spec); :mod:`runner.coco.kata` holds the upstream facts it relies on.
"""
