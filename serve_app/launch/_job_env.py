"""What travels with vidforge's Ray job to every node: the environment its tasks need to reach the media store.

A node the autoscaler starts, or one joined with `ray start --address`, has only its own environment, not that of the
shell that ran `vidforge serve`. Ray's job runtime environment (`ray.init(runtime_env={"env_vars": ...})`) reaches
every process of the job: the actors it creates (registry, supervisor), the tasks they submit (segments, audio,
preview, mux) wherever they run, and the Serve replicas (`serve.run` takes the job's runtime environment as the
application's). The settings themselves travel as the Config those actors and replicas are handed; what the task
bodies need besides is the bucket's location, and its credentials:

- AWS_REGION, AWS_DEFAULT_REGION and AWS_ENDPOINT_URL travel whenever the media are in a bucket (no secret in them);
- AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN only with VIDFORGE_SHIP_STORAGE_CREDENTIALS=true:
  a runtime environment is stored in the cluster's GCS, readable by whoever may use the cluster. Otherwise each
  node reaches the bucket with its own credentials (an instance role, or its own environment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from serve_app._config import Config

STORAGE_LOCATION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
STORAGE_CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def job_env_vars(config: Config, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of `environ` that every worker of the job gets (none with media on the data dir)."""
    if not config.storage_url:
        return {}
    names = STORAGE_LOCATION_VARS + (STORAGE_CREDENTIAL_VARS if config.ship_storage_credentials else ())
    return {name: environ[name] for name in names if environ.get(name)}


def job_runtime_env(config: Config, environ: Mapping[str, str] = os.environ) -> dict[str, dict[str, str]] | None:
    """`ray.init`'s runtime_env for vidforge's job; None when nothing travels (as on a single node)."""
    env_vars = job_env_vars(config, environ)
    return {"env_vars": env_vars} if env_vars else None
