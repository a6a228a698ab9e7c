"""Imported by the workers' fork server only (``bidder.serve.worker_start.PRELOADED``):
importing it reads the botocore models of the AWS services that workers and the
reconciler call into the process's boto3 session, so every process forked from the
server builds its clients from them instead of reading them again (about 0.2 s of CPU
per process). Nothing else in bidsim imports it.
"""

from __future__ import annotations

from bidder.adapters.aws import load_models

SERVICES = ("dynamodb", "kinesis", "s3")
"""Every service a worker (``bidder.serve._loads``) or the reconciler
(``pacing.reconciler``) builds a client of."""

load_models(SERVICES)
