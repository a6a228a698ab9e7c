"""Imported by the workers' fork server only, last (``bidder.serve.worker_start.PRELOADED``).

Importing it does two things for every process the server forks:

- reads the botocore models of the AWS services that workers and the reconciler call
  into the process's boto3 session, so each forked process builds its clients from them
  instead of reading them again (about 0.2 s of CPU per process);
- moves everything the server has loaded so far into the garbage collector's permanent
  generation (``gc.freeze``). A forked worker collects once it has started, then freezes
  what it built; without this, that collection walked the whole inherited heap
  (LightGBM, SciPy, botocore), writing to every object's header and so copying every
  page of it from the server (docs/decisions.md, "The fork server freezes its heap").

Nothing else in bidsim imports it.
"""

from __future__ import annotations

import gc

from bidder.adapters.aws import load_models

SERVICES = ("dynamodb", "kinesis", "s3")
"""Every service a worker (``bidder.serve._loads``) or the reconciler
(``pacing.reconciler``) builds a client of."""

load_models(SERVICES)
gc.collect()
gc.freeze()
